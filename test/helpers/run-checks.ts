// What a finished synchronous training run must hold, whatever crashed on the way: no rollout lost or run twice.
import assert from 'node:assert/strict';
import { keys, listCheckpoints, openStore } from '../../lib/store.ts';
import type { Trajectory } from '../../lib/types.ts';
import type { IterationMetrics } from '../../lib/training/shapes.ts';

/** The run's metrics lines, in the order written. */
export async function runMetrics(storeUrl: string, runId: string): Promise<IterationMetrics[]> {
  const text = (await openStore(storeUrl).get(keys.metrics(runId)))?.toString('utf8') ?? '';
  return text
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as IterationMetrics);
}

/**
 * Checkpoints 0..iterations; per iteration n, one trajectory per (task, sample) sampled from checkpoint n, one
 * metrics line whose learner consumed each trajectory once, no rollout error, and checkpoint n + 1 after it.
 */
export async function assertRunComplete(storeUrl: string, runId: string, iterations: number, perIteration: number): Promise<IterationMetrics[]> {
  const store = openStore(storeUrl);
  assert.deepEqual(
    await listCheckpoints(store, runId),
    Array.from({ length: iterations + 1 }, (_, i) => i),
  );
  for (let n = 0; n < iterations; n++) {
    const trajKeys = await store.list(keys.trajectories(runId, n));
    assert.equal(trajKeys.length, perIteration, `iteration ${n}: one trajectory per (task, sample)`);
    for (const k of trajKeys) assert.equal((await store.getJson<Trajectory>(k))!.checkpoint, n);
  }
  const metrics = await runMetrics(storeUrl, runId);
  assert.deepEqual(
    metrics.map((m) => m.iteration),
    Array.from({ length: iterations }, (_, i) => i),
    'one metrics line per iteration',
  );
  for (const m of metrics) {
    assert.equal(m.learnerTrajectories, perIteration, `iteration ${m.iteration}: the learner consumed every trajectory once`);
    assert.equal(m.rolloutErrors, 0);
    assert.equal(m.checkpoint, m.iteration + 1);
  }
  return metrics;
}
