// The evaluation's maths (lib/eval): pass@k in product form against exact binomials, the hand-computed
// (i + r) mod 3 table, the bootstrap interval, the hybrid cascade on hand-made score tables, Best@K.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  bootstrapDiffCI,
  bootstrapMeanCI,
  evaluationMetrics,
  formatEvalMetrics,
  passAtK,
  passAtKCurve,
  repoOf,
  type EpisodeFacts,
  formatEvalErrors,
} from '../../lib/eval/metrics.ts';
import { judgeMessages, judgementScore, reportsResolved, scriptFrom, trajectoryText } from '../../lib/eval/verifiers.ts';
import { readFileSync } from 'node:fs';
import { validateBestOfKConfig, validateEvalConfig } from '../../lib/eval/config.ts';
import {
  bestAtKCurve,
  executionBasedSelect,
  expectedResolved,
  hybridKeep,
  hybridSelect,
  kSubsets,
  oracleSelect,
  pickOne,
  SELECTORS,
  type Candidate,
} from '../../lib/eval/best-of-k.ts';

function choose(n: number, k: number): bigint {
  if (k < 0 || k > n) return 0n;
  let r = 1n;
  for (let i = 1; i <= k; i++) r = (r * BigInt(n - k + i)) / BigInt(i);
  return r;
}

test('pass@k product form equals 1 − C(n−c,k)/C(n,k) for every n ≤ 24', () => {
  for (let n = 1; n <= 24; n++) {
    for (let c = 0; c <= n; c++) {
      for (let k = 1; k <= n; k++) {
        const exact = 1 - Number((choose(n - c, k) * 10n ** 15n) / choose(n, k)) / 1e15;
        assert.ok(Math.abs(passAtK(n, c, k) - exact) < 1e-12, `n=${n} c=${c} k=${k}: ${passAtK(n, c, k)} vs ${exact}`);
      }
    }
  }
  // large n where binomials overflow doubles: C(1000, 500) ≈ 2.7e299, C(2000, 1000) = Infinity
  assert.equal(passAtK(2000, 0, 1000), 0);
  assert.equal(passAtK(2000, 1001, 1000), 1);
  assert.ok(Math.abs(passAtK(2000, 1, 1000) - 0.5) < 1e-12);
  assert.ok(Math.abs(passAtK(1000, 1, 1) - 0.001) < 1e-15);
  const p = passAtK(2000, 3, 1000);
  assert.ok(Math.abs(p - (1 - (1000 / 2000) * (999 / 1999) * (998 / 1998))) < 1e-12, String(p));
  assert.throws(() => passAtK(4, 5, 1), /0 ≤ c ≤ n/);
  assert.throws(() => passAtK(4, 1, 5), /1 ≤ k ≤ n/);
});

/** Task i resolved in run r exactly when (i + r) mod 3 = 0 (8 tasks, N = 4). */
const modThree = (tasks: number, runs: number): { c: number[]; facts: EpisodeFacts[] } => {
  const c = Array.from({ length: tasks }, (_, i) => Array.from({ length: runs }, (_, r) => ((i + r) % 3 === 0 ? 1 : 0)).reduce((a: number, b: number) => a + b, 0));
  const facts: EpisodeFacts[] = [];
  for (let i = 0; i < tasks; i++)
    for (let r = 0; r < runs; r++)
      facts.push({ taskId: `o__r-${i}`, run: r, resolved: (i + r) % 3 === 0, end: 'submitted', steps: 3, tokens: 100, responseTokens: 10, seconds: 1 });
  return { c, facts };
};

test('(i + r) mod 3 with 8 tasks and N = 4: pass@1 = 11/32, pass@2 = 5/8, pass@3 = 27/32, pass@4 = 1', () => {
  const { c, facts } = modThree(8, 4);
  assert.deepEqual(c, [2, 1, 1, 2, 1, 1, 2, 1]);
  const plan = { taskIds: c.map((_, i) => `o__r-${i}`), repos: {}, runs: 4 };
  const m = evaluationMetrics(plan, facts, []);
  assert.equal(m.pass1, 11 / 32);
  assert.deepEqual(
    m.passAtK.map((x) => Number(x!.toFixed(12))),
    [11 / 32, 5 / 8, 27 / 32, 1],
  );
  assert.deepEqual(m.passAtK, m.passAtKCompleted);
  assert.equal(m.episodes.resolved, 11);
  assert.deepEqual(m.ends, { submitted: 32 });
  assert.equal(m.perRepo.length, 1);
  assert.equal(m.perRepo[0]!.repo, 'o/r');
  assert.ok(m.pass1CI!.low <= m.pass1 && m.pass1 <= m.pass1CI!.high);
  assert.match(formatEvalMetrics(m), /pass@1 34\.4%/);
});

test('infrastructure errors: listed, never scored; dataset vs completed denominators', () => {
  const plan = { taskIds: ['a__b-1', 'a__b-2'], repos: {}, runs: 2 };
  const facts: EpisodeFacts[] = [
    { taskId: 'a__b-1', run: 0, resolved: true, end: 'submitted', steps: 1, tokens: 1, responseTokens: 1, seconds: 1 },
    { taskId: 'a__b-2', run: 0, resolved: false, end: 'max_steps', steps: 1, tokens: 1, responseTokens: 1, seconds: 1 },
    { taskId: 'a__b-2', run: 1, resolved: true, end: 'submitted', steps: 1, tokens: 1, responseTokens: 1, seconds: 1 },
  ];
  const m = evaluationMetrics(plan, facts, [{ taskId: 'a__b-1', run: 1 }]);
  assert.equal(m.pass1, (1 / 2 + 1 / 2) / 2);
  assert.equal(m.pass1Completed, (1 / 1 + 1 / 2) / 2);
  assert.deepEqual(m.passAtKCompleted, [0.75, 1]); // task 1 has one completed episode: not in k = 2
  assert.equal(m.episodes.errors, 1);
  assert.equal(m.perRepo[0]!.errors, 1);
  assert.equal(repoOf('pytoolz__toolz-5a7e078'), 'pytoolz/toolz');
  assert.equal(repoOf('more-itertools__more-itertools-3bbe636'), 'more-itertools/more-itertools');
  assert.deepEqual(passAtKCurve([], 2, 'dataset'), [null, null]);
});

test('bootstrap interval over tasks: seeded, brackets the mean, narrows with more tasks', () => {
  const small = [1, 0, 1, 0, 0, 1, 0, 0];
  const a = bootstrapMeanCI(small, { seed: 3 })!;
  assert.deepEqual(bootstrapMeanCI(small, { seed: 3 }), a);
  assert.ok(a.low < 0.375 && 0.375 < a.high, JSON.stringify(a));
  const big = Array.from({ length: 800 }, (_, i) => small[i % 8]!);
  const b = bootstrapMeanCI(big, { seed: 3 })!;
  assert.ok(b.high - b.low < (a.high - a.low) / 4, JSON.stringify({ a, b }));
  assert.equal(bootstrapMeanCI([]), null);
});

test('two-sample bootstrap of a difference of means: seeded, brackets the difference, excludes 0 only when the samples differ', () => {
  const before = [-1, -1, -0.75, -1, -1, -0.75, -1, -1, -1, -0.75, -1, -1];
  const after = [-0.75, -0.5, 0.2, -0.75, -1, 0.1, -0.75, -0.5, -1, 0.3, -0.75, -0.5];
  const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length;
  const d = bootstrapDiffCI(before, after, { seed: 1 })!;
  assert.deepEqual(bootstrapDiffCI(before, after, { seed: 1 }), d);
  const diff = mean(after) - mean(before);
  assert.ok(d.low < diff && diff < d.high && d.low > 0, JSON.stringify({ d, diff }));
  const same = bootstrapDiffCI(before, [...before].reverse(), { seed: 1 })!;
  assert.ok(same.low < 0 && same.high > 0, JSON.stringify(same));
  assert.equal(bootstrapDiffCI([], after), null);
});

const C = (run: number, resolved: boolean, ef: number, regression: number, reproduction: number): Candidate => ({ run, resolved, ef, regression, reproduction });

test('hybrid cascade on hand-made tables: top max(3, ⌊K/2⌋) by EF → regression → reproduction → EF, ties kept', () => {
  assert.deepEqual([1, 2, 3, 4, 6, 7, 8, 16].map(hybridKeep), [3, 3, 3, 3, 3, 3, 4, 8]);
  // K = 8: keep the 4 highest EF (0.9, 0.8, 0.7, 0.6); most regression among them: runs 1 and 3 (10);
  // reproduction: run 3 (2 > 1). Run 0 (regression 12) is cut by EF first.
  const t1 = [
    C(0, false, 0.1, 12, 3),
    C(1, false, 0.9, 10, 1),
    C(2, false, 0.8, 9, 3),
    C(3, true, 0.7, 10, 2),
    C(4, false, 0.6, 8, 0),
    C(5, false, 0.5, 10, 3),
    C(6, false, 0.2, 10, 3),
    C(7, false, 0.3, 1, 3),
  ];
  assert.deepEqual(
    hybridSelect(t1).map((c) => c.run),
    [3],
  );
  // ties at the EF cutoff are all kept: 0.9, 0.8 and three at 0.5 → K = 6 keeps 3 + 2 tied = 5
  const t2 = [C(0, false, 0.9, 1, 0), C(1, false, 0.8, 1, 0), C(2, true, 0.5, 5, 1), C(3, false, 0.5, 5, 1), C(4, false, 0.5, 2, 0), C(5, false, 0.1, 9, 9)];
  const tied = hybridSelect(t2);
  assert.deepEqual(
    tied.map((c) => c.run),
    [2, 3],
  ); // regression 5, reproduction 1, EF 0.5: a true tie
  assert.equal(expectedResolved(tied), 0.5);
  assert.equal(pickOne(tied).run, 2);
  // final EF stage breaks a regression/reproduction tie
  const t3 = [C(0, false, 0.4, 3, 1), C(1, true, 0.6, 3, 1), C(2, false, 0.5, 3, 1)];
  assert.deepEqual(
    hybridSelect(t3).map((c) => c.run),
    [1],
  );
  // K = 1 and K = 2
  assert.deepEqual(
    hybridSelect([C(5, true, 0.2, 0, 0)]).map((c) => c.run),
    [5],
  );
  assert.deepEqual(
    hybridSelect([C(0, false, 0.9, 2, 0), C(1, true, 0.1, 3, 0)]).map((c) => c.run),
    [1],
  );
  // missing verifier stages pass everyone on
  assert.deepEqual(
    hybridSelect([
      { run: 0, resolved: false, ef: 0.2 },
      { run: 1, resolved: true, ef: 0.3 },
    ]).map((c) => c.run),
    [1],
  );
  assert.deepEqual(hybridSelect([]), []);
});

test('execution-based selection: empty patches pass every regression test, reproduction tells gold apart', () => {
  // gold, empty, wrong fix (breaks a test), test-file edit
  const cands = [C(0, true, 0.5, 30, 3), C(1, false, 0.5, 30, 0), C(2, false, 0.5, 28, 0), C(3, false, 0.5, 30, 0)];
  assert.deepEqual(
    SELECTORS.regression(cands).map((c) => c.run),
    [0, 1, 3],
  );
  assert.deepEqual(
    executionBasedSelect(cands).map((c) => c.run),
    [0],
  );
});

test('Best@K: exact over all subsets when few, ties at their expected value, oracle = pass@k', () => {
  assert.equal(kSubsets(4, 2, 1000, Math.random).length, 6);
  assert.equal(kSubsets(30, 15, 1000, () => 0.5).length, 1000);
  // one task: runs resolved [1, 0, 0, 1]; EF scores all equal → every selection is a full tie
  const task = [C(0, true, 0.5, 0, 0), C(1, false, 0.5, 0, 0), C(2, false, 0.5, 0, 0), C(3, true, 0.5, 0, 0)];
  const tie = bestAtKCurve([task], SELECTORS.executionFree, { maxK: 4 });
  assert.deepEqual(
    tie.map((x) => Number(x!.toFixed(12))),
    [0.5, 0.5, 0.5, 0.5],
  ); // a tie is worth its expected value, for every K
  const oracle = bestAtKCurve([task], oracleSelect, { maxK: 4 });
  assert.deepEqual(
    oracle.map((x) => Number(x!.toFixed(12))),
    [1, 2, 3, 4].map((k) => Number(passAtK(4, 2, k).toFixed(12))),
  );
  // a perfect verifier reaches the ceiling; a reversed one the floor
  const perfect = task.map((c) => ({ ...c, ef: c.resolved ? 1 : 0 }));
  assert.deepEqual(
    bestAtKCurve([perfect], SELECTORS.executionFree, { maxK: 4 }).map((x) => x!.toFixed(12)),
    oracle.map((x) => x!.toFixed(12)),
  );
  // many runs: sampled subsets (seeded) land close to the exact value
  const many = Array.from({ length: 20 }, (_, r) => C(r, r % 4 === 0, r % 4 === 0 ? 0.9 : Math.random() * 0.5, 0, 0));
  const a = bestAtKCurve([many], oracleSelect, { maxK: 20, subsets: 1000, seed: 1 });
  const b = bestAtKCurve([many], oracleSelect, { maxK: 20, subsets: 1000, seed: 1 });
  assert.deepEqual(a, b);
  for (let k = 1; k <= 20; k++) assert.ok(Math.abs(a[k - 1]! - passAtK(20, 5, k)) < 0.03, `k=${k}: ${a[k - 1]} vs ${passAtK(20, 5, k)}`);
  assert.deepEqual(bestAtKCurve([many], SELECTORS.executionFree, { maxK: 20, seed: 1 }).slice(-1), [1]);
  assert.deepEqual(bestAtKCurve([[C(0, true, 1, 0, 0)]], SELECTORS.hybrid, { maxK: 2 }), [1, null]);
});

const lp = (token: string, logprob: number, top: [string, number][] = []) => ({ token, logprob, top: top.map(([t, l]) => ({ token: t, logprob: l })) });

test('execution-free score: P(YES)/(P(YES)+P(NO)) at the answer token, wherever it appears', () => {
  const ln = Math.log;
  // after the last <judgement> marker, not at a fixed position; spelling variants summed
  const marked = [
    lp('No', ln(0.5)),
    lp(' wait', ln(0.9)),
    lp('<judgement>', ln(0.9)),
    lp('YES', ln(0.6), [
      ['YES', ln(0.6)],
      ['NO', ln(0.2)],
      [' Yes', ln(0.1)],
      ['maybe', ln(0.05)],
    ]),
    lp('</judgement>', 0),
  ];
  const j = judgementScore(marked);
  assert.equal(j.how, 'marker');
  assert.equal(j.position, 3);
  assert.ok(Math.abs(j.score - 0.7 / 0.9) < 1e-12, String(j.score));
  // the answer merged with the marker's end into one token (`>YES`): that token, not the closing tag after it
  const merged = judgementScore([
    lp('<judgement', 0),
    lp('>NO', ln(0.3), [
      ['>YES', ln(0.6)],
      ['>NO', ln(0.3)],
      ['>', ln(0.05)],
    ]),
    lp('</judgement>', 0, [['</judgement>', 0]]),
  ]);
  assert.deepEqual([merged.how, merged.position], ['marker', 1]);
  assert.ok(Math.abs(merged.score - 0.6 / 0.9) < 1e-12, String(merged.score));
  // a marker split over tokens, the answer after a space token
  const split = judgementScore([
    lp('<jud', 0),
    lp('gement>', 0),
    lp(' ', 0),
    lp('No', ln(0.8), [
      ['No', ln(0.8)],
      ['Yes', ln(0.2)],
    ]),
  ]);
  assert.deepEqual([split.how, split.position], ['marker', 3]);
  assert.ok(Math.abs(split.score - 0.2) < 1e-12);
  // no marker: the last sampled YES/NO word
  const sampled = judgementScore([
    lp('Yes', ln(0.3), [
      ['Yes', ln(0.3)],
      ['No', ln(0.6)],
    ]),
    lp(',', 0),
    lp(' no', ln(0.8), [
      [' no', ln(0.8)],
      [' yes', ln(0.2)],
    ]),
  ]);
  assert.equal(sampled.how, 'sampled');
  assert.equal(sampled.position, 2);
  assert.ok(Math.abs(sampled.score - 0.2) < 1e-12);
  // a multi-token spelling: the first token (Y / N) is the answer token
  const prefix = judgementScore([
    lp('x', ln(0.5), [
      ['x', ln(0.5)],
      ['Y', ln(0.1)],
      ['N', ln(0.3)],
    ]),
  ]);
  assert.equal(prefix.how, 'prefix');
  assert.ok(Math.abs(prefix.score - 0.25) < 1e-12);
  assert.deepEqual(judgementScore([lp('hmm', 0)]), { score: 0.5, position: -1, pYes: 0, pNo: 0, how: 'none' });
  assert.equal(judgementScore([]).how, 'none');
});

test('verifier prompts: the trajectory is condensed longest thoughts first; scripts and verdicts parse', () => {
  const turns = [
    { action: `${'think '.repeat(2000)}<function=finish>\n</function>`, observation: 'short' },
    { action: 'brief <function=search></function>', observation: 'o'.repeat(3000) },
  ];
  const full = trajectoryText(turns, 1e9);
  const small = trajectoryText(turns, 4000);
  assert.ok(full.length > 14_000 && small.length <= 4000, `${full.length} → ${small.length}`);
  assert.match(small, /characters condensed/);
  assert.match(small, /brief <function=search>/, 'short thoughts and every call stay');
  assert.match(small, /<function=finish>/);
  const msgs = judgeMessages({ problem: 'It breaks.', turns, patch: 'diff --git a/x b/x', maxPromptChars: 6000 });
  assert.ok(msgs[1]!.content!.length <= 6000 && msgs[1]!.content!.includes('<issue>\nIt breaks.\n</issue>') && msgs[1]!.content!.includes('diff --git a/x b/x'));
  assert.equal(scriptFrom('Sure.\n```python\nprint(1)\n```\nand\n```python\nprint("ISSUE RESOLVED")\n```'), 'print("ISSUE RESOLVED")\n');
  assert.equal(scriptFrom('no code'), null);
  assert.equal(reportsResolved('ISSUE RESOLVED\n'), true);
  assert.equal(reportsResolved('ISSUE REPRODUCED'), false);
  assert.equal(reportsResolved('ISSUE RESOLVED ISSUE REPRODUCED'), false);
});

test('the configs the docs run validate: configs/eval.json, configs/best-of-k.json with --eval-id, configs/eval-real-model.json', () => {
  const read = (f: string) => JSON.parse(readFileSync(new URL(`../../configs/${f}`, import.meta.url), 'utf8')) as Record<string, unknown>;
  const ev = validateEvalConfig(read('eval.json'));
  assert.ok(ev.ok, JSON.stringify(ev));
  assert.deepEqual([ev.config.runs, ev.config.maxSteps, ev.config.responseBudget, ev.config.sampling.temperature], [4, 100, 65_536, 1]);
  const bok = read('best-of-k.json');
  assert.equal(bok.evalId, undefined, 'the evaluation comes from --eval-id');
  const v = validateBestOfKConfig({ ...bok, evalId: 'eval-1' });
  assert.ok(v.ok, JSON.stringify(v));
  assert.ok(v.config.executionFree && v.config.executionBased?.regression && v.config.executionBased.reproduction);
  assert.equal(v.config.subsets, 1000);
  const missing = validateBestOfKConfig(bok);
  assert.ok(!missing.ok && missing.errors.some((e) => e.includes('evalId')), JSON.stringify(missing));
  // docs/real-models.md's evaluation of an imported model, its tool format picked by the chat template
  const real = validateEvalConfig(read('eval-real-model.json'));
  assert.ok(real.ok, JSON.stringify(real));
  assert.deepEqual(real.config.model, { path: 'models/qwen-coder', toolFormat: 'auto' });
});

test('the errors section groups episodes by reason, most frequent first, one line each', () => {
  assert.equal(formatEvalErrors([]), 'errors: none');
  const text = formatEvalErrors([
    { taskId: 'a', run: 0, reason: 'PolicyRejected: HTTP 400\n  body' },
    { taskId: 'b', run: 1, reason: 'sandbox: no such image' },
    { taskId: 'c', run: 0, reason: 'sandbox: no such image' },
    { taskId: 'd', run: 0, reason: 'sandbox: no such image' },
    { taskId: 'e', run: 2, reason: 'sandbox: no such image' },
    { taskId: 'f', run: 0, reason: 'x'.repeat(500) },
  ]);
  const lines = text.split('\n');
  assert.equal(lines[0], 'errors (6 episodes that could not happen; not scored):');
  assert.equal(lines[1], '  4 × sandbox: no such image');
  assert.equal(lines[2], '      b/1, c/0, d/0, … (1 more)');
  assert.equal(lines[3], '  1 × PolicyRejected: HTTP 400 body');
  assert.ok(lines[5]!.length < 320 && lines[5]!.endsWith('...'));
});
