// A short FrozenLake run end to end through `swerl train`'s client side against a real dev server:
// trajectory count = tasks × samples × iterations, checkpoints contiguous 0..N, one metrics line per iteration.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { train } from '../../scripts/commands/train.ts';
import { keys, listCheckpoints, openStore } from '../../lib/store.ts';
import type { Trajectory } from '../../lib/types.ts';
import { useTemporalWithWorker, tinyConfig, type TestTemporal } from '../helpers/temporal.ts';

let t: TestTemporal;

useTemporalWithWorker((x) => (t = x));

test('a short FrozenLake run completes with every trajectory and checkpoint in the store', async () => {
  // a 2×2 lake without holes that fails a walk of too many moves: rewards differ within groups, so steps train
  const config = tinyConfig(t.dir, { iterations: 2, batch: { tasks: 4, samples: 2 }, env: { kind: 'frozenlake', size: 2, holeProbability: 0, maxSteps: 8, stepLimit: 'fail' } });
  const configPath = join(t.dir, 'config.json');
  writeFileSync(configPath, JSON.stringify(config));
  const out = join(t.dir, 'out');
  const o = await train({ config: configPath, out, address: t.server.address, runId: 'short-run', quiet: true });
  assert.equal(o.result.iterations, 2);
  assert.equal(o.result.checkpoint, 2);
  assert.equal(o.result.stopped, false);

  const store = openStore(config.store.url);
  assert.deepEqual(await listCheckpoints(store, 'short-run'), [0, 1, 2]);
  const sampled: number[] = [];
  for (const n of [0, 1]) {
    const trajKeys = await store.list(keys.trajectories('short-run', n));
    assert.equal(trajKeys.length, 4 * 2, `iteration ${n} trajectories`);
    sampled[n] = 0;
    for (const k of trajKeys) {
      const tr = (await store.getJson<Trajectory>(k))!;
      assert.equal(tr.iteration, n);
      assert.equal(tr.checkpoint, n, 'sampled from checkpoint n');
      assert.equal(tr.ids.length, tr.mask.length);
      sampled[n] += tr.mask.filter((m) => m !== 0).length;
    }
  }
  const lines = readFileSync(o.metricsPath, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.deepEqual(
    lines.map((m) => m.iteration),
    [0, 1],
  );
  for (const m of lines) {
    assert.equal(m.learnerTrajectories, 8);
    assert.equal(m.episodes, 8);
    assert.ok(m.rolloutSeconds >= 0 && m.learnerSeconds >= 0 && m.orchestrationSeconds >= 0);
    // π_old of every sampled token (the trained ones from the step's own forward): the sampler's weights, rounding only
    assert.equal(m.mismatch.tokens, sampled[m.iteration], `iteration ${m.iteration}: mismatch over every sampled token`);
    assert.ok(m.mismatch.maxAbsDelta <= 1e-4, `iteration ${m.iteration}: ${JSON.stringify(m.mismatch)}`);
  }
  assert.ok(
    lines.some((m) => m.zeroAdvantageGroups < 4),
    'a step trained some sequences',
  );
  assert.ok(
    o.plotPaths.every((p) => existsSync(p)),
    'reward plot written',
  );

  const desc = await t.client.workflow.getHandle('short-run').describe();
  assert.equal(desc.status.name, 'COMPLETED');
  const sa = desc.searchAttributes as Record<string, unknown[]>;
  assert.deepEqual(sa.RlIteration, [2]);
  assert.deepEqual(sa.RlPhase, ['finished']);
  assert.equal(typeof sa.RlMeanReward?.[0], 'number');
});
