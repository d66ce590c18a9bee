// Asynchronous runs survive what the synchronous loop survives, with episodes in flight across iterations
// (DESIGN §10): in each mode (one-step, pump in admission and streaming order) a `swerl worker` SIGKILLed
// mid-run and restarted, then the Temporal server stopped and restarted on the same SQLite file; and a pump run
// terminated with groups in flight, then recovered by a new run with the same run id from the store. Each
// trajectory is trained exactly once and none is lost; where the mode is deterministic (one-step, admission order)
// the checkpoints are byte for byte those of an undisturbed run.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { TrainingConfigInput } from '../../lib/config.ts';
import { startWorkers, type RunningWorkers } from '../../workers/index.ts';
import { statusQuery } from '../../workflows/signals.ts';
import { rolloutGroupWorkflowId, type TrainingRunResult, type TrainingStatus } from '../../lib/training/shapes.ts';
import { spawnWorker, startTestTemporal, tinyConfig, waitFor, type TestConfig, type TestTemporal } from '../helpers/temporal.ts';
import { assertSameCheckpoints, checkExactlyOnce } from '../helpers/async.ts';

let t: TestTemporal;
before(async () => {
  t = await startTestTemporal('swerl-async-dur-');
});
after(async () => {
  await t?.close();
});

const ITERATIONS = 4;
const TASKS = 4;
const SAMPLES = 2;
/** slow steps (a seeded long tail): episodes are still running when the worker dies, and across the steps of a pump */
const LATENCY = { medianMs: 120, sigma: 0.5, growth: 0.5, maxMs: 2000 };

function config(runId: string, a: TrainingConfigInput['async'], eta: number, latency = LATENCY): TestConfig {
  const base = tinyConfig(t.dir, { runId, iterations: ITERATIONS, batch: { tasks: TASKS, samples: SAMPLES }, maxInflightRollouts: (eta + 1) * TASKS * SAMPLES, async: a });
  return { ...base, env: { kind: 'frozenlake', size: 4, maxSteps: 8, latency } };
}

const status = (runId: string): Promise<TrainingStatus> => t.client.workflow.getHandle(runId).query(statusQuery);

/** Runs `c` on an in-process worker: the undisturbed reference. */
async function reference(c: TestConfig): Promise<void> {
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  try {
    await t.client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: c.runId!, args: [c] });
  } finally {
    await workers.shutdown();
  }
}

const MODES = [
  { name: 'one-step', async: { mode: 'one-step' as const }, eta: 1, deterministic: true, sampledFrom: (n: number) => Math.max(0, n - 1) },
  {
    name: 'pump-admission',
    async: { mode: 'pump' as const, maxStaleness: 1, order: 'admission' as const },
    eta: 1,
    deterministic: true,
    sampledFrom: (n: number) => Math.max(0, n - 1),
  },
  { name: 'pump-streaming', async: { mode: 'pump' as const, maxStaleness: 2, order: 'streaming' as const }, eta: 2, deterministic: false },
];

for (const mode of MODES) {
  test(`${mode.name}: a SIGKILLed worker and a restarted server lose and duplicate nothing${mode.deterministic ? '; the checkpoints are those of an undisturbed run' : ''}`, async () => {
    const c = config(`kill-${mode.name}`, mode.async, mode.eta);
    const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--policy-port', '0', '--threads', '1'];
    const logFile = join(t.dir, `worker-${mode.name}.log`);
    let worker: ChildProcess = spawnWorker(args, logFile);
    try {
      const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: c.runId!, args: [c] });
      // killed once the first step is done and the next batches' episodes are running
      await waitFor(
        'step 0 done, episodes in flight',
        async () => {
          const s = await status(c.runId!);
          return s.iteration >= 1 && (s.pump ? s.pump.inFlight > 0 : s.running);
        },
        150_000,
        50,
      );
      worker.kill('SIGKILL');
      await new Promise((r) => worker.once('exit', r));
      worker = spawnWorker(args, logFile);
      await waitFor('step 2 under way', async () => (await status(c.runId!)).iteration >= 2, 150_000, 100);
      await t.restartServer();
      const result: TrainingRunResult = await waitFor('the run after the restarts', async () => h.result(), 150_000, 1000);
      assert.equal(result.iterations, ITERATIONS);
      assert.match(readFileSync(logFile, 'utf8'), /worker on .*\n(.|\n)*worker on /, 'the worker was restarted');
    } finally {
      if (worker.exitCode === null) {
        worker.kill('SIGTERM');
        await new Promise((r) => worker.once('exit', r));
      }
    }
    await checkExactlyOnce(c, { iterations: ITERATIONS, perBatch: TASKS * SAMPLES, eta: mode.eta, ...(mode.sampledFrom ? { sampledFrom: mode.sampledFrom } : {}) });
    if (mode.deterministic) {
      const ref = config(`ref-${mode.name}`, mode.async, mode.eta);
      await reference(ref);
      assertSameCheckpoints(c, ref, ITERATIONS);
    }
  });
}

for (const order of ['admission', 'streaming'] as const) {
  test(`pump (${order}): terminated with groups in flight, a new run with the same run id picks up the store; each trajectory trained once`, async () => {
    const eta = 2;
    // slower episodes (about 7 s): some of the groups in flight are still running when the new run starts them again
    const slow = { ...LATENCY, medianMs: 250 };
    const c = config(`recover-${order}`, { mode: 'pump', maxStaleness: eta, order }, eta, slow);
    let workers: RunningWorkers | null = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
    try {
      const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: c.runId!, args: [c] });
      // terminated once step 0 is done and a group child is running
      // the status of rollout groups 0 … next−1 (NOT_STARTED for a group not started yet)
      const groupStatuses = (next: number) =>
        Promise.all(
          Array.from({ length: next }, (_, g) =>
            t.client.workflow
              .getHandle(rolloutGroupWorkflowId(c.runId!, g))
              .describe()
              .then(
                (d) => d.status.name,
                () => 'NOT_STARTED',
              ),
          ),
        );
      const groupsRunning = async (next: number) => (await groupStatuses(next)).filter((x) => x === 'RUNNING').length;
      const before = await waitFor(
        'step 0 done, groups running',
        async () => {
          const s = await status(c.runId!);
          return s.iteration >= 1 && s.pump && s.pump.inFlight > 0 && (await groupsRunning(s.pump.next)) > 0 ? s : null;
        },
        150_000,
        50,
      );
      await h.terminate('lost, to be recovered');
      // its children were abandoned, not terminated with it: those in flight go on
      const after = await groupStatuses(before.pump!.next);
      assert.ok(!after.includes('TERMINATED'), `groups running at the termination go on: ${after.join(' ')}`);
      // the abandoned groups go on; a new run with the same run id and config takes over
      const again = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: c.runId!, args: [c] });
      const result: TrainingRunResult = await again.result();
      assert.equal(result.iterations, ITERATIONS);
      // the groups the terminated run had in flight: still running when the new run started them again ("already
      // started": they reported to it), or done meanwhile and found in the store
      const events = (await again.fetchHistory()).events ?? [];
      const alreadyRunning = events.filter((e) => e.startChildWorkflowExecutionFailedEventAttributes).length;
      const recoverId = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'recoverPump')?.eventId;
      const recovered = events.find((e) => Number(e.activityTaskCompletedEventAttributes?.scheduledEventId) === Number(recoverId))?.activityTaskCompletedEventAttributes?.result
        ?.payloads?.[0]?.data;
      const stored = (JSON.parse(Buffer.from(recovered!).toString('utf8')) as { stored: number[] }).stored.length;
      console.log(`# ${before.pump!.inFlight} groups in flight at the termination: ${alreadyRunning} still running, ${stored} found in the store by the new run`);
      assert.ok(alreadyRunning + stored > 0, 'the new run took over groups of the terminated one');
      await workers.shutdown();
      workers = null;
      await checkExactlyOnce(c, { iterations: ITERATIONS, perBatch: TASKS * SAMPLES, eta, ...(order === 'admission' ? { sampledFrom: (n: number) => Math.max(0, n - eta) } : {}) });
      if (order === 'admission') {
        const ref = config(`ref-recover-${order}`, { mode: 'pump', maxStaleness: eta, order }, eta, slow);
        await reference(ref);
        assertSameCheckpoints(c, ref, ITERATIONS);
      }
    } finally {
      await workers?.shutdown();
    }
  });
}
