// Reading Vega's SVG output in tests: the point marks carry an aria-label per plotted value.
import assert from 'node:assert/strict';

/** `aria-label`s of the point marks in a Vega SVG, one per plotted value. */
export function pointLabels(svg: string): string[] {
  const symbols = svg.match(/<g class="mark-symbol role-mark[^"]*"[^>]*>([\s\S]*?)<\/g>/);
  assert.ok(symbols, 'a group of point marks');
  return [...symbols[1].matchAll(/aria-label="([^"]*)"/g)].map((m) => m[1]);
}

/** Iterations plotted for one series, in drawing order. */
export function seriesIterations(svg: string, series: string): number[] {
  return pointLabels(svg)
    .filter((l) => l.endsWith(`series: ${series}`))
    .map((l) => Number(/iteration: (\d+)/.exec(l)![1]));
}
