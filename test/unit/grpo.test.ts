import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  advantagesByName,
  buildTrainBatch,
  compactFilterMask,
  groupAdvantages,
  grpoAdvantages,
  leaveOneOutAdvantages,
  keptTokens,
  mergeIterationSummaries,
  packSequences,
  scatterKeptTokens,
  summariseIteration,
} from '../../lib/grpo.ts';
import type { EndReason } from '../../lib/types.ts';

const close = (a: readonly number[], b: readonly number[], tol = 1e-9) => {
  assert.equal(a.length, b.length);
  a.forEach((x, i) => assert.ok(Math.abs(x - b[i]) < tol, `index ${i}: ${x} vs ${b[i]}`));
};

test('leave-one-out advantages by hand', () => {
  // r = [1,0,0,1]: A_0 = 1 − (0+0+1)/3 = 2/3, A_1 = 0 − 2/3
  close(leaveOneOutAdvantages([1, 0, 0, 1]), [2 / 3, -2 / 3, -2 / 3, 2 / 3]);
  close(leaveOneOutAdvantages([1, 0]), [1, -1]);
  close(leaveOneOutAdvantages([3, 1, 2]), [3 - 1.5, 1 - 2.5, 2 - 2]);
  close(leaveOneOutAdvantages([0.7]), [0.7]);
  close(leaveOneOutAdvantages([1, 1, 1]), [0, 0, 0]);
  close(leaveOneOutAdvantages([0, 0, 0, 0]), [0, 0, 0, 0]);
  assert.deepEqual(leaveOneOutAdvantages([]), []);
});

test('GRPO std-normalised advantages by hand', () => {
  // mean 0.5, population std 0.5
  close(grpoAdvantages([1, 0, 1, 0], 0), [1, -1, 1, -1]);
  // [1,0,0,0]: mean .25, std sqrt(3)/4
  const s = Math.sqrt(3) / 4;
  close(grpoAdvantages([1, 0, 0, 0], 0), [0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s]);
  close(grpoAdvantages([1, 1], 1e-6), [0, 0]);
  close(advantagesByName('grpo')([1, 0]), [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)]);
  close(advantagesByName('loo')([1, 0]), [1, -1]);
  assert.throws(() => advantagesByName('ppo' as never), /unknown advantage estimator "ppo"/);
});

test('compact-filter mask per end reason', () => {
  const want: Record<EndReason, 0 | 1> = {
    submitted: 1,
    done: 1,
    error: 1,
    env_timeout: 1,
    max_steps: 0,
    max_context: 0,
    context_exhausted: 0,
    timeout: 0,
  };
  for (const [end, m] of Object.entries(want)) assert.equal(compactFilterMask(end as EndReason), m, end);
});

test('groupAdvantages groups by task; filtered rewards count in the baseline', () => {
  const s = [
    { taskId: 'a', sample: 0, reward: 1, end: 'done' as const },
    { taskId: 'b', sample: 0, reward: 1, end: 'done' as const },
    { taskId: 'a', sample: 1, reward: 0, end: 'max_steps' as const },
    { taskId: 'a', sample: 2, reward: 0, end: 'done' as const },
    { taskId: 'b', sample: 1, reward: 1, end: 'done' as const },
  ];
  // a: [1,0,0] → [1, -.5, -.5]; b all equal → 0
  close(groupAdvantages(s, 'loo'), [1, 0, -0.5, -0.5, 0]);
});

test('buildTrainBatch packs, masks and drops', () => {
  const traj = (ids: number[], mask: number[], end: EndReason) => ({
    ids,
    mask,
    logprobs: mask.map((m, i) => (m ? -0.1 * (i + 1) : 0)),
    end,
  });
  const trajs = [traj([1, 2, 3, 4], [0, 0, 1, 1], 'done'), traj([5, 6, 7], [0, 1, 1], 'max_context'), traj([8, 9], [0, 1], 'done'), traj([10, 11, 12], [0, 1, 0], 'submitted')];
  const adv = [0.5, -0.5, 0, -1];
  const b = buildTrainBatch(trajs, adv, { includeOldLogprobs: true });
  assert.deepEqual([...b.ids], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  assert.deepEqual([...b.offsets], [0, 4, 7, 9, 12]);
  assert.deepEqual([...b.mask], [0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0]);
  assert.deepEqual([...b.advantages], [0.5, -0.5, 0, -1]);
  assert.equal(b.episodes, 4);
  assert.equal(b.trainableTokens, 4);
  close(
    [...b.oldLogprobs!],
    [0, 0, -0.3, -0.4, 0, -0.2, -0.3, 0, -0.2, 0, -0.2, 0].map((x) => Math.fround(x)),
    1e-7,
  );

  const d = buildTrainBatch(trajs, adv, { dropZeroAdvantage: true });
  assert.deepEqual(d.kept, [0, 3]); // 1: filtered (no trainable token), 2: A = 0
  assert.deepEqual([...d.ids], [1, 2, 3, 4, 10, 11, 12]);
  assert.deepEqual([...d.offsets], [0, 4, 7]);
  assert.deepEqual([...d.mask], [0, 0, 1, 1, 0, 1, 0]);
  assert.deepEqual([...d.advantages], [0.5, -1]);
  assert.equal(d.episodes, 4);
  assert.equal(d.oldLogprobs, undefined);

  const nf = buildTrainBatch(trajs, adv, { compactFilter: false });
  assert.deepEqual([...nf.mask.slice(4, 7)], [0, 1, 1]);
  assert.throws(() => buildTrainBatch(trajs, [1]), /4 trajectories but 1 advantages/);
});

test('summariseIteration', () => {
  const s = summariseIteration([
    { taskId: 'a', sample: 0, reward: 1, end: 'done', tokens: 10, responseTokens: 3, steps: 3 },
    { taskId: 'a', sample: 1, reward: 0, end: 'max_steps', tokens: 20, responseTokens: 5, steps: 5 },
    { taskId: 'b', sample: 0, reward: 0, end: 'timeout', tokens: 5, responseTokens: 1, steps: 1 },
    { taskId: 'b', sample: 1, reward: 0, end: 'max_context', tokens: 5, responseTokens: 1, steps: 1 },
  ]);
  assert.equal(s.episodes, 4);
  assert.equal(s.meanReward, 0.25);
  assert.equal(s.successRate, 0.25);
  assert.deepEqual(s.filtered, { max_context: 1, context_exhausted: 0, max_steps: 1, timeout: 1 });
  assert.deepEqual(s.ends, { done: 1, max_steps: 1, timeout: 1, max_context: 1 });
  assert.equal(s.groups, 2);
  assert.equal(s.zeroAdvantageGroups, 1);
  assert.equal(s.tokens, 40);
  assert.equal(s.responseTokens, 10);
  assert.equal(s.meanSteps, 2.5);
  assert.equal(summariseIteration([]).meanReward, 0);
});

test('context_exhausted is compact-filtered and counted; summaries recorded before it merge', () => {
  const s = summariseIteration([
    { taskId: 'a', sample: 0, reward: 1, end: 'submitted', tokens: 10, responseTokens: 3, steps: 3 },
    { taskId: 'a', sample: 1, reward: 0, end: 'context_exhausted', tokens: 4096, responseTokens: 900, steps: 7 },
  ]);
  assert.deepEqual(s.filtered, { max_context: 0, context_exhausted: 1, max_steps: 0, timeout: 0 });
  assert.deepEqual(s.ends, { submitted: 1, context_exhausted: 1 });
  const b = buildTrainBatch([{ ids: [1, 2, 3], mask: [0, 1, 1], logprobs: [0, -1, -1], end: 'context_exhausted' }], [1]);
  assert.deepEqual([...b.mask], [0, 0, 0]);
  // a child workflow's summary from a history recorded before context_exhausted existed has no such key
  const old = { ...s, filtered: { max_context: 2, max_steps: 1, timeout: 0 } } as unknown as typeof s;
  assert.deepEqual(mergeIterationSummaries([s, old]).filtered, { max_context: 2, context_exhausted: 1, max_steps: 1, timeout: 0 });
});

test("the learner step's log-probs go back to their sequences: packSequences and scatterKeptTokens invert keptTokens", () => {
  // three sequences of 2, 3 and 1 tokens
  const all = { ids: Int32Array.from([5, 6, 7, 8, 9, 4]), offsets: Int32Array.from([0, 2, 5, 6]) };
  const rest = packSequences(all, [2, 0]);
  assert.deepEqual([...rest.ids], [4, 5, 6]);
  assert.deepEqual([...rest.offsets], [0, 1, 3]);
  const into = new Float32Array(6).fill(NaN);
  scatterKeptTokens(into, all.offsets, [2, 0], Float32Array.from([-4, -5, -6]));
  scatterKeptTokens(into, all.offsets, [1], Float32Array.from([-7, -8, -9]));
  assert.deepEqual([...into], [-5, -6, -7, -8, -9, -4]);
  assert.deepEqual([...keptTokens(into, all.offsets, [1])], [-7, -8, -9]);
  assert.throws(() => scatterKeptTokens(into, all.offsets, [1], Float32Array.from([-1, -2])), /2 values for 3 tokens/);
});
