// Retraining on a schedule against a real dev server: a Schedule whose runs start from the newest
// checkpoint of an earlier run (fromRun), triggered by hand; list, delete; fromRun failures name the field.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { train } from '../../scripts/commands/train.ts';
import { createSchedule, deleteSchedule, listSchedules, scheduledConfig, triggerSchedule } from '../../scripts/commands/schedule.ts';
import { keys, listCheckpoints, openStore, type ArtifactStore } from '../../lib/store.ts';
import type { TrainingRunResult } from '../../lib/training/shapes.ts';
import { useTemporalWithWorker, tinyConfig, waitFor, type TestTemporal } from '../helpers/temporal.ts';

let t: TestTemporal;

useTemporalWithWorker((x) => (t = x));

const small = { iterations: 1, batch: { tasks: 2, samples: 2 } };

function weights(store: ArtifactStore, run: string, n: number): Buffer {
  return readFileSync(join(store.dirFor(keys.checkpoint(run, n)), 'model.safetensors'));
}

/** Triggers schedule `id` and returns the result of the run it starts (the `count`-th run of the schedule). */
async function triggerAndWait(client: Client, id: string, count: number): Promise<{ runId: string; result: TrainingRunResult }> {
  await triggerSchedule(client, id);
  const runId = await waitFor(
    `run ${count} of schedule ${id}`,
    async () => {
      const d = await client.schedule.getHandle(id).describe();
      const a = d.info.recentActions[count - 1]?.action;
      return a?.type === 'startWorkflow' ? a.workflow.workflowId : undefined;
    },
    30_000,
  );
  const result = (await client.workflow.getHandle(runId).result()) as TrainingRunResult;
  return { runId, result };
}

test('a scheduled run starts from the newest checkpoint of an earlier run; list, trigger, delete', async () => {
  const base = tinyConfig(t.dir, small);
  const basePath = join(t.dir, 'base.json');
  writeFileSync(basePath, JSON.stringify(base));
  const a = await train({ config: basePath, out: join(t.dir, 'out-a'), address: t.server.address, runId: 'base-run', quiet: true });
  assert.equal(a.result.checkpoint, 1);
  const store = openStore(base.store.url);

  await createSchedule(t.client, { id: 'retrain', config: tinyConfig(t.dir, small), every: '24h', fromRun: 'base-run' });
  // the list comes from the visibility store, a moment behind
  const mine = await waitFor('schedule listed', async () => (await listSchedules(t.client)).find((s) => s.id === 'retrain'), 30_000);
  assert.equal(mine.spec, 'every 24h');
  assert.ok(mine.nextRun && mine.nextRun.getTime() > Date.now(), 'next run is in the future');
  const desc = await t.client.schedule.getHandle('retrain').describe();
  assert.equal(desc.policies.overlap, 'SKIP');

  const b = await triggerAndWait(t.client, 'retrain', 1);
  assert.match(b.runId, /^retrain-\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/, 'run id = the scheduled workflow id');
  assert.equal(b.result.runId, b.runId);
  assert.deepEqual(await listCheckpoints(store, b.runId), [0, 1]);
  assert.ok(weights(store, b.runId, 0).equals(weights(store, 'base-run', 1)), "checkpoint 0 = base-run's newest checkpoint");
  assert.ok(await store.exists(keys.checkpointStats(b.runId, 1)), "checkpoint 1 is the scheduled run's own learner step");
  assert.deepEqual(await store.getJson(`${keys.checkpoint(b.runId, 0)}/from.json`), { run: 'base-run', checkpoint: 1 });
  const sa = (await t.client.workflow.getHandle(b.runId).describe()).searchAttributes as Record<string, unknown[]>;
  assert.deepEqual(sa.RlIteration, [1]);
  assert.deepEqual(sa.RlPhase, ['finished']);

  await deleteSchedule(t.client, 'retrain');
  await waitFor('schedule gone from the list', async () => !(await listSchedules(t.client)).some((s) => s.id === 'retrain'), 30_000);
});

test('fromRun "latest" chains a schedule\'s runs: the first from initialRun, the next from the first', async () => {
  const store = openStore(tinyConfig(t.dir).store.url);
  assert.deepEqual(await listCheckpoints(store, 'base-run'), [0, 1], 'base-run comes from the first test');
  await createSchedule(t.client, { id: 'chain', config: tinyConfig(t.dir, small), cron: '0 3 * * *', fromRun: 'latest', initialRun: 'base-run' });
  const listed = await waitFor('schedule listed', async () => (await listSchedules(t.client)).find((s) => s.id === 'chain'), 30_000);
  assert.equal(listed.spec, 'cron 0 3 * * *');
  const c1 = await triggerAndWait(t.client, 'chain', 1);
  assert.deepEqual(await store.getJson(`${keys.checkpoint(c1.runId, 0)}/from.json`), { run: 'base-run', checkpoint: 1 });
  await new Promise((r) => setTimeout(r, 1100)); // scheduled workflow ids carry the time in whole seconds
  const c2 = await triggerAndWait(t.client, 'chain', 2);
  assert.notEqual(c2.runId, c1.runId);
  assert.deepEqual(await store.getJson(`${keys.checkpoint(c2.runId, 0)}/from.json`), { run: c1.runId, checkpoint: 1 });
  assert.ok(weights(store, c2.runId, 0).equals(weights(store, c1.runId, 1)));
  await deleteSchedule(t.client, 'chain');
});

test('fromRun naming a run with no checkpoint fails the run naming config.model.fromRun; bad values are refused up front', async () => {
  const config = { ...tinyConfig(t.dir, small), model: { fromRun: 'never-ran' } };
  const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: 'from-nothing', args: [config] });
  const err = await h.result().then(
    () => assert.fail('the run should fail'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowFailedError);
  const msgs: string[] = [];
  for (let e: unknown = err; e instanceof Error; e = e.cause) msgs.push(e.message);
  const msg = msgs.join(' | ');
  assert.match(msg, /config\.model\.fromRun/);
  assert.match(msg, /never-ran/);

  assert.throws(() => scheduledConfig({ config: tinyConfig(t.dir), fromRun: 'a/b' }), /config\.model\.fromRun: .*got "a\/b"/);
  assert.throws(() => scheduledConfig({ config: { ...tinyConfig(t.dir), runId: 'fixed' } }), /config\.runId: must be absent/);
  await assert.rejects(createSchedule(t.client, { id: 'x', config: tinyConfig(t.dir), every: 'daily' }), /--every/);
});
