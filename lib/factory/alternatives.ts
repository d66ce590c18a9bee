// Wrong fixes of a task, to measure how strong its tests are (issue 28, quality metadata): of K plausible
// but wrong fixes at the site of the gold fix, how many the tests reject. Two kinds, for any task (the
// factory's and hand-made ones alike), from the files the gold patch changes, before and after it:
//   partial fix    the gold fix with one of its changed regions left as it was (a multi-bug task fixed in part);
//   site mutation  the fixed code with one more mutation (lib/factory/mutations.ts) on a line the fix changed,
//                  or, when those run out, elsewhere in the functions it changed, nearest first.
// A wrong fix that makes the base or the gold file again is not one. Equivalent mutants (a wrong fix that
// means the same) cannot be told apart, so the strength is a lower bound. Pure and seeded.
import { hashInts, seededPermutation } from '../seed.ts';
import { applyMutations, enumerateMutations, parsesCleanly, type Mutation } from './mutations.ts';
import { yielder } from './candidates.ts';
import { changedRegions, splitLines } from './patch.ts';

export interface ChangedFile {
  path: string;
  /** the file at the task's base (the buggy state); '' when the fix creates it */
  base: string;
  /** the file after the gold patch */
  gold: string;
}

export interface WrongFix {
  kind: 'partial-fix' | 'site-mutation';
  /** what it does (shown in reports, never to an agent) */
  what: string;
  /** every changed file's text in this wrong fix (path → text) */
  files: Record<string, string>;
}

/** Regions whose changed lines are all blank or comments change no behaviour: leaving one out is no wrong fix. */
function codeRegion(base: string[], gold: string[], r: { a0: number; a1: number; b0: number; b1: number }): boolean {
  const lines = [...base.slice(r.a0, r.a1), ...gold.slice(r.b0, r.b1)];
  return lines.some((l) => l.trim() !== '' && !l.trim().startsWith('#'));
}

/** Up to `k` wrong fixes of the change `files` (base → gold), partial fixes first (at most half when mutations exist). */
export async function wrongFixes(files: readonly ChangedFile[], k: number, seed: number): Promise<WrongFix[]> {
  if (k <= 0) return [];
  const goldOf = Object.fromEntries(files.map((f) => [f.path, f.gold]));
  const seen = new Set<string>([JSON.stringify(files.map((f) => f.base)), JSON.stringify(files.map((f) => f.gold))]);
  const fresh = (w: WrongFix): boolean => {
    const key = JSON.stringify(files.map((f) => w.files[f.path]));
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  };

  const partial: WrongFix[] = [];
  const regions = files.flatMap((f) => {
    const [a, b] = [splitLines(f.base), splitLines(f.gold)];
    return changedRegions(f.base, f.gold)
      .filter((r) => codeRegion(a, b, r))
      .map((r) => ({ f, r, a, b }));
  });
  if (regions.length >= 2) {
    for (const { f, r, a, b } of regions) {
      const text = [...b.slice(0, r.b0), ...a.slice(r.a0, r.a1), ...b.slice(r.b1)].join('');
      const w: WrongFix = { kind: 'partial-fix', what: `the fix without its change at ${f.path}:${r.b0 + 1}`, files: { ...goldOf, [f.path]: text } };
      if (fresh(w)) partial.push(w);
    }
  }

  // mutations of the fixed code: on a changed line first, then elsewhere in the changed functions by distance
  const near: { m: Mutation; d: number; text: string }[] = [];
  for (const f of files) {
    if (f.gold === '') continue;
    const lines = changedRegions(f.base, f.gold).flatMap((r) => (r.b1 > r.b0 ? range(r.b0 + 1, r.b1) : [Math.max(1, r.b0), r.b0 + 1]));
    if (lines.length === 0) continue;
    const muts = (await enumerateMutations(f.path, f.gold)) ?? [];
    for (const m of muts) {
      const endLine = m.line + f.gold.slice(m.start, m.end).split('\n').length - 1;
      const inFn = lines.some((l) => l >= m.fn.startLine && l <= m.fn.endLine);
      if (!inFn) continue;
      const d = Math.min(...lines.map((l) => (l < m.line ? m.line - l : l > endLine ? l - endLine : 0)));
      near.push({ m, d, text: f.gold });
    }
  }
  const ordered = seededPermutation(near, hashInts(seed, 0x77)).sort((x, y) => x.d - y.d);
  const mutated: WrongFix[] = [];
  const breathe = yielder();
  for (const { m, text } of ordered) {
    if (mutated.length >= k) break;
    await breathe();
    const out = applyMutations(text, [m]);
    // a wrong fix that does not compile would be rejected for nothing
    if (!(await parsesCleanly(out))) continue;
    const w: WrongFix = { kind: 'site-mutation', what: `${m.strategy} at ${m.file}:${m.line} (${m.what})`, files: { ...goldOf, [m.file]: out } };
    if (fresh(w)) mutated.push(w);
  }
  const nPartial = mutated.length ? Math.min(partial.length, Math.ceil(k / 2)) : Math.min(partial.length, k);
  return [...seededPermutation(partial, hashInts(seed, 0x78)).slice(0, nPartial), ...mutated].slice(0, k);
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
