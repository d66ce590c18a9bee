// The documentation stays true to the tree: every relative link of README.md and docs/*.md reaches a file and, with
// an anchor, a heading of it; every repository path they name exists; nothing points outside the clone; and every
// `DESIGN §N` the code cites is a section of docs/design.md.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { ROOT } from '../helpers/temporal.ts';

const DOCS = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const text = (f: string) => readFileSync(join(ROOT, f), 'utf8');
// code spans and fenced blocks are where docs quote output and commands; links in them are not links
const prose = (s: string) => s.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
export function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchors(file: string): Set<string> {
  return new Set(
    [
      ...text(file)
        .replace(/```[\s\S]*?```/g, '')
        .matchAll(/^#{1,6} (.+)$/gm),
    ].map((m) => slug(m[1]!)),
  );
}

test('every relative link of the docs reaches a file, and its anchor a heading', () => {
  const broken: string[] = [];
  for (const doc of DOCS) {
    for (const m of prose(text(doc)).matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/.test(target)) continue;
      const [path, anchor] = target.split('#') as [string, string | undefined];
      const file = path ? relative(ROOT, join(ROOT, dirname(doc), path)) : doc;
      if (!existsSync(join(ROOT, file))) broken.push(`${doc}: ${target} (no ${file})`);
      else if (anchor && file.endsWith('.md') && !anchors(file).has(anchor)) broken.push(`${doc}: ${target} (no heading #${anchor} in ${file})`);
    }
  }
  assert.deepEqual(broken, []);
});

test('every repository path the docs name exists', () => {
  const top = 'lib|workflows|activities|services|workers|policy-server|gpu-learner|scripts|bench|checks|test|configs|docs';
  const path = new RegExp(`(?<![\\w/.-])(?:${top})/[\\w./-]*\\.(?:ts|mjs|py|sh|json|md|yml|c|cu|cuh|h|cpp|txt|go)\\b`, 'g');
  const missing: string[] = [];
  for (const doc of DOCS) for (const m of text(doc).matchAll(path)) if (!existsSync(join(ROOT, m[0]))) missing.push(`${doc}: ${m[0]}`);
  assert.deepEqual([...new Set(missing)], []);
});

test('nothing in the docs points outside the clone', () => {
  for (const doc of DOCS) assert.doesNotMatch(text(doc), /\.\.\/shared|\/work\//, doc);
});

test('every DESIGN §N the code cites is a section of docs/design.md', () => {
  const sections = new Set([...text('docs/design.md').matchAll(/^## (\d+)\. /gm)].map((m) => Number(m[1])));
  const cited = new Map<number, string>();
  const walk = (dir: string) => {
    for (const n of readdirSync(join(ROOT, dir))) {
      const rel = join(dir, n);
      if (['node_modules', '.git', '.tools', 'build', 'fixtures', 'histories'].includes(n) || n.startsWith('build-')) continue;
      if (statSync(join(ROOT, rel)).isDirectory()) walk(rel);
      else if (/\.(ts|mjs|py|h|cpp|cu|sh|md)$/.test(n))
        for (const m of text(rel).matchAll(/DESIGN §(\d+)(?:[–-]§?(\d+))?/g)) for (const k of [m[1], m[2]]) if (k) cited.set(Number(k), rel);
    }
  };
  for (const d of ['lib', 'workflows', 'activities', 'services', 'workers', 'policy-server', 'gpu-learner', 'scripts', 'bench', 'checks', 'test']) walk(d);
  assert.ok(cited.size > 5, 'the code cites the design');
  const unknown = [...cited].filter(([n]) => !sections.has(n)).map(([n, f]) => `DESIGN §${n} (${f})`);
  assert.deepEqual(unknown, []);
});
