// Asynchronous training end to end against a real dev server and worker (DESIGN §10): a one-step run and pump runs
// in both orders complete with every trajectory trained exactly once and no token more than η versions old; and the
// equalities that make the modes one family, checkpoint bytes compared: the pump with η = 0 is the synchronous loop,
// with η = 1 (admission order) it is one-step.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { keys, openStore } from '../../lib/store.ts';
import type { Trajectory } from '../../lib/types.ts';
import { iterationWorkflowId, type TrainingRunResult } from '../../lib/training/shapes.ts';
import { assertSameCheckpoints, checkExactlyOnce as check, metricsOf } from '../helpers/async.ts';
import { tinyConfig, useTemporalWithWorker, type TestConfig, type TestTemporal } from '../helpers/temporal.ts';
import type { TrainingConfigInput } from '../../lib/config.ts';

let t: TestTemporal;
useTemporalWithWorker((x) => (t = x));

const ITERATIONS = 3;
const TASKS = 4;
const SAMPLES = 2;

function config(runId: string, over: Partial<TrainingConfigInput> = {}): TestConfig {
  return tinyConfig(t.dir, { runId, iterations: ITERATIONS, batch: { tasks: TASKS, samples: SAMPLES }, maxInflightRollouts: 2 * TASKS * SAMPLES, ...over });
}

async function run(c: TestConfig): Promise<TrainingRunResult> {
  return t.client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: c.runId!, args: [c] });
}

const checkExactlyOnce = (c: TestConfig, eta: number, sampledFrom: ((n: number) => number) | null) =>
  check(c, { iterations: ITERATIONS, perBatch: TASKS * SAMPLES, eta, ...(sampledFrom ? { sampledFrom } : {}) });

test('one-step: batch n sampled from checkpoint n−1 while step n−1 trains, each trained once; η = 1 pump in admission order is the same run, bit for bit, through continue-as-new', async () => {
  // both continue as new after every step: the pending batch (one-step) and the groups in flight (pump) go through it
  const oneStep = config('one-step', { async: { mode: 'one-step' }, continueAsNewEvery: 1 });
  const pump1 = config('pump-eta1', { async: { mode: 'pump', maxStaleness: 1, order: 'admission' }, continueAsNewEvery: 1 });
  const [r1, r2] = [await run(oneStep), await run(pump1)];
  assert.equal(r1.checkpoint, ITERATIONS);
  assert.equal(r2.checkpoint, ITERATIONS);
  await checkExactlyOnce(oneStep, 1, (n) => Math.max(0, n - 1));
  await checkExactlyOnce(pump1, 1, (n) => Math.max(0, n - 1));
  const m = await metricsOf(oneStep);
  assert.deepEqual(
    m.map((x) => x.sampledFrom),
    [0, 0, 1],
  );
  assert.ok(m[2]!.mismatch!.staleness!.max === 1, 'batch 2 (from checkpoint 1) trained by step 2: one version old');
  assertSameCheckpoints(oneStep, pump1, ITERATIONS);
  // the overlap is in the history: iteration 1 schedules its learner step, then batch 2's sync and rollouts without waiting for it
  const events = (await t.client.workflow.getHandle(iterationWorkflowId('one-step', 1)).fetchHistory()).events ?? [];
  const at = (type: string, what: 'scheduled' | 'completed') =>
    events.findIndex((e) =>
      what === 'scheduled'
        ? e.activityTaskScheduledEventAttributes?.activityType?.name === type
        : events.find((s) => Number(s.eventId) === Number(e.activityTaskCompletedEventAttributes?.scheduledEventId))?.activityTaskScheduledEventAttributes?.activityType?.name ===
          type,
    );
  assert.ok(at('learnerStep', 'scheduled') >= 0 && at('learnerStep', 'scheduled') < at('syncPolicy', 'scheduled'), 'the step first, then the next batch, not waiting for it');
  assert.ok(at('syncPolicy', 'scheduled') < at('rollout', 'completed'));
});

test('pump with η = 0 is the synchronous loop, bit for bit', async () => {
  const sync = config('sync');
  const pump0 = config('pump-eta0', { async: { mode: 'pump', maxStaleness: 0 } });
  await run(sync);
  await run(pump0);
  await checkExactlyOnce(sync, 0, (n) => n);
  await checkExactlyOnce(pump0, 0, (n) => n);
  assertSameCheckpoints(sync, pump0, ITERATIONS);
  // and the same trajectories
  const store = openStore(sync.store.url);
  for (let n = 0; n < ITERATIONS; n++) {
    for (const k of await store.list(keys.trajectories('sync', n))) {
      const a = (await store.getJson<Trajectory>(k))!;
      const b = (await store.getJson<Trajectory>(k.replace('runs/sync/', 'runs/pump-eta0/')))!;
      assert.deepEqual([b.ids, b.logprobs, b.reward], [a.ids, a.logprobs, a.reward], k);
    }
  }
});

test('pump in streaming order: episodes move to newer checkpoints between turns, every token within η, each trajectory trained once', async () => {
  const eta = 2;
  // Slow environment steps (a seeded long tail), so that checkpoints appear while episodes are running. Batches 0–2
  // all start on checkpoint 0 at once, so whether one of them outlasts batch 0 and a learner step is left to the
  // tail (it failed once on a loaded host); each later batch is admitted when a checkpoint appears and starts on it,
  // so its episodes are running when the next one appears a learner step later: two more iterations make that the
  // usual case rather than a tail event.
  const iterations = ITERATIONS + 2;
  const base = config('pump-streaming', { iterations, async: { mode: 'pump', maxStaleness: eta, order: 'streaming' }, maxInflightRollouts: 3 * TASKS * SAMPLES });
  const c = { ...base, env: { kind: 'frozenlake' as const, size: 4, maxSteps: 8, latency: { medianMs: 250, sigma: 0.5, growth: 0.5, maxMs: 2000 } } };
  const r = await run(c);
  assert.equal(r.iterations, iterations);
  const trajs = await check(c, { iterations, perBatch: TASKS * SAMPLES, eta });
  let moved = 0;
  for (const tr of trajs) {
    assert.equal(tr.versions?.length, tr.ids.length, 'a version per token');
    assert.equal(tr.versions![tr.promptLength], tr.checkpoint, 'the first turn on the version it started on');
    assert.ok(
      tr.versions!.every((v, i) => i === 0 || v >= tr.versions![i - 1]!),
      'versions never go back',
    );
    if (tr.versions!.some((v, i) => tr.mask[i] && v > tr.checkpoint)) moved++;
  }
  assert.ok(moved > 0, 'some episodes went on on a newer checkpoint');
  console.log(`# streaming: ${moved} of ${trajs.length} episodes moved to a newer checkpoint mid-episode`);
});
