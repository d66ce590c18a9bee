// Reward curves from a metrics JSONL log: a self-contained HTML page with an inline SVG chart, and
// a PNG of the same lines (no native dependencies: our own rasteriser, zlib from Node).

import { readFile, writeFile, rename } from 'node:fs/promises';
import { deflateSync } from 'node:zlib';

export interface RewardPoint {
  iteration: number;
  meanReward: number;
  successRate: number;
}

/** Reads `{iteration, meanReward, successRate}` rows (nested under `metrics` is also accepted). */
export function parseMetricsJsonl(text: string): RewardPoint[] {
  const out: RewardPoint[] = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let row: any;
    try {
      row = JSON.parse(line);
    } catch {
      throw new Error(`metrics line ${i + 1} is not JSON: ${line.slice(0, 80)}`);
    }
    const m = row.metrics && typeof row.metrics === 'object' ? { ...row.metrics, ...row } : row;
    const iteration = Number(m.iteration ?? out.length);
    const meanReward = Number(m.meanReward);
    const successRate = Number(m.successRate ?? m.meanReward);
    if (!Number.isFinite(meanReward)) return; // rows without rewards (config, events) are skipped
    out.push({ iteration, meanReward, successRate });
  });
  return out;
}

const SERIES = [
  // mean reward drawn wider underneath, so it stays visible where the two coincide (0/1 rewards)
  { key: 'meanReward' as const, label: 'mean reward', color: '#1f77b4', rgb: [31, 119, 180], width: 6, radius: 3 },
  { key: 'successRate' as const, label: 'success rate', color: '#d62728', rgb: [214, 39, 40], width: 2, radius: 1 },
];

interface Frame {
  w: number;
  h: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
  x0: number;
  x1: number;
  y0: number;
  y1: number;
}

function frame(points: RewardPoint[], w = 720, h = 400): Frame {
  const xs = points.map((p) => p.iteration);
  const ys = points.flatMap((p) => [p.meanReward, p.successRate]);
  const x0 = xs.length ? Math.min(...xs) : 0;
  const x1 = xs.length ? Math.max(...xs, x0 + 1) : 1;
  const y0 = Math.min(0, ...ys);
  const y1 = Math.max(1, ...ys);
  return { w, h, left: 60, right: 20, top: 30, bottom: 50, x0, x1, y0, y1 };
}

const px = (f: Frame, x: number) => f.left + ((x - f.x0) / (f.x1 - f.x0)) * (f.w - f.left - f.right);
const py = (f: Frame, y: number) => f.h - f.bottom - ((y - f.y0) / (f.y1 - f.y0)) * (f.h - f.top - f.bottom);

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function rewardSvg(points: RewardPoint[], title = 'Reward per iteration'): string {
  const f = frame(points);
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${f.w}" height="${f.h}" viewBox="0 0 ${f.w} ${f.h}" font-family="sans-serif" font-size="12">`);
  parts.push(`<rect width="${f.w}" height="${f.h}" fill="white"/>`);
  parts.push(`<text x="${f.w / 2}" y="18" text-anchor="middle" font-size="14">${esc(title)}</text>`);
  // y grid and ticks
  for (let k = 0; k <= 5; k++) {
    const y = f.y0 + ((f.y1 - f.y0) * k) / 5;
    const Y = py(f, y).toFixed(1);
    parts.push(`<line x1="${f.left}" y1="${Y}" x2="${f.w - f.right}" y2="${Y}" stroke="#ddd"/>`);
    parts.push(`<text x="${f.left - 6}" y="${Y}" text-anchor="end" dominant-baseline="middle">${y.toFixed(2)}</text>`);
  }
  // x ticks (integers, at most ~10)
  const span = f.x1 - f.x0;
  const stepX = Math.max(1, Math.ceil(span / 10));
  for (let x = Math.ceil(f.x0); x <= f.x1; x += stepX) {
    const X = px(f, x).toFixed(1);
    parts.push(`<line x1="${X}" y1="${f.h - f.bottom}" x2="${X}" y2="${f.h - f.bottom + 4}" stroke="#333"/>`);
    parts.push(`<text x="${X}" y="${f.h - f.bottom + 16}" text-anchor="middle">${x}</text>`);
  }
  parts.push(`<line x1="${f.left}" y1="${f.h - f.bottom}" x2="${f.w - f.right}" y2="${f.h - f.bottom}" stroke="#333"/>`);
  parts.push(`<line x1="${f.left}" y1="${f.top}" x2="${f.left}" y2="${f.h - f.bottom}" stroke="#333"/>`);
  parts.push(`<text x="${(f.left + f.w - f.right) / 2}" y="${f.h - 12}" text-anchor="middle">iteration</text>`);
  parts.push(`<text transform="translate(16 ${(f.top + f.h - f.bottom) / 2}) rotate(-90)" text-anchor="middle">reward / success</text>`);
  SERIES.forEach((s, i) => {
    const pts = points.map((p) => `${px(f, p.iteration).toFixed(1)},${py(f, p[s.key]).toFixed(1)}`).join(' ');
    if (points.length) parts.push(`<polyline points="${pts}" fill="none" stroke="${s.color}" stroke-width="${s.width}"/>`);
    const lx = f.left + 12 + i * 140;
    parts.push(`<line x1="${lx}" y1="${f.top + 8}" x2="${lx + 20}" y2="${f.top + 8}" stroke="${s.color}" stroke-width="3"/>`);
    parts.push(`<text x="${lx + 26}" y="${f.top + 8}" dominant-baseline="middle">${s.label}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n');
}

export function rewardHtml(points: RewardPoint[], title = 'Reward per iteration'): string {
  const rows = points
    .map((p) => `<tr><td>${p.iteration}</td><td>${p.meanReward.toFixed(3)}</td><td>${p.successRate.toFixed(3)}</td></tr>`)
    .join('\n');
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style>
</head><body>
${rewardSvg(points, title)}
<table><thead><tr><th>iteration</th><th>mean reward</th><th>success rate</th></tr></thead><tbody>
${rows}
</tbody></table>
</body></html>
`;
}

// --- PNG: RGB raster, lines drawn as thick Bresenham segments -------------------------------------

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(buf: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Uint8Array): Buffer {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'ascii');
  Buffer.from(data).copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

/** Encodes an RGB image (w×h×3 bytes) as PNG (colour type 2, filter 0 per row). */
export function encodePng(w: number, h: number, rgb: Uint8Array): Buffer {
  const raw = Buffer.alloc(h * (w * 3 + 1));
  for (let y = 0; y < h; y++) Buffer.from(rgb.buffer, rgb.byteOffset + y * w * 3, w * 3).copy(raw, y * (w * 3 + 1) + 1);
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([sig, chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', new Uint8Array())]);
}

export function rewardPng(points: RewardPoint[]): Buffer {
  const f = frame(points);
  const img = new Uint8Array(f.w * f.h * 3).fill(255);
  const dot = (x: number, y: number, c: readonly number[], r = 1) => {
    for (let dy = -r; dy <= r; dy++)
      for (let dx = -r; dx <= r; dx++) {
        const X = Math.round(x) + dx;
        const Y = Math.round(y) + dy;
        if (X < 0 || Y < 0 || X >= f.w || Y >= f.h) continue;
        img.set(c, (Y * f.w + X) * 3);
      }
  };
  const line = (xa: number, ya: number, xb: number, yb: number, c: readonly number[], r = 1) => {
    const n = Math.max(1, Math.ceil(Math.hypot(xb - xa, yb - ya)));
    for (let i = 0; i <= n; i++) dot(xa + ((xb - xa) * i) / n, ya + ((yb - ya) * i) / n, c, r);
  };
  const grey = [221, 221, 221];
  const dark = [51, 51, 51];
  for (let k = 0; k <= 5; k++) line(f.left, py(f, f.y0 + ((f.y1 - f.y0) * k) / 5), f.w - f.right, py(f, f.y0 + ((f.y1 - f.y0) * k) / 5), grey, 0);
  line(f.left, f.h - f.bottom, f.w - f.right, f.h - f.bottom, dark, 0);
  line(f.left, f.top, f.left, f.h - f.bottom, dark, 0);
  const stepX = Math.max(1, Math.ceil((f.x1 - f.x0) / 10));
  for (let x = Math.ceil(f.x0); x <= f.x1; x += stepX) line(px(f, x), f.h - f.bottom, px(f, x), f.h - f.bottom + 4, dark, 0);
  SERIES.forEach((s, i) => {
    for (let k = 1; k < points.length; k++) {
      const a = points[k - 1];
      const b = points[k];
      line(px(f, a.iteration), py(f, a[s.key]), px(f, b.iteration), py(f, b[s.key]), s.rgb, s.radius);
    }
    if (points.length === 1) dot(px(f, points[0].iteration), py(f, points[0][s.key]), s.rgb, 2);
    const lx = f.left + 12 + i * 140; // legend swatch (labels are in the HTML)
    line(lx, f.top + 8, lx + 20, f.top + 8, s.rgb);
  });
  return encodePng(f.w, f.h, img);
}

async function writeAtomic(path: string, data: string | Buffer): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, data);
  await rename(tmp, path);
}

/**
 * Writes `outPath` (HTML with an inline SVG chart of meanReward and successRate per iteration)
 * and a PNG beside it (`.html` replaced by `.png`). Returns the written paths.
 */
export async function writeRewardPlot(metricsJsonlPath: string, outPath: string, title?: string): Promise<string[]> {
  const points = parseMetricsJsonl(await readFile(metricsJsonlPath, 'utf8'));
  const html = outPath.endsWith('.html') ? outPath : `${outPath}.html`;
  const png = html.replace(/\.html$/, '.png');
  await writeAtomic(html, rewardHtml(points, title));
  await writeAtomic(png, rewardPng(points));
  return [html, png];
}
