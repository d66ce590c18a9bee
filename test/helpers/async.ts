// Checks of asynchronous runs (DESIGN §10) shared by the async test files: every trajectory trained exactly once and
// within the staleness bound, and two runs' checkpoints compared byte for byte.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { keys, listCheckpoints, openStore } from '../../lib/store.ts';
import type { Trajectory } from '../../lib/types.ts';
import type { IterationMetrics } from '../../lib/training/shapes.ts';
import type { TestConfig } from './temporal.ts';

export async function metricsOf(c: TestConfig): Promise<IterationMetrics[]> {
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

/** Checkpoints 1..iterations of two runs are the same bytes. */
export function assertSameCheckpoints(a: TestConfig, b: TestConfig, iterations: number): void {
  for (let k = 1; k <= iterations; k++) {
    const x = checkpointBytes(a, k);
    const y = checkpointBytes(b, k);
    assert.deepEqual([...x.keys()].sort(), [...y.keys()].sort());
    for (const [f, bytes] of x) assert.ok(bytes.equals(y.get(f)!), `checkpoint ${k} ${f}: ${a.runId} and ${b.runId} differ`);
  }
}

/**
 * Every batch's trajectories are stored once, each token sampled within η versions of the step that trained it
 * (`sampledFrom(n)`, when given, is the checkpoint every episode of batch n started on); one metrics line per step,
 * each step training its whole batch once. Returns the trajectories.
 */
export async function checkExactlyOnce(c: TestConfig, o: { iterations: number; perBatch: number; eta: number; sampledFrom?: (n: number) => number }): Promise<Trajectory[]> {
  const store = openStore(c.store.url);
  assert.deepEqual(
    await listCheckpoints(store, c.runId!),
    Array.from({ length: o.iterations + 1 }, (_, i) => i),
  );
  const all: Trajectory[] = [];
  for (let n = 0; n < o.iterations; n++) {
    const ks = await store.list(keys.trajectories(c.runId!, n));
    assert.equal(ks.length, o.perBatch, `batch ${n}: one trajectory per (task, sample)`);
    for (const k of ks) {
      const tr = (await store.getJson<Trajectory>(k))!;
      if (o.sampledFrom) assert.equal(tr.checkpoint, o.sampledFrom(n), `${k} sampled from checkpoint ${o.sampledFrom(n)}`);
      tr.mask.forEach((m, i) => {
        if (!m) return;
        const v = tr.versions?.[i] ?? tr.checkpoint;
        assert.ok(n - v >= 0 && n - v <= o.eta, `${k}: a token of version ${v} trained by step ${n} (η ${o.eta})`);
      });
      all.push(tr);
    }
  }
  const m = await metricsOf(c);
  assert.deepEqual(
    m.map((x) => x.iteration),
    Array.from({ length: o.iterations }, (_, i) => i),
    'one metrics line per step',
  );
  for (const x of m) {
    assert.equal(x.learnerTrajectories, o.perBatch, `step ${x.iteration} trained its whole batch, once`);
    assert.equal(x.checkpoint, x.iteration + 1);
    assert.equal(x.rolloutErrors, 0);
    if (x.mismatch?.staleness) assert.ok(x.mismatch.staleness.max <= o.eta, `step ${x.iteration}: staleness ${JSON.stringify(x.mismatch.staleness)}`);
  }
  return all;
}
