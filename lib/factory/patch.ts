// Patches between two versions of a repository's files, as `git apply` takes them (a `diff --git` header,
// unified hunks with 3 lines of context), the changed regions they are made of, and the dedupe key of a
// patch. Line matching is difflib's SequenceMatcher (the Python difflib's algorithm) over the span between
// the files' common head and tail, so a one-line change in a long file costs little. Pure.
import { SequenceMatcher } from 'difflib';
import { createHash } from 'node:crypto';

const CONTEXT = 3;

/** One changed region of a file: lines [a0, a1) of the old text became lines [b0, b1) of the new (0-based). */
export interface Region {
  a0: number;
  a1: number;
  b0: number;
  b1: number;
}

/** Lines of a text, each keeping its newline (the last may lack one). */
export function splitLines(text: string): string[] {
  if (text === '') return [];
  const out = text.split('\n').map((l) => `${l}\n`);
  if (text.endsWith('\n')) out.pop();
  else out[out.length - 1] = out[out.length - 1]!.slice(0, -1);
  return out;
}

/** The changed regions between two texts, in order. */
export function changedRegions(before: string, after: string): Region[] {
  const a = splitLines(before);
  const b = splitLines(after);
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const am = a.slice(head, a.length - tail);
  const bm = b.slice(head, b.length - tail);
  if (am.length === 0 && bm.length === 0) return [];
  const ops = new SequenceMatcher<string[]>(null, am, bm, false).getOpcodes();
  return ops.filter(([tag]) => tag !== 'equal').map(([, i1, i2, j1, j2]) => ({ a0: head + i1, a1: head + i2, b0: head + j1, b1: head + j2 }));
}

/** The unified diff of one file (`diff --git a/p b/p` header), '' when the texts are equal. */
export function filePatch(path: string, before: string, after: string): string {
  const regions = changedRegions(before, after);
  if (regions.length === 0) return '';
  const a = splitLines(before);
  const b = splitLines(after);
  // regions closer than 2×CONTEXT lines share a hunk
  const groups: Region[][] = [];
  for (const r of regions) {
    const g = groups.at(-1);
    if (g && r.a0 - g.at(-1)!.a1 <= 2 * CONTEXT) g.push(r);
    else groups.push([r]);
  }
  const out = [`diff --git a/${path} b/${path}\n`, `--- a/${path}\n`, `+++ b/${path}\n`];
  // only a file's last line can lack its newline
  const line = (prefix: string, l: string) => `${prefix}${l}${l.endsWith('\n') ? '' : '\n\\ No newline at end of file\n'}`;
  for (const g of groups) {
    const first = g[0]!;
    const lastR = g.at(-1)!;
    const a0 = Math.max(0, first.a0 - CONTEXT);
    const a1 = Math.min(a.length, lastR.a1 + CONTEXT);
    const b0 = first.b0 - (first.a0 - a0);
    const b1 = lastR.b1 + (a1 - lastR.a1);
    const body: string[] = [];
    let ai = a0;
    for (const r of g) {
      for (; ai < r.a0; ai++) body.push(line(' ', a[ai]!));
      for (let i = r.a0; i < r.a1; i++) body.push(line('-', a[i]!));
      for (let j = r.b0; j < r.b1; j++) body.push(line('+', b[j]!));
      ai = r.a1;
    }
    for (; ai < a1; ai++) body.push(line(' ', a[ai]!));
    const range = (start: number, n: number) => (n === 1 ? `${start + 1}` : `${n === 0 ? start : start + 1},${n}`);
    out.push(`@@ -${range(a0, a1 - a0)} +${range(b0, b1 - b0)} @@\n`, ...body);
  }
  return out.join('');
}

/** The patch turning `before` into `after` (path → text; a path missing on one side is an empty file there). */
export function treePatch(before: Readonly<Record<string, string>>, after: Readonly<Record<string, string>>): string {
  const paths = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  return paths.map((p) => filePatch(p, before[p] ?? '', after[p] ?? '')).join('');
}

/**
 * A key two tasks share when their fixes make the same change: the repository, and each file's removed and
 * added lines with whitespace collapsed (line numbers, context and hunk layout left out).
 */
export function dedupeKey(repo: string, patch: string): string {
  const h = createHash('sha256').update(`${repo}\n`);
  const files = new Map<string, string[]>();
  let cur: string[] | undefined;
  for (const l of patch.split('\n')) {
    const m = /^diff --git a\/(\S+) b\/(\S+)$/.exec(l);
    if (m) {
      cur = files.get(m[2]!) ?? [];
      files.set(m[2]!, cur);
      continue;
    }
    if (!cur || l.startsWith('+++ ') || l.startsWith('--- ')) continue;
    if (l.startsWith('+') || l.startsWith('-')) cur.push(`${l[0]}${l.slice(1).trim().replace(/\s+/g, ' ')}`);
  }
  for (const f of [...files.keys()].sort()) h.update(`${f}\n${files.get(f)!.join('\n')}\n`);
  return h.digest('hex').slice(0, 16);
}
