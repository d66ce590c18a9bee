// A FrozenLake run through the workflows with learner.engine "fsdp" on 2 ranks (gloo), beside the same run on the
// native engine: same seeds, same rollouts, the same update up to float rounding. One trainer rank is SIGKILLed
// inside the first learner step that trains: the attempt fails, the retry starts a new process group from checkpoint n, and
// the run completes with checkpoints 0..3 each written once (no temp directories left), all loading natively.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { weightsOf } from '../gpu-learner/fsdp/crosscheck.ts';
import type { FsdpProgress } from '../gpu-learner/fsdp/index.ts';
import { keys, listCheckpoints, openStore } from '../lib/store.ts';
import { train } from '../scripts/commands/train.ts';
import { startWorkers, type RunningWorkers } from '../workers/index.ts';
import { startTestTemporal, tinyConfig, type TestTemporal } from './helpers/temporal.ts';

let t: TestTemporal;
let w: RunningWorkers;
before(async () => {
  t = await startTestTemporal('swerl-fsdp-');
  w = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
});
after(async () => {
  await w?.shutdown();
  await t?.close();
});

const base = () => tinyConfig(t.dir, { iterations: 3, batch: { tasks: 4, samples: 4 } });
async function run(runId: string, over: Record<string, unknown>) {
  const config = { ...base(), ...over };
  const path = join(t.dir, `${runId}.json`);
  writeFileSync(path, JSON.stringify(config));
  const o = await train({ config: path, out: join(t.dir, runId), address: t.server.address, runId, quiet: true });
  const metrics = readFileSync(o.metricsPath, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  return { o, metrics, store: openStore(config.store.url) };
}

test('fsdp on 2 ranks: same metrics as native, a rank SIGKILLed mid-step is survived, checkpoints load natively', async () => {
  const native = await run('native', {});

  let firstMicroBatches = 0;
  let killed: number | null = null;
  const watch = setInterval(() => {
    const trainer = w.ctx.trainer;
    if (!trainer || killed !== null || trainer.listenerCount('progress')) return;
    trainer.on('progress', (p: FsdpProgress) => {
      if (p.microBatch === 1) firstMicroBatches++;
      if (firstMicroBatches === 1 && killed === null) {
        killed = trainer.rankPids[1];
        process.kill(killed, 'SIGKILL'); // inside the first learner step that trains
      }
    });
  }, 20);
  const fsdp = await run('fsdp', {
    learner: {
      engine: 'fsdp', device: 'cpu', threads: 1, timeoutMinutes: 10,
      fsdp: { nprocPerNode: 2, paramDtype: 'float32', maxTokensPerMicroBatch: 400, stallTimeoutSeconds: 120, collectiveTimeoutSeconds: 60 },
    },
  }).finally(() => clearInterval(watch));

  assert.ok(killed !== null, `a rank was killed inside a step (group starts ${w.ctx.trainerStarts}, native grad norms ${JSON.stringify(native.metrics.map((m) => m.gradNorm))}, fsdp ${JSON.stringify(fsdp.metrics.map((m) => m.gradNorm))})`);
  assert.equal(w.ctx.trainerStarts, 2, 'the process group was restarted once');
  assert.equal(fsdp.o.result.iterations, 3);
  assert.deepEqual(await listCheckpoints(fsdp.store, 'fsdp'), [0, 1, 2, 3]);
  const ckptDir = fsdp.store.dirFor(keys.checkpoints('fsdp'));
  assert.deepEqual(readdirSync(ckptDir).sort(), ['0', '1', '2', '3'], 'no half-written checkpoint left behind');
  assert.deepEqual(fsdp.metrics.map((m) => m.iteration), [0, 1, 2], 'one metrics line per iteration');

  assert.ok(native.metrics.some((m) => m.gradNorm > 0), `some iteration trains: ${JSON.stringify(native.metrics.map((m) => m.gradNorm))}`);
  for (const n of [0, 1]) {
    const a = fsdp.metrics[n], b = native.metrics[n];
    for (const k of ['meanReward', 'episodes', 'tokens', 'learnerTrajectories']) assert.deepEqual(a[k], b[k], `iteration ${n} ${k}`);
    assert.ok(Math.abs(a.loss - b.loss) <= 1e-5 * Math.abs(b.loss) + 1e-9, `iteration ${n} loss ${a.loss} vs ${b.loss}`);
    assert.ok(Math.abs(a.gradNorm - b.gradNorm) <= 1e-5 * b.gradNorm + 1e-9, `iteration ${n} grad norm ${a.gradNorm} vs ${b.gradNorm}`);
  }
  // checkpoint 2 (written by the restarted group) in the native engine, next to the native run's checkpoint 2
  const wf = await weightsOf(fsdp.store.dirFor(keys.checkpoint('fsdp', 2)));
  const wn = await weightsOf(native.store.dirFor(keys.checkpoint('native', 2)));
  for (const [name, x] of wn) {
    const y = wf.get(name)!;
    let d = 0;
    for (let i = 0; i < x.length; i++) d = Math.max(d, Math.abs(x[i] - y[i]));
    assert.ok(d < 1e-4, `${name}: max |Δ| ${d}`);
  }
});
