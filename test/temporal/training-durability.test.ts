// Durability against a real dev server: the worker (a `swerl worker` child process) is SIGKILLed
// mid-iteration and restarted; the server is stopped and restarted on the same SQLite file mid-run.
// Each run completes with no rollout lost or counted twice and a contiguous checkpoint sequence.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TrainingConfigInput } from '../../lib/config.ts';
import type { ChildProcess } from 'node:child_process';
import { STICKY_QUEUE_TIMEOUT, startWorkers } from '../../workers/index.ts';
import { RetryPolicies } from '../../lib/failures.ts';
import { progressQuery, statusQuery } from '../../workflows/signals.ts';
import { iterationWorkflowId } from '../../lib/training/shapes.ts';
import type { TrainingRunResult } from '../../lib/training/shapes.ts';
import { ROOT, spawnWorker, startTestTemporal, tinyConfig, waitFor, type TestTemporal } from '../helpers/temporal.ts';
import { assertRunComplete, runMetrics } from '../helpers/run-checks.ts';

let t: TestTemporal;
before(async () => {
  t = await startTestTemporal();
});
after(async () => {
  await t?.close();
});

/** When the `restarts`-th restarted `swerl worker` printed that it serves (its log line). */
async function workerReady(logFile: string, restarts: number): Promise<number> {
  await waitFor('the restarted worker ready', async () => (readFileSync(logFile, 'utf8').match(/^worker on /gm) ?? []).length > restarts, 120_000, 50);
  return Date.now();
}

/** a duration written in whole seconds ('3s') */
const seconds = (d: unknown): number => Number(/^(\d+)s$/.exec(String(d))![1]);

/** rollouts in flight at once: 32 rollouts run in 4 waves, so the rollout phase is long enough to catch */
const WAVE = 8;

/** The FrozenLake preset's heartbeat sizing (configs/frozenlake.json): what the recovery times below measure. */
const preset = JSON.parse(readFileSync(join(ROOT, 'configs', 'frozenlake.json'), 'utf8')) as TrainingConfigInput;

/**
 * Starts the run served by a `swerl worker` child, SIGKILLs the worker while iteration 1's rollouts are
 * running and starts another: the run's handle, the new worker and when it was started. Running: some done
 * (so the worker has taken the first wave, not merely had it scheduled) and at most half, asked of the
 * iteration itself rather than its parent's signalled phase; the config runs them in waves, so that
 * window lasts long enough for a loaded host to see it.
 */
async function killWorkerInRollouts(runId: string, config: TrainingConfigInput, args: string[], logFile: string) {
  let worker: ChildProcess = spawnWorker(args, logFile);
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await waitFor(
      'iteration 1 rollouts running',
      async () => {
        const p = await t.client.workflow.getHandle(iterationWorkflowId(runId, 1)).query(progressQuery);
        return p.phase === 'rollouts' && p.rolloutsDone >= 2 && p.rolloutsDone <= p.rolloutsTotal / 2;
      },
      150_000,
      100,
    );
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    const restarted = Date.now();
    worker = spawnWorker(args, logFile);
    return { h, worker, restarted };
  } catch (e) {
    if (worker.exitCode === null) worker.kill('SIGKILL');
    throw e;
  }
}

test('a SIGKILLed worker restarted mid-iteration loses and duplicates no rollout; the iteration resumes within the heartbeat timeout', async () => {
  const runId = 'kill-worker';
  const base = tinyConfig(t.dir, { runId, iterations: 3, batch: { tasks: 8, samples: 4 }, maxInflightRollouts: WAVE });
  const config = { ...base, rollout: { ...base.rollout, ...preset.rollout }, learner: { ...base.learner, heartbeatTimeoutSeconds: preset.learner!.heartbeatTimeoutSeconds } };
  // the restarted worker's policy server listens on a new port: rollouts ask the workflow for a new syncPolicy
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--policy-port', '0', '--threads', '1'];
  const logFile = join(t.dir, 'worker.log');
  const started = await killWorkerInRollouts(runId, config, args, logFile);
  let worker = started.worker;
  try {
    const { h, restarted } = started;
    // recovery: from the restart to the interrupted iteration done; of it, the new process's start (load, bundle, connect)
    const readyAt = await workerReady(logFile, 1);
    let st = await waitFor(
      'iteration 1 done',
      async () => {
        const s = await t.client.workflow.getHandle(runId).query(statusQuery);
        return s.iteration >= 2 ? s : null;
      },
      150_000,
      50,
    );
    const rolloutRecovery = { total: (Date.now() - restarted) / 1000, afterReady: (Date.now() - readyAt) / 1000 };
    // and once more inside a learner step (if the poll catches it): checkpoint 3 must be written once, from 2
    st = await waitFor(
      'iteration 2 learning (or past it)',
      async () => {
        const s = await t.client.workflow.getHandle(runId).query(statusQuery);
        return (s.running && s.iteration === 2 && s.phase === 'learning') || s.iteration >= 3 ? s : null;
      },
      150_000,
      20,
    );
    let learnerRecovery: { total: number; afterReady: number } | null = null;
    if (st.iteration === 2) {
      worker.kill('SIGKILL');
      await new Promise((r) => worker.once('exit', r));
      const again = Date.now();
      worker = spawnWorker(args, logFile);
      const ready = await workerReady(logFile, 2);
      await h.result();
      learnerRecovery = { total: (Date.now() - again) / 1000, afterReady: (Date.now() - ready) / 1000 };
    }
    const show = (r: { total: number; afterReady: number }) => `${r.total.toFixed(1)} s (${r.afterReady.toFixed(1)} s after the new worker was ready)`;
    console.log(
      `# recovery with the FrozenLake preset's heartbeat timeouts (rollout ${config.rollout.heartbeatTimeoutSeconds} s, learner ${config.learner.heartbeatTimeoutSeconds} s), ` +
        `worker restart → interrupted iteration done: killed during rollouts ${show(rolloutRecovery)}` +
        (learnerRecovery === null ? '' : `; killed during the learner step ${show(learnerRecovery)}`),
    );
    const result: TrainingRunResult = await h.result();
    assert.equal(result.iterations, 3);
    await assertRunComplete(config.store.url, runId, 3, 32);
    // after the new worker is ready, the interrupted iteration waits at most one heartbeat timeout for its lost
    // rollouts (the new worker fails them at once when it finds them), one retry interval, and once for its next
    // workflow task held on the dead worker's sticky queue; then it does what an undisturbed iteration
    // (iteration 0, same run) does, twice over for a process that has just started
    const undisturbed = (await runMetrics(config.store.url, runId))[0]!.iterationSeconds;
    const waits = {
      heartbeat: config.rollout.heartbeatTimeoutSeconds!,
      retry: seconds(RetryPolicies.rollout(1).initialInterval),
      sticky: seconds(STICKY_QUEUE_TIMEOUT),
    };
    const bound = waits.heartbeat + waits.retry + waits.sticky + 2 * undisturbed;
    assert.ok(
      rolloutRecovery.afterReady <= bound,
      `resumed ${rolloutRecovery.afterReady.toFixed(1)} s after the new worker was ready; bound ${bound.toFixed(1)} s ` +
        `(heartbeat timeout ${waits.heartbeat} s + retry ${waits.retry} s + sticky queue ${waits.sticky} s + 2 × ${undisturbed.toFixed(1)} s)`,
    );
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
  }
});

test('a restarted worker fails the rollouts its dead predecessor was running, so they run again long before their heartbeat timeout', async () => {
  const runId = 'orphans';
  const base = tinyConfig(t.dir, { runId, iterations: 2, batch: { tasks: 8, samples: 4 }, maxInflightRollouts: WAVE });
  // heartbeat timeouts of 10 minutes: the rollouts can only come back this soon through the restarted worker
  const config = { ...base, rollout: { ...base.rollout, heartbeatTimeoutSeconds: 600 }, learner: { ...base.learner, heartbeatTimeoutSeconds: 600 } };
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--policy-port', '0', '--threads', '1'];
  const logFile = join(t.dir, 'worker-orphans.log');
  const { h, worker } = await killWorkerInRollouts(runId, config, args, logFile);
  try {
    const result: TrainingRunResult = await h.result();
    assert.equal(result.iterations, 2);
    await assertRunComplete(config.store.url, runId, 2, 32);
    const events = (await t.client.workflow.getHandle(`${runId}-iter-1`).fetchHistory()).events ?? [];
    // a retried attempt's failure is recorded on the started event of the attempt that completed
    const lastFailures = events.map((e) => e.activityTaskStartedEventAttributes?.lastFailure).filter((f) => f);
    assert.ok(
      lastFailures.some((f) => f!.applicationFailureInfo?.type === 'WorkerDied'),
      'the rollouts running on the dead worker were failed as WorkerDied',
    );
    assert.ok(!lastFailures.some((f) => f!.timeoutFailureInfo), 'none waited for its heartbeat timeout');
    assert.match(readFileSync(logFile, 'utf8'), /rollout \d+ of orphans-iter-1 was running on dead worker \d+@/);
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
  }
});

test('the Temporal server stopped and restarted on the same SQLite file mid-run: the run completes', async () => {
  const runId = 'restart-server';
  const config = tinyConfig(t.dir, { runId, iterations: 3, batch: { tasks: 4, samples: 2 } });
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  try {
    await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await waitFor(
      'iteration 1 under way',
      async () => {
        const s = await t.client.workflow.getHandle(runId).query(statusQuery);
        return s.running && s.iteration >= 1;
      },
      150_000,
      50,
    );
    await t.restartServer();
    const result: TrainingRunResult = await waitFor('the run after the restart', async () => t.client.workflow.getHandle(runId).result(), 150_000, 1000);
    assert.equal(result.iterations, 3);
    await assertRunComplete(config.store.url, runId, 3, 8);
  } finally {
    await workers.shutdown();
  }
});
