// test-group: temporal
// Asynchronous training end to end against a real dev server and worker (DESIGN §10): a one-step run and pump runs
// in both orders complete with every trajectory trained exactly once and no token more than η versions old; and the
// equalities that make the modes one family, checkpoint bytes compared: the pump with η = 0 is the synchronous loop,
// with η = 1 (admission order) it is one-step.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { keys, listCheckpoints, openStore } from '../lib/store.ts';
import type { Trajectory } from '../lib/types.ts';
import type { IterationMetrics, TrainingRunResult } from '../workflows/shapes.ts';
import { tinyConfig, useTemporalWithWorker, type TestConfig, type TestTemporal } from './helpers/temporal.ts';
import type { TrainingConfigInput } from '../lib/config.ts';

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

async function metricsOf(c: TestConfig): Promise<IterationMetrics[]> {
  const text = (await openStore(c.store.url).get(keys.metrics(c.runId!)))?.toString('utf8') ?? '';
  return text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as IterationMetrics);
}

/** The bytes of checkpoint k's files (stats.json aside: it holds timings). */
function checkpointBytes(c: TestConfig, k: number): Map<string, Buffer> {
  const dir = openStore(c.store.url).dirFor(keys.checkpoint(c.runId!, k));
  return new Map(
    readdirSync(dir)
      .filter((f) => f !== 'stats.json')
      .map((f) => [f, readFileSync(join(dir, f))]),
  );
}

function assertSameCheckpoints(a: TestConfig, b: TestConfig): void {
  for (let k = 1; k <= ITERATIONS; k++) {
    const x = checkpointBytes(a, k);
    const y = checkpointBytes(b, k);
    assert.deepEqual([...x.keys()].sort(), [...y.keys()].sort());
    for (const [f, bytes] of x) assert.ok(bytes.equals(y.get(f)!), `checkpoint ${k} ${f}: ${a.runId} and ${b.runId} differ`);
  }
}

/** Every batch's trajectories are there once, each sampled within η of the step that trained it; one metrics line per step, each training the whole batch. */
async function checkExactlyOnce(c: TestConfig, eta: number, sampledFrom: (n: number) => number | null): Promise<Trajectory[]> {
  const store = openStore(c.store.url);
  assert.deepEqual(
    await listCheckpoints(store, c.runId!),
    Array.from({ length: ITERATIONS + 1 }, (_, i) => i),
  );
  const all: Trajectory[] = [];
  for (let n = 0; n < ITERATIONS; n++) {
    const ks = await store.list(keys.trajectories(c.runId!, n));
    assert.equal(ks.length, TASKS * SAMPLES, `batch ${n}: one trajectory per (task, sample)`);
    for (const k of ks) {
      const tr = (await store.getJson<Trajectory>(k))!;
      const want = sampledFrom(n);
      if (want !== null) assert.equal(tr.checkpoint, want, `${k} sampled from checkpoint ${want}`);
      const versions = tr.mask.map((m, i) => (m ? (tr.versions?.[i] ?? tr.checkpoint) : null)).filter((v): v is number => v !== null);
      for (const v of versions) assert.ok(n - v >= 0 && n - v <= eta, `${k}: a token of version ${v} trained by step ${n} (η ${eta})`);
      all.push(tr);
    }
  }
  const m = await metricsOf(c);
  assert.deepEqual(
    m.map((x) => x.iteration),
    Array.from({ length: ITERATIONS }, (_, i) => i),
  );
  for (const x of m) {
    assert.equal(x.learnerTrajectories, TASKS * SAMPLES, `step ${x.iteration} trained its whole batch`);
    assert.equal(x.checkpoint, x.iteration + 1);
    if (x.mismatch?.staleness) assert.ok(x.mismatch.staleness.max <= eta, `step ${x.iteration}: staleness ${JSON.stringify(x.mismatch.staleness)}`);
  }
  return all;
}

test('one-step: batch n sampled from checkpoint n−1 while step n−1 trains, each trained once; η = 1 pump in admission order is the same run, bit for bit', async () => {
  const oneStep = config('one-step', { async: { mode: 'one-step' } });
  const pump1 = config('pump-eta1', { async: { mode: 'pump', maxStaleness: 1, order: 'admission' } });
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
  assertSameCheckpoints(oneStep, pump1);
});

test('pump with η = 0 is the synchronous loop, bit for bit', async () => {
  const sync = config('sync');
  const pump0 = config('pump-eta0', { async: { mode: 'pump', maxStaleness: 0 } });
  await run(sync);
  await run(pump0);
  await checkExactlyOnce(sync, 0, (n) => n);
  await checkExactlyOnce(pump0, 0, (n) => n);
  assertSameCheckpoints(sync, pump0);
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
  // slow environment steps (a seeded long tail), so that checkpoints appear while episodes are running
  const base = config('pump-streaming', { async: { mode: 'pump', maxStaleness: eta, order: 'streaming' }, maxInflightRollouts: 3 * TASKS * SAMPLES });
  const c = { ...base, env: { kind: 'frozenlake' as const, size: 4, maxSteps: 8, latency: { medianMs: 150, sigma: 0.5, growth: 0.5, maxMs: 2000 } } };
  const r = await run(c);
  assert.equal(r.iterations, ITERATIONS);
  const trajs = await checkExactlyOnce(c, eta, () => null);
  let moved = 0;
  for (const tr of trajs) {
    assert.equal(tr.versions?.length, tr.ids.length, 'a version per token');
    assert.equal(tr.versions![tr.promptLength], tr.checkpoint, 'the first turn on the version it started on');
    assert.ok(tr.versions!.every((v, i) => i === 0 || v >= tr.versions![i - 1]!), 'versions never go back');
    if (tr.versions!.some((v, i) => tr.mask[i] && v > tr.checkpoint)) moved++;
  }
  assert.ok(moved > 0, 'some episodes went on on a newer checkpoint');
  console.log(`# streaming: ${moved} of ${trajs.length} episodes moved to a newer checkpoint mid-episode`);
});
