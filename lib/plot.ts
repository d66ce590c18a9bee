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
  // the two coincide for 0/1 rewards (FrozenLake): mean reward wide underneath, success rate thin and dashed on top
  { key: 'meanReward' as const, label: 'mean reward', color: '#1f77b4', rgb: [31, 119, 180], width: 6, radius: 3, dash: 0 },
  { key: 'successRate' as const, label: 'success rate', color: '#d62728', rgb: [214, 39, 40], width: 2, radius: 1, dash: 6 },
];

const DEFAULT_TITLE = 'Reward per iteration';
const X_AXIS_NAME = 'iteration';
const Y_AXIS_NAME = 'mean reward / success rate';

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
  return { w, h, left: 60, right: 20, top: 50, bottom: 50, x0, x1, y0, y1 };
}

const px = (f: Frame, x: number) => f.left + ((x - f.x0) / (f.x1 - f.x0)) * (f.w - f.left - f.right);
const py = (f: Frame, y: number) => f.h - f.bottom - ((y - f.y0) / (f.y1 - f.y0)) * (f.h - f.top - f.bottom);

/** Six evenly spaced y ticks over [y0, y1]. */
const yTicks = (f: Frame) => [0, 1, 2, 3, 4, 5].map((k) => f.y0 + ((f.y1 - f.y0) * k) / 5);

/** Integer iterations, at most ~10 of them. */
function xTicks(f: Frame): number[] {
  const step = Math.max(1, Math.ceil((f.x1 - f.x0) / 10));
  const out: number[] = [];
  for (let x = Math.ceil(f.x0); x <= f.x1; x += step) out.push(x);
  return out;
}

// one decimal where that is exact (0.0, 0.2, ... 1.0), else two
const tickLabel = (v: number) => (Math.abs(v * 10 - Math.round(v * 10)) < 1e-9 ? v.toFixed(1) : v.toFixed(2));

// legend row between the title and the plot area, so it never covers the lines
const legendX = (f: Frame, i: number) => f.left + i * 160;
const legendY = (f: Frame) => f.top - 14;

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function rewardSvg(points: RewardPoint[], title = DEFAULT_TITLE): string {
  const f = frame(points);
  const bottomY = f.h - f.bottom;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${f.w}" height="${f.h}" viewBox="0 0 ${f.w} ${f.h}" font-family="sans-serif" font-size="12">`);
  parts.push(`<rect width="${f.w}" height="${f.h}" fill="white"/>`);
  parts.push(`<text x="${f.w / 2}" y="20" text-anchor="middle" font-size="16">${esc(title)}</text>`);
  for (const y of yTicks(f)) {
    const Y = py(f, y).toFixed(1);
    parts.push(`<line x1="${f.left}" y1="${Y}" x2="${f.w - f.right}" y2="${Y}" stroke="#ddd"/>`);
    parts.push(`<text x="${f.left - 6}" y="${Y}" text-anchor="end" dominant-baseline="middle">${tickLabel(y)}</text>`);
  }
  for (const x of xTicks(f)) {
    const X = px(f, x).toFixed(1);
    parts.push(`<line x1="${X}" y1="${bottomY}" x2="${X}" y2="${bottomY + 4}" stroke="#333"/>`);
    parts.push(`<text x="${X}" y="${bottomY + 16}" text-anchor="middle">${x}</text>`);
  }
  parts.push(`<line x1="${f.left}" y1="${bottomY}" x2="${f.w - f.right}" y2="${bottomY}" stroke="#333"/>`);
  parts.push(`<line x1="${f.left}" y1="${f.top}" x2="${f.left}" y2="${bottomY}" stroke="#333"/>`);
  parts.push(`<text x="${(f.left + f.w - f.right) / 2}" y="${f.h - 12}" text-anchor="middle">${X_AXIS_NAME}</text>`);
  parts.push(`<text transform="translate(16 ${(f.top + bottomY) / 2}) rotate(-90)" text-anchor="middle">${Y_AXIS_NAME}</text>`);
  SERIES.forEach((s, i) => {
    const stroke = `stroke="${s.color}" stroke-width="${s.width}"${s.dash ? ` stroke-dasharray="${s.dash} ${s.dash}"` : ''}`;
    const pts = points.map((p) => `${px(f, p.iteration).toFixed(1)},${py(f, p[s.key]).toFixed(1)}`).join(' ');
    if (points.length) parts.push(`<polyline points="${pts}" fill="none" ${stroke}/>`);
    const lx = legendX(f, i);
    parts.push(`<line x1="${lx}" y1="${legendY(f)}" x2="${lx + 24}" y2="${legendY(f)}" ${stroke}/>`);
    parts.push(`<text x="${lx + 34}" y="${legendY(f)}" dominant-baseline="middle">${s.label}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n');
}

export function rewardHtml(points: RewardPoint[], title = DEFAULT_TITLE): string {
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

// --- 5×7 bitmap font for the PNG labels -------------------------------------------------------
// Each glyph: 7 rows top to bottom (baseline under row 7), 2 hex digits per row, bit 4 = leftmost
// of the 5 columns; g j p q y have an 8th row for their descenders.
const FONT: Record<string, string> = {
  ' ': '00000000000000', '.': '0000000000000c', ',': '00000000000c04', '%': '18190204081303',
  '-': '000000001f0000', '+': '0004041f040400', ':': '000c0c000c0c00', '(': '02040808080402',
  ')': '08040202020408', '/': '00010204081000', '_': '0000000000001f', '=': '00001f001f0000',
  '?': '0e110102040004',
  '0': '0e11131519110e', '1': '040c040404040e', '2': '0e11010204081f', '3': '1f02040201110e',
  '4': '02060a121f0202', '5': '1f101e0101110e', '6': '0608101e11110e', '7': '1f010204080808',
  '8': '0e11110e11110e', '9': '0e11110f01020c',
  A: '0e11111f111111', B: '1e11111e11111e', C: '0e11101010110e', D: '1c12111111121c',
  E: '1f10101e10101f', F: '1f10101e101010', G: '0e11101711110f', H: '1111111f111111',
  I: '0e04040404040e', J: '0702020202120c', K: '11121418141211', L: '1010101010101f',
  M: '111b1515111111', N: '11111915131111', O: '0e11111111110e', P: '1e11111e101010',
  Q: '0e11111115120d', R: '1e11111e141211', S: '0f10100e01011e', T: '1f040404040404',
  U: '1111111111110e', V: '11111111110a04', W: '1111111515150a', X: '11110a040a1111',
  Y: '11110a04040404', Z: '1f01020408101f',
  a: '00000e010f110f', b: '1010161911111e', c: '00000e1010110e', d: '01010d1311110f',
  e: '00000e111f100e', f: '0609081c080808', g: '00000f11110f010e', h: '10101619111111',
  i: '04000c0404040e', j: '020006020202120c', k: '10101214181412', l: '0c04040404040e',
  m: '00001a15151111', n: '00001619111111', o: '00000e1111110e', p: '00001e11111e1010',
  q: '00000f11110f0101', r: '00001619101010', s: '00000e100e011e', t: '08081c08080906',
  u: '0000111111130d', v: '00001111110a04', w: '0000111115150a', x: '0000110a040a11',
  y: '00001111110f010e', z: '00001f0204081f',
};
const GLYPH_W = 5;
const ADVANCE = GLYPH_W + 1;

/** Pixel width of `s` drawn at `scale` (one blank column between glyphs, none after the last). */
const textWidth = (s: string, scale = 1) => Math.max(0, s.length * ADVANCE - 1) * scale;

function glyphRows(ch: string): number[] {
  const hex = FONT[ch] ?? FONT['?']; // unknown characters show as '?' rather than vanishing
  return Array.from({ length: hex.length / 2 }, (_, r) => parseInt(hex.slice(2 * r, 2 * r + 2), 16));
}

/** 720×400 RGB PNG of the same chart as `rewardSvg`, labels drawn with the bitmap font above. */
export function rewardPng(points: RewardPoint[], title = DEFAULT_TITLE): Buffer {
  const f = frame(points);
  const bottomY = f.h - f.bottom;
  const img = new Uint8Array(f.w * f.h * 3).fill(255);
  const set = (X: number, Y: number, c: readonly number[]) => {
    if (X >= 0 && Y >= 0 && X < f.w && Y < f.h) img.set(c, (Y * f.w + X) * 3);
  };
  const dot = (x: number, y: number, c: readonly number[], r: number) => {
    for (let dy = -r; dy <= r; dy++) for (let dx = -r; dx <= r; dx++) set(Math.round(x) + dx, Math.round(y) + dy, c);
  };
  // dash > 0: on/off runs of `dash` pixels, measured along the whole polyline so dashes continue across vertices
  const polyline = (pts: [number, number][], c: readonly number[], r: number, dash = 0) => {
    let travelled = 0;
    for (let k = 1; k < pts.length; k++) {
      const [xa, ya] = pts[k - 1];
      const [xb, yb] = pts[k];
      const len = Math.hypot(xb - xa, yb - ya);
      const n = Math.max(1, Math.ceil(len));
      for (let i = 0; i <= n; i++) {
        if (dash && Math.floor((travelled + (len * i) / n) / dash) % 2) continue;
        dot(xa + ((xb - xa) * i) / n, ya + ((yb - ya) * i) / n, c, r);
      }
      travelled += len;
    }
  };
  const line = (xa: number, ya: number, xb: number, yb: number, c: readonly number[]) => polyline([[xa, ya], [xb, yb]], c, 0);
  // (x, y) is the top-left of the text box; vertical text reads bottom to top and (x, y) is its bottom-left
  const text = (s: string, x: number, y: number, c: readonly number[], scale = 1, vertical = false) => {
    [...s].forEach((ch, i) => {
      const rows = glyphRows(ch);
      for (let r = 0; r < rows.length; r++)
        for (let col = 0; col < GLYPH_W; col++) {
          if (!((rows[r] >> (GLYPH_W - 1 - col)) & 1)) continue;
          for (let sy = 0; sy < scale; sy++)
            for (let sx = 0; sx < scale; sx++) {
              const u = (i * ADVANCE + col) * scale + sx; // along the text
              const v = r * scale + sy; // down the glyph
              if (vertical) set(Math.round(x) + v, Math.round(y) - u, c);
              else set(Math.round(x) + u, Math.round(y) + v, c);
            }
        }
    });
  };
  const grey = [221, 221, 221];
  const dark = [51, 51, 51];

  const titleScale = textWidth(title, 2) <= f.w - 20 ? 2 : 1;
  text(title, (f.w - textWidth(title, titleScale)) / 2, 6, dark, titleScale);
  for (const y of yTicks(f)) {
    const Y = py(f, y);
    line(f.left, Y, f.w - f.right, Y, grey);
    const label = tickLabel(y);
    text(label, f.left - 6 - textWidth(label), Y - 3, dark);
  }
  line(f.left, bottomY, f.w - f.right, bottomY, dark);
  line(f.left, f.top, f.left, bottomY, dark);
  for (const x of xTicks(f)) {
    line(px(f, x), bottomY, px(f, x), bottomY + 4, dark);
    text(String(x), px(f, x) - textWidth(String(x)) / 2, bottomY + 8, dark);
  }
  text(X_AXIS_NAME, (f.left + f.w - f.right - textWidth(X_AXIS_NAME)) / 2, f.h - 18, dark);
  text(Y_AXIS_NAME, 12, (f.top + bottomY + textWidth(Y_AXIS_NAME)) / 2, dark, 1, true);
  SERIES.forEach((s, i) => {
    polyline(points.map((p) => [px(f, p.iteration), py(f, p[s.key])]), s.rgb, s.radius, s.dash);
    if (points.length === 1) dot(px(f, points[0].iteration), py(f, points[0][s.key]), s.rgb, s.radius + 2);
    const lx = legendX(f, i);
    polyline([[lx, legendY(f)], [lx + 24, legendY(f)]], s.rgb, s.radius, s.dash);
    text(s.label, lx + 34, legendY(f) - 3, dark);
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
  await writeAtomic(png, rewardPng(points, title));
  return [html, png];
}
