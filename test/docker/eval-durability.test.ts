// An evaluation whose worker (a `swerl worker` child process) is SIGKILLed mid-way and restarted: no
// episode is lost, run twice or counted as a model failure, and the numbers are an undisturbed run's.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { readEvalEpisodes } from '../../activities/evaluation.ts';
import { removeSandboxContainers } from '../../activities/sandbox/docker.ts';
import { passAtK } from '../../lib/eval/metrics.ts';
import { fileStoreUrl, openStore } from '../../lib/store.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import type { EvaluationRunResult } from '../../lib/eval/shapes.ts';
import { imagesFor, requireDocker } from '../helpers/docker.ts';
import { sweTasks, sweTasksFile } from '../helpers/swe-tasks.ts';
import { editCallsFromPatch, FINISH, startScriptedModel, type ScriptTurn } from '../helpers/scripted-agent.ts';
import { spawnWorker, startTestTemporal, waitFor, type TestTemporal } from '../helpers/temporal.ts';
import { scriptedEvalConfig, seedTable } from '../helpers/eval.ts';

const TASKS_FILE = await sweTasksFile();

let t: TestTemporal;
let tasks: SweTask[];
before(async () => {
  await requireDocker();
  tasks = await sweTasks();
  await imagesFor(tasks);
  t = await startTestTemporal();
});
after(async () => {
  await t?.close();
});

test('a worker SIGKILLed mid-evaluation and restarted: every episode once, the undisturbed numbers', async () => {
  // four quick-to-grade tasks × 3 runs; task i solved in run r exactly when (i + r) mod 3 = 0: c = 1 each
  const order = tasks.slice(2, 6).map((x) => x.instance_id);
  const byId = new Map(tasks.map((x) => [x.instance_id, x]));
  const model = await startScriptedModel({
    identify: seedTable(9, order, 3),
    script: ({ taskId, run }): ScriptTurn[] =>
      (order.indexOf(taskId) + run) % 3 === 0 ? [...editCallsFromPatch(byId.get(taskId)!.patch), FINISH] : [{ text: 'Thinking.' }, FINISH],
    delayMs: 300,
  });
  const storeUrl = fileStoreUrl(join(t.dir, 'store'));
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--max-rollouts', '4'];
  const logFile = join(t.dir, 'worker.log');
  let worker: ChildProcess = spawnWorker(args, logFile);
  const pids = [worker.pid!];
  try {
    const config = scriptedEvalConfig(model.url, TASKS_FILE, storeUrl, { tasks: order, runs: 3, seed: 9, concurrency: 4, heartbeatTimeoutSeconds: 6 });
    const h = await t.client.workflow.start('evaluationRun', { taskQueue: 'learner', workflowId: 'eval-kill', args: [config] });
    const store = openStore(storeUrl);
    // kill once a few episodes are stored and others are under way: an episode that asked the model and is not
    // stored yet (a fact, not a time window a loaded host's poll could miss)
    await waitFor(
      'episodes stored and others in flight',
      async () => {
        const stored = new Set((await readEvalEpisodes(store, 'eval-kill')).map((e) => `${e.taskId}#${e.run}`));
        return stored.size >= 3 && stored.size <= 8 && model.log.some((l) => !stored.has(`${l.taskId}#${l.run}`));
      },
      240_000,
      100,
    );
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    const before = new Set((await readEvalEpisodes(store, 'eval-kill')).map((e) => `${e.taskId}#${e.run}`));
    const killedAt = Date.now();
    const requestsBefore = model.log.length;
    worker = spawnWorker(args, logFile);
    pids.push(worker.pid!);
    const r = (await h.result()) as EvaluationRunResult;
    const resumed = model.log.slice(requestsBefore).find((l) => l.at > killedAt);
    console.log(
      `resume: first model request ${resumed ? ((resumed.at - killedAt) / 1000).toFixed(1) : '?'} s after the restart (heartbeat timeout 6 s); ${before.size} episodes were stored before the kill`,
    );

    assert.deepEqual(r.summary.episodes, { planned: 12, completed: 12, resolved: 4, errors: 0 });
    assert.equal(r.summary.pass1, 1 / 3);
    assert.deepEqual(
      r.summary.passAtK.map((x) => x!.toFixed(12)),
      [1, 2, 3].map((k) => passAtK(3, 1, k).toFixed(12)),
    );
    const eps = await readEvalEpisodes(store, 'eval-kill');
    assert.equal(eps.length, 12);
    assert.deepEqual(new Set(eps.map((e) => `${e.taskId}#${e.run}`)).size, 12);
    for (const e of eps) assert.equal(e.resolved, (order.indexOf(e.taskId) + e.run) % 3 === 0, `${e.taskId} run ${e.run}`);
    // an episode stored before the kill never started again
    for (const k of before) assert.equal(model.requests.get(`${k}#0`), 1, k);
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
    await model.close();
    for (const pid of pids) await removeSandboxContainers({ labels: { 'swerl.pid': String(pid) } });
  }
});
