import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32, inflateSync } from 'node:zlib';
import { writeRewardPlot } from '../lib/plot.ts';

const WIDTH = 720; // as documented on rewardPng
const HEIGHT = 400;
const CHANNELS = 3; // RGB
const WHITE = [255, 255, 255];

interface Png {
  width: number;
  height: number;
  pixel: (x: number, y: number) => number[];
}

/** Checks signature, chunk CRCs and IDAT size; returns the pixels (filter type 0 only, as we write). */
function decodePng(buf: Buffer): Png {
  assert.deepEqual([...buf.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature');
  const types: string[] = [];
  const idat: Buffer[] = [];
  let ihdr: Buffer | undefined;
  for (let at = 8; at < buf.length; ) {
    const len = buf.readUInt32BE(at);
    const type = buf.toString('ascii', at + 4, at + 8);
    const data = buf.subarray(at + 8, at + 8 + len);
    assert.equal(buf.readUInt32BE(at + 8 + len), crc32(buf.subarray(at + 4, at + 8 + len)), `CRC of ${type}`);
    types.push(type);
    if (type === 'IHDR') ihdr = data;
    if (type === 'IDAT') idat.push(data);
    at += 12 + len;
  }
  assert.equal(types[0], 'IHDR');
  assert.equal(types.at(-1), 'IEND');
  assert.ok(ihdr);
  const width = ihdr.readUInt32BE(0);
  const height = ihdr.readUInt32BE(4);
  assert.equal(ihdr[8], 8, 'bit depth');
  assert.equal(ihdr[9], 2, 'colour type RGB');
  const raw = inflateSync(Buffer.concat(idat));
  const stride = 1 + width * CHANNELS;
  assert.equal(raw.length, height * stride, 'IDAT inflates to height×(1+width×channels)');
  for (let y = 0; y < height; y++) assert.equal(raw[y * stride], 0, `filter type of row ${y}`);
  const pixel = (x: number, y: number) => [...raw.subarray(y * stride + 1 + x * CHANNELS, y * stride + 1 + (x + 1) * CHANNELS)];
  return { width, height, pixel };
}

/** Non-background pixels in the rectangle [x0, x1) × [y0, y1). */
function inkIn(png: Png, x0: number, y0: number, x1: number, y1: number): number {
  let n = 0;
  for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) if (png.pixel(x, y).some((v, i) => v !== WHITE[i])) n++;
  return n;
}

function countColour(png: Png, rgb: number[]): number {
  let n = 0;
  for (let y = 0; y < png.height; y++) for (let x = 0; x < png.width; x++) if (png.pixel(x, y).every((v, i) => v === rgb[i])) n++;
  return n;
}

test('writeRewardPlot: labelled SVG in the HTML and a labelled, valid PNG beside it', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'plot-test-'));
  try {
    // FrozenLake-like: successRate equals meanReward, so the second series lies exactly on the first
    const rewards = [0.05, 0.2, 0.45, 0.6, 0.8];
    const rows = rewards.map((r, iteration) => JSON.stringify({ iteration, meanReward: r, successRate: r, episodes: 16 }));
    const metrics = join(dir, 'metrics.jsonl');
    await writeFile(metrics, [JSON.stringify({ config: { lr: 0.003 } }), ...rows].join('\n') + '\n');

    const [htmlPath, pngPath] = await writeRewardPlot(metrics, join(dir, 'reward.html'), 'FrozenLake reward');
    assert.equal(pngPath, join(dir, 'reward.png'));

    const html = await readFile(htmlPath, 'utf8');
    assert.match(html, /<svg[^>]*>/);
    const polylines = [...html.matchAll(/<polyline points="([^"]*)"/g)].map((m) => m[1].trim().split(/\s+/));
    assert.equal(polylines.length, 2, 'one polyline per series');
    for (const pts of polylines) assert.equal(pts.length, rewards.length, 'one point per iteration');
    assert.match(html, /stroke-dasharray/, 'second series dashed so the first shows through');
    for (const label of ['FrozenLake reward', '>iteration<', '>mean reward / success rate<', '>mean reward<', '>success rate<', '>0.2<', '>1.0<'])
      assert.ok(html.includes(label), `HTML has ${label}`);

    const png = decodePng(await readFile(pngPath));
    assert.equal(png.width, WIDTH);
    assert.equal(png.height, HEIGHT);
    // title band above the legend row, left margin (y ticks and axis name), band under the x axis (ticks and name)
    assert.ok(inkIn(png, 0, 0, WIDTH, 28) > 100, 'title text in the top band');
    assert.ok(inkIn(png, 0, 60, 50, HEIGHT - 60) > 100, 'y tick labels and y axis name');
    assert.ok(inkIn(png, 0, HEIGHT - 40, WIDTH, HEIGHT) > 50, 'x tick labels and x axis name');
    // both series visible although they coincide
    assert.ok(countColour(png, [31, 119, 180]) > 100, 'mean reward line visible');
    assert.ok(countColour(png, [214, 39, 40]) > 100, 'success rate line visible');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
