// Two training runs at once on one worker (one learner, one policy server): every trajectory's sampled
// log-probs are its own run's checkpoint's, token for token. Both runs have a checkpoint 0 and 1, so a
// server known by index alone would hand one run's rollouts the other run's weights.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { train } from '../../scripts/commands/train.ts';
import { keys, openStore } from '../../lib/store.ts';
import type { Trajectory } from '../../lib/types.ts';
import { policyModelLoads } from '../../lib/metrics.ts';
import { useTemporalWithWorker, tinyConfig, type TestTemporal } from '../helpers/temporal.ts';

let t: TestTemporal;

useTemporalWithWorker((x) => (t = x));

interface LogprobLearner {
  logprobs(b: { ids: Int32Array; offsets: Int32Array }): Promise<Float32Array>;
  close(): void;
}

test('two runs sharing one worker each sample only from their own checkpoints', async () => {
  const { Learner } = (await import(fileURLToPath(new URL('../../gpu-learner/index.ts', import.meta.url)))) as {
    Learner: { load(dir: string, o: { device: 'cpu'; threads: number }): Promise<LogprobLearner> };
  };
  const runs = [
    { runId: 'shared-a', model: { preset: 'frozenlake' as const, seed: 1 } },
    { runId: 'shared-b', model: { preset: 'frozenlake' as const, seed: 2 } },
  ];
  const config = (model: (typeof runs)[number]['model']) => tinyConfig(t.dir, { iterations: 2, batch: { tasks: 4, samples: 2 }, model });
  const results = await Promise.all(
    runs.map(({ runId, model }) => {
      const path = join(t.dir, `${runId}.json`);
      writeFileSync(path, JSON.stringify(config(model)));
      return train({ config: path, out: join(t.dir, runId), address: t.server.address, runId, quiet: true });
    }),
  );
  for (const r of results) assert.equal(r.result.checkpoint, 2);
  // what sharing cost: models the one policy server loaded (the worker runs in this process). It holds both runs'
  // checkpoints in use (policy-server/models.ts), so each of the 4 is loaded once, at its sync, and no rollout has to
  // reload one (before the server held several models, the runs took turns: 137 client reloads for these 32 rollouts)
  const loads = Object.fromEntries((await policyModelLoads.get()).values.map((v) => [v.labels.via, v.value]));
  console.log(`policy model loads: ${JSON.stringify(loads)}`);
  assert.equal((loads.start ?? 0) + (loads.learner ?? 0), 4, 'one load per checkpoint synced');
  assert.equal(loads.update_weights_from_disk ?? 0, 0, 'no client reload');

  const store = openStore(config(runs[0]!.model).store.url);
  let checked = 0;
  let differs = 0;
  for (const { runId } of runs) {
    const other = runs.find((r) => r.runId !== runId)!.runId;
    for (const n of [0, 1]) {
      const own = await Learner.load(store.dirFor(keys.checkpoint(runId, n)), { device: 'cpu', threads: 1 });
      const theirs = await Learner.load(store.dirFor(keys.checkpoint(other, n)), { device: 'cpu', threads: 1 });
      try {
        for (const k of await store.list(keys.trajectories(runId, n))) {
          const tr = (await store.getJson<Trajectory>(k))!;
          assert.equal(tr.checkpoint, n);
          const batch = { ids: Int32Array.from(tr.ids), offsets: Int32Array.from([0, tr.ids.length]) };
          const mine = await own.logprobs(batch);
          const alt = await theirs.logprobs(batch);
          tr.mask.forEach((m, i) => {
            if (!m) return;
            assert.ok(Math.abs(mine[i]! - tr.logprobs[i]!) < 1e-4, `${k} token ${i}: sampled ${tr.logprobs[i]}, ${runId} checkpoint ${n} gives ${mine[i]}`);
            checked++;
            if (Math.abs(alt[i]! - tr.logprobs[i]!) > 1e-3) differs++;
          });
        }
      } finally {
        own.close();
        theirs.close();
      }
    }
  }
  assert.ok(checked > 100, `${checked} sampled tokens checked`);
  // the two runs' models are different models: the check above could tell them apart
  assert.ok(differs > checked / 2, `${differs} of ${checked} tokens have another log-prob under the other run's checkpoint`);
});
