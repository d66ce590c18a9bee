// Lists the imports that break the layer order docs/design.md §11 states (its table is the one statement of the
// rule; this reads it). `npm run check:layers`: one line per breaking import, exit 1 when there is any.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Layer {
  folders: string[];
  /** folders it may import; `typesOnly` those it may import with `import type` only */
  mayImport: Set<string>;
  typesOnly: Set<string>;
  anything: boolean;
}

export interface Violation {
  file: string;
  imports: string;
  line: number;
}

const code = (s: string) => [...s.matchAll(/`([^`]+)`/g)].map((m) => m[1]!.replace(/\/$/, ''));

/** The layers of the §11 table, bottom first. */
export function readLayers(designMd: string): Layer[] {
  const section = designMd.split(/^## /m).find((s) => s.startsWith('11.'));
  if (!section) throw new Error('docs/design.md has no section 11 (layers)');
  const layers: Layer[] = [];
  for (const row of section.split('\n').filter((l) => /^\| \d+ \|/.test(l))) {
    const [, , folderCell, , importCell] = row.split('|').map((c) => c.trim());
    const folders = code(folderCell!);
    const below = layers.flatMap((l) => l.folders);
    const mayImport = new Set<string>();
    const typesOnly = new Set<string>();
    for (const part of importCell!.split(/[;,]| and /).map((p) => p.trim())) {
      if (/any layer above/.test(part)) {
        below.forEach((f) => mayImport.add(f));
        continue;
      }
      const name = part.replace(/`/g, '').split(' ')[0]!.replace(/\/$/, '');
      if (/as types only/.test(part)) typesOnly.add(name);
      else if (/^[a-z-]+(\/[a-z-]+)?$/.test(name)) mayImport.add(name);
    }
    layers.push({ folders, mayImport, typesOnly, anything: importCell === 'anything' });
  }
  return layers;
}

function sourceFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    if (n === 'node_modules' || n.startsWith('build') || n === 'fixtures' || n === 'histories') return [];
    if (statSync(p).isDirectory()) return sourceFiles(p);
    return /\.(ts|mjs)$/.test(n) ? [p] : [];
  });
}

/** Every relative import from one top-level folder into another that the table does not allow. */
export function layerViolations(root: string, layers: Layer[]): Violation[] {
  const layerOf = new Map(layers.flatMap((l) => l.folders.map((f) => [f, l] as const)));
  const out: Violation[] = [];
  for (const [folder, layer] of layerOf) {
    if (layer.anything) continue;
    for (const file of sourceFiles(join(root, folder))) {
      const lines = readFileSync(file, 'utf8').split('\n');
      lines.forEach((text, i) => {
        const m = /(?:^\s*(import|export)\b(?:\s+(type)\b)?[^'"]*from\s*|import\()\s*['"](\.{1,2}\/[^'"]+)['"]/.exec(text);
        if (!m) return;
        const target = relative(root, normalize(join(dirname(file), m[3]!)));
        const top = target.split('/')[0]!;
        if (top === folder || !layerOf.has(top)) return;
        const sub = target.split('/').slice(0, 2).join('/');
        const ok = layer.mayImport.has(top) || layer.mayImport.has(sub) || (m[2] === 'type' && layer.typesOnly.has(top));
        if (!ok) out.push({ file: relative(root, file), imports: target, line: i + 1 });
      });
    }
  }
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const v = layerViolations(root, readLayers(readFileSync(join(root, 'docs', 'design.md'), 'utf8')));
  for (const x of v) console.log(`${x.file}:${x.line} imports ${x.imports}`);
  console.log(`${v.length} import(s) break the layer order of docs/design.md §11`);
  process.exitCode = v.length ? 1 : 0;
}
