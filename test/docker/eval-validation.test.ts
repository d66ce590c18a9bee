// Validation during training: trainingRun with `eval: {every, tasks, runs}` evaluates each new checkpoint
// on held-out SWE tasks in a child evaluationRun (token-id completions against our policy server serving
// that checkpoint); its pass@1 lands in metrics.jsonl and the RlEvalPass1 search attribute.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readEvalEpisodes } from '../../activities/evaluation.ts';
import { keys, openStore } from '../../lib/store.ts';
import { train } from '../../scripts/commands/train.ts';
import type { IterationMetrics } from '../../lib/training/shapes.ts';
import { sweTasksFile } from '../helpers/swe-tasks.ts';
import { ROOT, type TestTemporal } from '../helpers/temporal.ts';
import { useSweWorker } from '../helpers/swe-worker.ts';

const TASKS_FILE = await sweTasksFile();

let t: TestTemporal;
useSweWorker((x) => (t = x));

test('eval: {every: 1} runs a child evaluationRun of checkpoint 1 and records its pass@1', async () => {
  const config = JSON.parse(readFileSync(join(ROOT, 'configs/swe.json'), 'utf8'));
  config.env.tasksFile = TASKS_FILE;
  config.batch = { tasks: 1, samples: 2 };
  config.store = { url: `file://${join(t.dir, 'store')}` };
  config.eval = { every: 1, tasks: TASKS_FILE, runs: 2, limit: 2, maxSteps: 2, responseBudget: 64 };
  const configPath = join(t.dir, 'swe-eval.json');
  writeFileSync(configPath, JSON.stringify(config));
  const o = await train({ config: configPath, out: join(t.dir, 'out'), address: t.server.address, runId: 'val-run', quiet: true });
  assert.equal(o.result.checkpoint, 1);

  const m = o.metrics[0] as IterationMetrics;
  assert.ok(m.eval, JSON.stringify(m));
  assert.equal(m.eval.evalId, 'val-run-eval-1');
  // the tiny random policy resolves nothing: 0 is a model result, and no episode was an error
  assert.equal(m.eval.pass1, 0);
  assert.deepEqual(m.eval.passAtK, { 1: 0, 2: 0 });
  assert.equal(m.evalErrors, 0);
  const line = JSON.parse(readFileSync(o.metricsPath, 'utf8').trim().split('\n')[0]!) as IterationMetrics;
  assert.equal(line.eval?.pass1, 0);

  const store = openStore(config.store.url);
  const eps = await readEvalEpisodes(store, 'val-run-eval-1');
  assert.equal(eps.length, 4);
  for (const e of eps) {
    assert.equal(e.checkpoint, 1);
    assert.equal(e.api, 'completions');
    assert.ok(e.stream && e.stream.ids.length === e.stream.mask.length && e.stream.promptLength > 500);
    assert.ok(e.steps >= 1 && e.steps <= 2);
  }
  assert.ok(await store.exists(keys.checkpoint('val-run', 1)));
  const desc = await t.client.workflow.getHandle('val-run').describe();
  assert.deepEqual(desc.searchAttributes.RlEvalPass1, [0]);
  const ev = await t.client.workflow.getHandle('val-run-eval-1').describe();
  assert.equal(ev.status.name, 'COMPLETED');
  assert.deepEqual(ev.searchAttributes.EvalDone, [4]);
});
