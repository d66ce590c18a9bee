import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PNG } from 'pngjs';
import { pointLabels } from '../helpers/plots.ts';
import { parseMetricsJsonl, renderChart, rewardChart, writeRewardPlot } from '../../lib/plot.ts';

function inkIn(png: PNG, x0: number, y0: number, x1: number, y1: number): number {
  let n = 0;
  for (let y = y0; y < y1; y++)
    for (let x = x0; x < x1; x++) {
      const i = (y * png.width + x) * 4;
      if (png.data[i] < 200 || png.data[i + 1] < 200 || png.data[i + 2] < 200) n++;
    }
  return n;
}

test('writeRewardPlot: SVG with one point per iteration and series, labelled axes, a PNG that decodes', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'plot-test-'));
  try {
    // FrozenLake-like: successRate equals meanReward, so the second series lies exactly on the first
    const rewards = [0.05, 0.2, 0.45, 0.6, 0.8, 0.85, 0.9];
    const rows = rewards.map((r, iteration) => JSON.stringify({ iteration, meanReward: r, successRate: r, episodes: 16 }));
    const metrics = join(dir, 'metrics.jsonl');
    await writeFile(metrics, [JSON.stringify({ config: { lr: 0.003 } }), ...rows].join('\n') + '\n');

    const [htmlPath, svgPath, pngPath] = await writeRewardPlot(metrics, join(dir, 'reward.html'), 'FrozenLake reward');
    assert.equal(svgPath, join(dir, 'reward.svg'));
    assert.equal(pngPath, join(dir, 'reward.png'));

    const svg = await readFile(svgPath, 'utf8');
    const labels = pointLabels(svg);
    for (const series of ['mean reward', 'success rate']) {
      const mine = labels.filter((l) => l.endsWith(`series: ${series}`));
      assert.deepEqual(
        mine.map((l) => Number(/iteration: (\d+)/.exec(l)![1])),
        rewards.map((_, i) => i),
        `${series}: one point per iteration`,
      );
      assert.deepEqual(
        mine.map((l) => Number(/success rate: ([\d.]+)/.exec(l)![1])),
        rewards,
        `${series}: the values`,
      );
    }
    assert.equal(labels.length, 2 * rewards.length, 'no other points');
    assert.match(svg, /stroke-dasharray="6,4"/, 'success rate dashed so the mean reward shows through');
    for (const label of ['FrozenLake reward', '>iteration<', '>mean reward / success rate<', '>mean reward<', '>success rate<']) assert.ok(svg.includes(label), `SVG has ${label}`);
    const html = await readFile(htmlPath, 'utf8');
    assert.ok(html.includes(svg), 'the HTML page embeds the SVG');
    assert.equal((html.match(/<tr><td>/g) ?? []).length, rewards.length, 'one table row per iteration');

    const png = PNG.sync.read(await readFile(pngPath));
    assert.ok(png.width > 500 && png.height > 250, `PNG size ${png.width}×${png.height}`);
    assert.ok(inkIn(png, 0, 0, png.width, 30) > 100, 'title text drawn in the top band');
    assert.ok(inkIn(png, 0, 40, 60, png.height - 40) > 100, 'y axis labels drawn on the left');
    let blue = 0;
    for (let i = 0; i < png.data.length; i += 4) if (png.data[i + 2] > 150 && png.data[i] < 120) blue++;
    assert.ok(blue > 500, `the wide mean-reward line is drawn (${blue} blue pixels)`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('evaluation scores in the metrics become their own series, at the iterations that have them', async () => {
  const text = [
    { iteration: 0, meanReward: 0.1, successRate: 0.1 },
    { iteration: 1, meanReward: 0.2, successRate: 0.2, eval: { pass1: 0.15, passAtK: { 4: 0.3 } } },
    { iteration: 2, meanReward: 0.3, successRate: 0.3 },
    { iteration: 3, meanReward: 0.4, successRate: 0.4, eval: { pass1: 0.25, passAtK: { 4: 0.5 } } },
  ]
    .map((r) => JSON.stringify(r))
    .join('\n');
  const points = parseMetricsJsonl(text);
  assert.deepEqual(points[1].eval, { pass1: 0.15, 'passAtK.4': 0.3 });
  const chart = rewardChart(points, 'with eval');
  assert.deepEqual(
    chart.series.map((s) => s.name),
    ['mean reward', 'success rate', 'eval pass1', 'eval passAtK.4'],
  );
  const { svg, png } = await renderChart(chart);
  const evalPoints = pointLabels(svg).filter((l) => l.endsWith('series: eval pass1'));
  assert.deepEqual(
    evalPoints.map((l) => Number(/iteration: (\d+)/.exec(l)![1])),
    [1, 3],
  );
  assert.ok(PNG.sync.read(png).width > 0);
});
