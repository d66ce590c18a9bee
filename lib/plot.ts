// Charts as Vega-Lite specs: SVG from Vega's headless renderer, PNG from that SVG through resvg (DejaVu/system
// fonts). A run's curves per iteration (reward, success rate, evaluation scores) and curves over k (pass@k,
// Best@K) for the evaluation reports. Both libraries load lazily: importing this module costs nothing until a chart is drawn.

import { readFile, writeFile, rename } from 'node:fs/promises';

export interface RewardPoint {
  iteration: number;
  meanReward: number;
  successRate: number;
  /** evaluation scores of this iteration's checkpoint (e.g. pass@1), when one ran */
  eval?: Record<string, number>;
}

/** Numeric leaves of an evaluation summary as `a.b` names (`{passAtK: {1: 0.2}}` → `passAtK.1`). */
function numericLeaves(v: unknown, prefix = '', out: Record<string, number> = {}): Record<string, number> {
  if (typeof v === 'number' && Number.isFinite(v)) out[prefix] = v;
  else if (v && typeof v === 'object' && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v)) numericLeaves(x, prefix ? `${prefix}.${k}` : k, out);
  }
  return out;
}

/** Reads `{iteration, meanReward, successRate, eval?}` rows (nested under `metrics` is also accepted). */
export function parseMetricsJsonl(text: string): RewardPoint[] {
  const out: RewardPoint[] = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    /** a metrics line: its fields, maybe nested under `metrics` */
    type Row = { metrics?: Row; iteration?: unknown; meanReward?: unknown; successRate?: unknown; eval?: unknown };
    let row: Row;
    try {
      row = JSON.parse(line) as Row;
    } catch {
      throw new Error(`metrics line ${i + 1} is not JSON: ${line.slice(0, 80)}`);
    }
    const m = row.metrics && typeof row.metrics === 'object' ? { ...row.metrics, ...row } : row;
    const iteration = Number(m.iteration ?? out.length);
    const meanReward = Number(m.meanReward);
    const successRate = Number(m.successRate ?? m.meanReward);
    if (!Number.isFinite(meanReward)) return; // rows without rewards (config, events) are skipped
    const p: RewardPoint = { iteration, meanReward, successRate };
    const ev = m.eval && typeof m.eval === 'object' ? numericLeaves(m.eval) : {};
    if (Object.keys(ev).length) p.eval = ev;
    out.push(p);
  });
  return out;
}

export interface ChartSeries {
  name: string;
  points: { x: number; y: number }[];
  /** line width in px (default 2) */
  width?: number;
  dashed?: boolean;
}

export interface LineChart {
  title: string;
  xTitle: string;
  yTitle: string;
  series: ChartSeries[];
  /** fixed y range; default from the data */
  yDomain?: [number, number];
  /** integer x ticks (iterations, k) */
  integerX?: boolean;
  width?: number;
  height?: number;
}

/** The Vega-Lite spec of a line chart with a point per value (kept beside the images, re-renderable). */
export function lineChartSpec(c: LineChart): Record<string, unknown> {
  const names = c.series.map((s) => s.name);
  const values = c.series.flatMap((s) => s.points.map((p) => ({ x: p.x, y: p.y, series: s.name })));
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: c.title,
    width: c.width ?? 600,
    height: c.height ?? 300,
    background: 'white',
    config: { font: 'DejaVu Sans, sans-serif' },
    data: { values },
    mark: { type: 'line', point: { size: 30 } },
    encoding: {
      x: { field: 'x', type: 'quantitative', title: c.xTitle, ...(c.integerX ? { axis: { tickMinStep: 1, format: 'd' } } : {}) },
      y: { field: 'y', type: 'quantitative', title: c.yTitle, ...(c.yDomain ? { scale: { domain: c.yDomain } } : {}) },
      color: { field: 'series', type: 'nominal', title: null, sort: names, legend: { orient: 'top' } },
      strokeWidth: { field: 'series', type: 'nominal', title: null, sort: names, scale: { domain: names, range: c.series.map((s) => s.width ?? 2) } },
      strokeDash: {
        field: 'series',
        type: 'nominal',
        title: null,
        sort: names,
        scale: { domain: names, range: c.series.map((s) => (s.dashed ? [6, 4] : [1, 0])) },
      },
    },
  };
}

/** SVG of a Vega-Lite spec, rendered without a browser. */
export async function renderSvg(spec: Record<string, unknown>): Promise<string> {
  const [vega, vl] = await Promise.all([import('vega'), import('vega-lite')]);
  const view = new vega.View(vega.parse(vl.compile(spec as never).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** PNG of an SVG (resvg: prebuilt per platform from npm, no browser, no canvas). */
export async function svgToPng(svg: string, scale = 1): Promise<Buffer> {
  const { Resvg } = await import('@resvg/resvg-js');
  const r = new Resvg(svg, {
    background: 'white',
    fitTo: scale === 1 ? { mode: 'original' } : { mode: 'zoom', value: scale },
    font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans', sansSerifFamily: 'DejaVu Sans' },
  });
  return Buffer.from(r.render().asPng());
}

export const DEFAULT_TITLE = 'Reward per iteration';

/** The reward chart: mean reward wide underneath, success rate thin and dashed on top (they coincide for 0/1 rewards), evaluation scores as their own lines. */
export function rewardChart(points: RewardPoint[], title = DEFAULT_TITLE): LineChart {
  const evalNames = [...new Set(points.flatMap((p) => Object.keys(p.eval ?? {})))].sort();
  const series: ChartSeries[] = [
    { name: 'mean reward', points: points.map((p) => ({ x: p.iteration, y: p.meanReward })), width: 6 },
    { name: 'success rate', points: points.map((p) => ({ x: p.iteration, y: p.successRate })), width: 2, dashed: true },
    ...evalNames.map((k) => ({
      name: `eval ${k}`,
      points: points.filter((p) => p.eval?.[k] !== undefined).map((p) => ({ x: p.iteration, y: p.eval![k] })),
      width: 2,
    })),
  ];
  const ys = series.flatMap((s) => s.points.map((p) => p.y));
  const yDomain: [number, number] = [Math.min(0, ...ys), Math.max(1, ...ys)];
  return { title, xTitle: 'iteration', yTitle: 'mean reward / success rate', series, yDomain, integerX: true };
}

export async function rewardSvg(points: RewardPoint[], title = DEFAULT_TITLE): Promise<string> {
  return renderSvg(lineChartSpec(rewardChart(points, title)));
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** A self-contained page: the chart's SVG and the numbers under it. */
export function rewardHtml(points: RewardPoint[], svg: string, title = DEFAULT_TITLE): string {
  const evalNames = [...new Set(points.flatMap((p) => Object.keys(p.eval ?? {})))].sort();
  const rows = points
    .map(
      (p) =>
        `<tr><td>${p.iteration}</td><td>${p.meanReward.toFixed(3)}</td><td>${p.successRate.toFixed(3)}</td>${evalNames.map((k) => `<td>${p.eval?.[k]?.toFixed(3) ?? ''}</td>`).join('')}</tr>`,
    )
    .join('\n');
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style>
</head><body>
${svg}
<table><thead><tr><th>iteration</th><th>mean reward</th><th>success rate</th>${evalNames.map((k) => `<th>eval ${esc(k)}</th>`).join('')}</tr></thead><tbody>
${rows}
</tbody></table>
</body></html>
`;
}

export interface RenderedChart {
  spec: Record<string, unknown>;
  svg: string;
  png: Buffer;
}

/** Spec, SVG and PNG of a chart. */
export async function renderChart(c: LineChart): Promise<RenderedChart> {
  const spec = lineChartSpec(c);
  const svg = await renderSvg(spec);
  return { spec, svg, png: await svgToPng(svg) };
}

async function writeAtomic(path: string, data: string | Buffer): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, data);
  await rename(tmp, path);
}

/**
 * Writes `outPath` (HTML: the chart's SVG and a table of the numbers) and, beside it, `.svg` and `.png`
 * of mean reward, success rate and evaluation scores per iteration. Returns the written paths.
 */
export async function writeRewardPlot(metricsJsonlPath: string, outPath: string, title?: string): Promise<string[]> {
  const points = parseMetricsJsonl(await readFile(metricsJsonlPath, 'utf8'));
  const html = outPath.endsWith('.html') ? outPath : `${outPath}.html`;
  const base = html.replace(/\.html$/, '');
  const chart = await renderChart(rewardChart(points, title));
  await writeAtomic(`${base}.svg`, chart.svg);
  await writeAtomic(`${base}.png`, chart.png);
  await writeAtomic(html, rewardHtml(points, chart.svg, title));
  return [html, `${base}.svg`, `${base}.png`];
}

/** A curve chart over k (pass@k, Best@K) as report files: an HTML page with its SVG and a table, the PNG and the Vega-Lite spec. */
export async function curvePlotFiles(
  base: string,
  title: string,
  series: { name: string; values: (number | null)[]; dashed?: boolean }[],
): Promise<[string, string | Uint8Array][]> {
  const chart = await renderChart({
    title,
    xTitle: 'k',
    yTitle: 'resolved rate',
    series: series.map((x) => ({ name: x.name, points: x.values.flatMap((y, i) => (y === null ? [] : [{ x: i + 1, y }])), ...(x.dashed ? { dashed: true } : {}) })),
    yDomain: [0, 1],
    integerX: true,
  });
  const cell = (v: number | null | undefined) => (v === null || v === undefined ? '' : `${(100 * v).toFixed(1)}%`);
  const rows = series[0]!.values.map((_, i) => `<tr><td>${i + 1}</td>${series.map((x) => `<td>${cell(x.values[i])}</td>`).join('')}</tr>`).join('\n');
  const html = `<!doctype html>\n<html><head><meta charset="utf-8"><title>${esc(title)}</title><style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style></head><body>\n${chart.svg}\n<table><thead><tr><th>k</th>${series.map((x) => `<th>${esc(x.name)}</th>`).join('')}</tr></thead><tbody>\n${rows}\n</tbody></table>\n</body></html>\n`;
  return [
    [`${base}.html`, html],
    [`${base}.svg`, chart.svg],
    [`${base}.png`, chart.png],
    [`${base}.vl.json`, JSON.stringify(chart.spec)],
  ];
}
