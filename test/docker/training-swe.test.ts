// Training on real SWE tasks through the same workflows as FrozenLake: one
// iteration of the tiny local policy on two of the repository's tasks × two samples, each episode in a real Docker
// sandbox, graded by running the task's tests, and one learner step to checkpoint 1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { train } from '../../scripts/commands/train.ts';
import { keys, listCheckpoints, openStore } from '../../lib/store.ts';
import type { Trajectory } from '../../lib/types.ts';
import { ROOT, type TestTemporal } from '../helpers/temporal.ts';
import { useSweWorker } from '../helpers/swe-worker.ts';
import { sweTasks, sweTasksFile } from '../helpers/swe-tasks.ts';
import { metricValue } from '../helpers/metrics.ts';

const TASKS_FILE = await sweTasksFile();

let t: TestTemporal;

useSweWorker((x) => (t = x));

test('an SWE training iteration runs rollouts in sandboxes, grades them and steps the learner', async () => {
  const config = JSON.parse(readFileSync(join(ROOT, 'configs/swe.json'), 'utf8'));
  config.env.tasksFile = TASKS_FILE;
  config.store = { url: `file://${join(t.dir, 'store')}` };
  const configPath = join(t.dir, 'swe.json');
  writeFileSync(configPath, JSON.stringify(config));
  // the worker runs in this process: its Prometheus registry counts this run's sandboxes and gradings
  const before = { starts: await metricValue('swerl_sandbox_starts_total', { backend: 'docker' }), graded: await metricValue('swerl_grading_seconds_count') };
  const o = await train({ config: configPath, out: join(t.dir, 'out'), address: t.server.address, runId: 'swe-run', quiet: true });
  assert.equal(o.result.iterations, 1);
  assert.equal(o.result.checkpoint, 1);

  const store = openStore(config.store.url);
  assert.deepEqual(await listCheckpoints(store, 'swe-run'), [0, 1]);
  const trajKeys = await store.list(keys.trajectories('swe-run', 0));
  assert.equal(trajKeys.length, 2 * 2);
  const known = new Set((await sweTasks()).map((x) => x.instance_id));
  for (const k of trajKeys) {
    const tr = (await store.getJson<Trajectory>(k))!;
    assert.ok(known.has(tr.taskId), `task ${tr.taskId} is one of the SWE tasks`);
    assert.equal(tr.ids.length, tr.mask.length);
    assert.ok(tr.promptLength > 500, 'the prompt carries the tool descriptions and the issue');
    assert.ok(tr.steps >= 1 && tr.steps <= 3);
    // a random tiny policy does not solve a task: the episode is a result (reward 0 with a reason), not a failure
    assert.equal(tr.reward, 0);
    assert.equal((tr.info as { instanceId?: string }).instanceId, tr.taskId);
    assert.equal(typeof (tr.info as { reason?: string }).reason, 'string');
  }
  const m = o.metrics[0];
  assert.equal(m.episodes, 4);
  assert.equal(m.rolloutErrors, 0);

  // Prometheus metrics of the sandboxes and gradings (test/temporal/prometheus.test.ts scrapes the same registry)
  const graded = (await Promise.all(trajKeys.map((k) => store.getJson<Trajectory>(k)))).filter((tr) => Number((tr!.info as { durationS?: unknown }).durationS) > 0).length;
  const starts = (await metricValue('swerl_sandbox_starts_total', { backend: 'docker' })) - before.starts;
  assert.ok(starts >= 4 + graded, `${starts} sandbox starts: one per episode and one per grading`);
  assert.equal(await metricValue('swerl_sandbox_start_failures_total', { backend: 'docker' }), 0);
  assert.equal(
    await metricValue('swerl_sandbox_start_seconds_count', { backend: 'docker' }),
    await metricValue('swerl_sandbox_starts_total', { backend: 'docker' }),
    'every start timed',
  );
  assert.equal((await metricValue('swerl_grading_seconds_count')) - before.graded, graded, `${graded} grading(s) timed`);
});
