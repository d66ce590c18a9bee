// Every SWE task of the repository (data/swe/) validates (test_patch alone: FAIL_TO_PASS fail, PASS_TO_PASS pass; gold: all
// pass), through the CLI and through the Temporal workflow with a real dev server.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Worker } from '@temporalio/worker';
import { NativeConnection } from '@temporalio/worker';
import { imagesFor, requireDocker } from '../helpers/docker.ts';
import { sweTasks, sweTasksFile } from '../helpers/swe-tasks.ts';
import { startTestTemporal } from '../helpers/temporal.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TASKS_FILE = await sweTasksFile();

before(async () => {
  await requireDocker();
  await imagesFor(await sweTasks());
});

test('swerl validate-tasks: every task valid (concurrency 2)', async () => {
  const n = (await sweTasks()).length;
  const r = spawnSync(process.execPath, ['scripts/swerl.mjs', 'validate-tasks', '--tasks', TASKS_FILE, '--concurrency', '2'], { cwd: ROOT, encoding: 'utf8', timeout: 600_000 });
  const lines = r.stdout.trim().split('\n');
  assert.equal(lines.at(-1), `${n} valid, 0 invalid`, r.stdout + r.stderr);
  assert.equal(lines.filter((l) => l.startsWith('VALID ')).length, n);
  assert.equal(r.status, 0);
});

test('validateTasks workflow on the rollout queue (real Temporal dev server)', async () => {
  const env = await startTestTemporal('swerl-validate-');
  after(() => env.close());
  const { sweActivities } = await import('../../activities/swe.ts');
  const connection = await NativeConnection.connect({ address: env.server.address });
  const worker = await Worker.create({ connection, taskQueue: 'rollout', workflowBundle: env.bundle, activities: sweActivities });
  const tasks = await sweTasks();
  const ids = tasks.filter((x) => /verspec|intervals/.test(x.instance_id)).map((x) => x.instance_id);
  const result = await worker.runUntil(
    env.client.workflow.execute('validateTasks', {
      taskQueue: 'rollout',
      workflowId: `validate-${Date.now()}`,
      args: [{ tasksFile: TASKS_FILE, instanceIds: ids, concurrency: 2 }],
    }),
  );
  await connection.close();
  const r = result as { valid: number; invalid: number; results: { instanceId: string; valid: boolean; problems: string[] }[] };
  assert.equal(r.invalid, 0, JSON.stringify(r.results));
  assert.equal(r.valid, ids.length);
});
