// Best@K test-time scaling (DESIGN §8): selection among the K trajectories of a task by verifier scores,
// R2E-Gym's hybrid cascade, and the Best@K curve as the expected resolved rate over seeded random
// K-subsets, ties scored at their expected value. Pure and deterministic.
import { seededRandom } from './metrics.ts';

/** One candidate (a completed episode of a task) with its verifier scores (absent when not computed). */
export interface Candidate {
  run: number;
  resolved: boolean;
  /** execution-free verifier: P(YES) / (P(YES) + P(NO)) */
  ef?: number;
  /** base-passing repository tests that still pass with the patch */
  regression?: number;
  /** generated reproduction tests that report the issue resolved */
  reproduction?: number;
}

/** Returns the tied best candidates (never empty for a non-empty input). */
export type Selector = (candidates: readonly Candidate[]) => Candidate[];

/** The candidates whose `score` is maximal (all of them when the score is missing everywhere). */
export function argmaxAll(cs: readonly Candidate[], score: (c: Candidate) => number | undefined): Candidate[] {
  let best = -Infinity;
  let out: Candidate[] = [];
  for (const c of cs) {
    const s = score(c);
    if (s === undefined) continue;
    if (s > best) [best, out] = [s, [c]];
    else if (s === best) out.push(c);
  }
  return out.length ? out : [...cs];
}

/** How many the hybrid keeps by execution-free score: max(3, ⌊K/2⌋) (R2E-Gym). */
export const hybridKeep = (k: number): number => Math.max(3, Math.floor(k / 2));

/**
 * R2E-Gym's hybrid cascade: keep the top max(3, ⌊K/2⌋) by execution-free score (everyone tied with the
 * last kept score stays too), then those with the most regression passes, then the best reproduction
 * score, then the highest execution-free score. A stage whose score is missing passes everyone on.
 * K = 1 and 2 keep everyone in the first stage. What remains is a tie (see `pickOne`).
 */
export function hybridSelect(cs: readonly Candidate[]): Candidate[] {
  if (cs.length === 0) return [];
  let keep = [...cs];
  const n = hybridKeep(cs.length);
  if (cs.every((c) => c.ef !== undefined) && n < cs.length) {
    const sorted = cs.map((c) => c.ef!).sort((a, b) => b - a);
    const cutoff = sorted[n - 1]!;
    keep = cs.filter((c) => c.ef! >= cutoff);
  }
  keep = argmaxAll(keep, (c) => c.regression);
  keep = argmaxAll(keep, (c) => c.reproduction);
  return argmaxAll(keep, (c) => c.ef);
}

/** Execution-based verifier alone: most regression passes, then the best reproduction score. */
export function executionBasedSelect(cs: readonly Candidate[]): Candidate[] {
  return argmaxAll(
    argmaxAll(cs, (c) => c.regression),
    (c) => c.reproduction,
  );
}

export const SELECTORS = {
  executionFree: (cs: readonly Candidate[]) => argmaxAll(cs, (c) => c.ef),
  regression: (cs: readonly Candidate[]) => argmaxAll(cs, (c) => c.regression),
  reproduction: (cs: readonly Candidate[]) => argmaxAll(cs, (c) => c.reproduction),
  executionBased: executionBasedSelect,
  hybrid: hybridSelect,
} satisfies Record<string, Selector>;

export type SelectorName = keyof typeof SELECTORS;

/** The deterministic choice among tied candidates: the lowest run index (documented tie-break). */
export function pickOne(tied: readonly Candidate[]): Candidate {
  return tied.reduce((a, b) => (b.run < a.run ? b : a));
}

/** Expected resolved rate of a uniform choice among the tied candidates. */
export const expectedResolved = (tied: readonly Candidate[]): number => (tied.length ? tied.filter((c) => c.resolved).length / tied.length : 0);

function binomial(n: number, k: number): number {
  let r = 1;
  for (let i = 1; i <= k; i++) r = (r * (n - k + i)) / i;
  return r;
}

/** All k-subsets of 0..n−1 when there are at most `limit`, else `limit` seeded random ones (without repeats inside a subset). */
export function kSubsets(n: number, k: number, limit: number, rand: () => number): number[][] {
  if (binomial(n, k) <= limit) {
    const out: number[][] = [];
    const cur: number[] = [];
    const rec = (start: number) => {
      if (cur.length === k) return void out.push([...cur]);
      for (let i = start; i <= n - (k - cur.length); i++) {
        cur.push(i);
        rec(i + 1);
        cur.pop();
      }
    };
    rec(0);
    return out;
  }
  const out: number[][] = [];
  const idx = Array.from({ length: n }, (_, i) => i);
  for (let s = 0; s < limit; s++) {
    for (let i = 0; i < k; i++) {
      const j = i + Math.floor(rand() * (n - i));
      [idx[i], idx[j]] = [idx[j]!, idx[i]!];
    }
    out.push(idx.slice(0, k).sort((a, b) => a - b));
  }
  return out;
}

/**
 * Best@K for K = 1..maxK: the mean over tasks (with at least K candidates) of the expected resolved
 * rate of `select` on a K-subset of the task's candidates, averaged over every K-subset when there are
 * at most `subsets` of them, else over `subsets` seeded random ones (≥ 1,000 by default). Entry K−1
 * is null when no task has K candidates.
 */
export function bestAtKCurve(tasks: readonly (readonly Candidate[])[], select: Selector, opts: { maxK: number; subsets?: number; seed?: number }): (number | null)[] {
  const limit = opts.subsets ?? 1000;
  const out: (number | null)[] = [];
  for (let k = 1; k <= opts.maxK; k++) {
    let sum = 0;
    let m = 0;
    tasks.forEach((cs, t) => {
      if (cs.length < k) return;
      const rand = seededRandom(((opts.seed ?? 0) * 1_000_003 + k * 7919 + t) >>> 0);
      const subsets = kSubsets(cs.length, k, limit, rand);
      let e = 0;
      for (const s of subsets) e += expectedResolved(select(s.map((i) => cs[i]!)));
      sum += e / subsets.length;
      m++;
    });
    out.push(m ? sum / m : null);
  }
  return out;
}

/** The oracle (any resolved candidate wins): its Best@K is the pass@K ceiling. */
export const oracleSelect: Selector = (cs) => {
  const good = cs.filter((c) => c.resolved);
  return good.length ? good : [...cs];
};
