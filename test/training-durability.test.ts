// Durability against a real dev server: the worker (a `swerl worker` child process) is SIGKILLed
// mid-iteration and restarted; the server is stopped and restarted on the same SQLite file mid-run.
// Each run completes with no rollout lost or counted twice and a contiguous checkpoint sequence.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { startWorkers } from '../workers/index.ts';
import { keys, listCheckpoints, openStore } from '../lib/store.ts';
import type { Trajectory } from '../lib/types.ts';
import { statusQuery } from '../workflows/signals.ts';
import type { IterationMetrics, TrainingRunResult } from '../workflows/shapes.ts';
import { spawnWorker, startTestTemporal, tinyConfig, waitFor, type TestTemporal } from './helpers/temporal.ts';

let t: TestTemporal;
before(async () => {
  t = await startTestTemporal();
});
after(async () => {
  await t?.close();
});

async function checkRun(storeUrl: string, runId: string, iterations: number, perIteration: number): Promise<void> {
  const store = openStore(storeUrl);
  assert.deepEqual(await listCheckpoints(store, runId), Array.from({ length: iterations + 1 }, (_, i) => i));
  for (let n = 0; n < iterations; n++) {
    const trajKeys = await store.list(keys.trajectories(runId, n));
    assert.equal(trajKeys.length, perIteration, `iteration ${n}: one trajectory per (task, sample)`);
    for (const k of trajKeys) assert.equal((await store.getJson<Trajectory>(k))!.checkpoint, n);
  }
  const metrics = ((await store.get(keys.metrics(runId)))?.toString('utf8') ?? '').trim().split('\n').map((l) => JSON.parse(l) as IterationMetrics);
  assert.deepEqual(metrics.map((m) => m.iteration), Array.from({ length: iterations }, (_, i) => i), 'one metrics line per iteration');
  for (const m of metrics) {
    assert.equal(m.learnerTrajectories, perIteration, `iteration ${m.iteration}: the learner consumed every trajectory once`);
    assert.equal(m.rolloutErrors, 0);
    assert.equal(m.checkpoint, m.iteration + 1);
  }
}

test('a SIGKILLed worker restarted mid-iteration loses and duplicates no rollout', async () => {
  const runId = 'kill-worker';
  const config = tinyConfig(t.dir, { runId, iterations: 3, batch: { tasks: 8, samples: 4 }, maxInflightRollouts: 32 });
  // the restarted worker's policy server listens on a new port: rollouts ask the workflow for a new syncPolicy
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--policy-port', '0', '--threads', '1'];
  const logFile = join(t.dir, 'worker.log');
  let worker: ChildProcess = spawnWorker(args, logFile);
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await waitFor('iteration 1 under way', async () => {
      const s = await t.client.workflow.getHandle(runId).query(statusQuery);
      return s.running && s.iteration === 1 && s.phase === 'rollouts';
    }, 150_000, 50);
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    worker = spawnWorker(args, logFile);
    // and once more inside a learner step (if the poll catches it): checkpoint 3 must be written once, from 2
    const st = await waitFor('iteration 2 learning (or past it)', async () => {
      const s = await t.client.workflow.getHandle(runId).query(statusQuery);
      return (s.running && s.iteration === 2 && s.phase === 'learning') || s.iteration >= 3 ? s : null;
    }, 150_000, 20);
    if (st.iteration === 2) {
      worker.kill('SIGKILL');
      await new Promise((r) => worker.once('exit', r));
      worker = spawnWorker(args, logFile);
    }
    const result: TrainingRunResult = await h.result();
    assert.equal(result.iterations, 3);
    await checkRun(config.store.url, runId, 3, 32);
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
  }
});

test('the Temporal server stopped and restarted on the same SQLite file mid-run: the run completes', async () => {
  const runId = 'restart-server';
  const config = tinyConfig(t.dir, { runId, iterations: 3, batch: { tasks: 4, samples: 2 } });
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  try {
    await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await waitFor('iteration 1 under way', async () => {
      const s = await t.client.workflow.getHandle(runId).query(statusQuery);
      return s.running && s.iteration >= 1;
    }, 150_000, 50);
    await t.restartServer();
    const result: TrainingRunResult = await waitFor('the run after the restart', async () => t.client.workflow.getHandle(runId).result(), 150_000, 1000);
    assert.equal(result.iterations, 3);
    await checkRun(config.store.url, runId, 3, 8);
  } finally {
    await workers.shutdown();
  }
});
