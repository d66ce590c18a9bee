// Evaluation throughput and resume time, measured in one run on this machine:
//   1. grading alone: gradePatch of each task's gold patch, R times, C at once (the baseline);
//   2. evaluationRun of the gold-replay agent (a scripted chat model) on the same tasks × R runs, C at once:
//      episodes per minute and the ratio to grading alone (the orchestration's and the agent loop's overhead);
//   3. resume: a `swerl worker` child SIGKILLed mid-evaluation and restarted; seconds from the restart to
//      the first episode resumed and to the end (bounded below by the activity heartbeat timeout).
// Usage: node --import tsx bench/eval.ts [--runs R] [--concurrency C] [--heartbeat S]
// Tasks: the repository's (data/swe/), or SWERL_TASKS=FILE for any other SWE-bench-format set (test/helpers/swe-tasks.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { gradePatch } from '../activities/grade.ts';
import { readEvalEpisodes } from '../activities/evaluation.ts';
import { createSandboxBackend, removeSandboxContainers } from '../activities/sandbox/index.ts';
import { fileStoreUrl, openStore } from '../lib/store.ts';
import { startDevServer } from '../services/temporal-server.ts';
import { Client, Connection } from '@temporalio/client';
import { startWorkers } from '../workers/index.ts';
import { imagesFor } from '../test/helpers/docker.ts';
import { benchTasks } from '../test/helpers/swe-tasks.ts';
import { seedTable } from '../test/helpers/eval.ts';
import { editCallsFromPatch, FINISH, startScriptedModel, type ScriptTurn } from '../test/helpers/scripted-agent.ts';
import { spawnWorker, waitFor } from '../test/helpers/temporal.ts';

const arg = (name: string, d: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : d;
};
const runs = arg('runs', 2);
const concurrency = arg('concurrency', 4);
const heartbeat = arg('heartbeat', 10);

const { file: TASKS_FILE, tasks } = await benchTasks();
await imagesFor(tasks);
const ids = tasks.map((t) => t.instance_id);
const byId = new Map(tasks.map((t) => [t.instance_id, t]));
const dir = mkdtempSync(join(tmpdir(), 'swerl-bench-eval-'));
const perMin = (n: number, s: number) => (60 * n) / s;

// 1. grading alone
const backend = await createSandboxBackend('docker');
const jobs = ids.flatMap((id) => Array.from({ length: runs }, () => id));
const t0 = Date.now();
let next = 0;
await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (next < jobs.length) {
      const task = byId.get(jobs[next++]!)!;
      const g = await gradePatch({ task, patch: task.patch, backend });
      if (g.reward !== 1) throw new Error(`gold patch of ${task.instance_id} graded ${g.reason}`);
    }
  }),
);
const gradeS = (Date.now() - t0) / 1000;
console.log(`grading alone: ${jobs.length} gold patches in ${gradeS.toFixed(1)} s = ${perMin(jobs.length, gradeS).toFixed(1)} per minute (${concurrency} at once)`);

// 2. the same patches through evaluationRun with the gold-replay agent
const server = await startDevServer({ dir: join(dir, 'temporal'), uiPort: null });
const connection = await Connection.connect({ address: server.address });
const client = new Client({ connection });
const model = await startScriptedModel({
  identify: seedTable(0, ids, Math.max(runs, 2)),
  script: ({ taskId }): ScriptTurn[] => [...editCallsFromPatch(byId.get(taskId)!.patch), FINISH],
});
const storeUrl = fileStoreUrl(join(dir, 'store'));
const evalConfig = (evalId: string, taskIds: string[], r: number) => ({
  evalId,
  tasksFile: TASKS_FILE,
  tasks: taskIds,
  runs: r,
  seed: 0,
  model: { baseUrl: model.url, model: 'gold-replay', api: 'chat' },
  maxSteps: 30,
  concurrency,
  heartbeatTimeoutSeconds: heartbeat,
  store: { url: storeUrl },
});
try {
  const workers = await startWorkers({ address: server.address, queues: ['learner', 'rollout'] });
  const t1 = Date.now();
  const r = (await (await client.workflow.start('evaluationRun', { taskQueue: 'learner', workflowId: 'bench-eval', args: [evalConfig('bench-eval', ids, runs)] })).result()) as {
    summary: { pass1: number };
  };
  const evalS = (Date.now() - t1) / 1000;
  await workers.shutdown();
  const eps = await readEvalEpisodes(openStore(storeUrl), 'bench-eval');
  const steps = eps.reduce((s, e) => s + e.steps, 0) / eps.length;
  console.log(
    `evaluationRun, gold replay: ${eps.length} episodes (pass@1 ${r.summary.pass1}, ${steps.toFixed(1)} steps each) in ${evalS.toFixed(1)} s = ${perMin(eps.length, evalS).toFixed(1)} per minute`,
  );
  console.log(
    `ratio evaluation / grading alone: ${(evalS / gradeS).toFixed(2)}× the time (${(100 * (1 - gradeS / evalS)).toFixed(0)}% of an episode is the agent loop, its sandbox and orchestration)`,
  );

  // 3. resume after a SIGKILLed worker
  const args = ['--queues', 'rollout,learner', '--address', server.address, '--max-rollouts', String(concurrency)];
  let worker: ChildProcess = spawnWorker(args, join(dir, 'worker.log'));
  const pids = [worker.pid!];
  const small = ids.slice(2, 6);
  model.delayMs = 200;
  try {
    const h = await client.workflow.start('evaluationRun', { taskQueue: 'learner', workflowId: 'bench-resume', args: [evalConfig('bench-resume', small, 2)] });
    const store = openStore(storeUrl);
    await waitFor(
      'episodes stored and others in flight',
      async () => {
        const n = (await readEvalEpisodes(store, 'bench-resume')).length;
        return n >= 2 && n <= 5 && model.log.some((l) => Date.now() - l.at < 300);
      },
      300_000,
      50,
    );
    worker.kill('SIGKILL');
    await new Promise((res) => worker.once('exit', res));
    const before = model.log.length;
    const restarted = Date.now();
    worker = spawnWorker(args, join(dir, 'worker.log'));
    pids.push(worker.pid!);
    await h.result();
    const first = model.log.slice(before).find((l) => l.at >= restarted);
    console.log(
      `resume after SIGKILL: first episode request ${first ? ((first.at - restarted) / 1000).toFixed(1) : '?'} s after the restart, ` +
        `evaluation done ${((Date.now() - restarted) / 1000).toFixed(1)} s after it (heartbeat timeout ${heartbeat} s; worker start included)`,
    );
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((res) => worker.once('exit', res));
    }
    for (const pid of pids) await removeSandboxContainers({ labels: { 'swerl.pid': String(pid) } });
  }
} finally {
  await model.close();
  await connection.close();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
