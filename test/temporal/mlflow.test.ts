// Experiment tracking against a real MLflow server (PyPI, SQLite backend) on loopback, read back through
// its REST API: a FrozenLake run served by a `swerl worker` child that is SIGKILLed mid-run logs every
// iteration's metrics exactly once (steps 0..N-1), its config as params and its plots and metrics.jsonl
// as artifacts; with the tracking server stopped in the middle the run completes anyway, and the
// missing metrics arrive (through the trackingCatchUp child) once the server is back.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { spawnWorker, startTestTemporal, tinyConfig, waitFor, type TestTemporal } from '../helpers/temporal.ts';
import { startMlflowServer, type MlflowServer } from '../helpers/mlflow.ts';
import { pauseSignal, resumeSignal, statusQuery } from '../../workflows/signals.ts';
import type { TrainingRunResult } from '../../lib/training/shapes.ts';
import { trackingCatchUpWorkflowId } from '../../workflows/run-reporting.ts';
import { fileStoreUrl, keys, openStore } from '../../lib/store.ts';
import { evalKeys } from '../../lib/eval/keys.ts';
import { readMetricsLines, reportEvaluation, reportRun, type MlflowState } from '../../activities/report.ts';
import { report } from '../../scripts/commands/report.ts';
import { startWorkers } from '../../workers/index.ts';

let t: TestTemporal;
let mlflow: MlflowServer;
before(async () => {
  [t, mlflow] = await Promise.all([startTestTemporal('swerl-mlflow-'), startMlflowServer(join(process.env.TMPDIR ?? '/tmp', `swerl-mlflow-${process.pid}`))]);
});
after(async () => {
  await mlflow?.stop();
  await t?.close();
});

interface Run {
  info: { run_id: string; status: string; artifact_uri: string };
  data: { params?: { key: string; value: string }[]; tags?: { key: string; value: string }[] };
}

async function mlflowRuns(experiment: string, runId: string): Promise<Run[]> {
  const exp = await mlflow.api<{ experiment: { experiment_id: string } }>(`experiments/get-by-name?experiment_name=${experiment}`).catch(() => null);
  if (!exp) return [];
  const r = await mlflow.api<{ runs?: Run[] }>('runs/search', { experiment_ids: [exp.experiment.experiment_id], filter: `tags.\`swerl.run_id\` = '${runId}'` });
  return r.runs ?? [];
}

async function history(mlflowRunId: string, key: string): Promise<{ step: number; value: number; timestamp: number }[]> {
  const r = await mlflow.api<{ metrics?: { step: number; value: number; timestamp: number }[] }>(`metrics/get-history?run_id=${mlflowRunId}&metric_key=${encodeURIComponent(key)}`);
  return (r.metrics ?? []).sort((a, b) => a.step - b.step || a.timestamp - b.timestamp);
}

test('every iteration logged once through a worker SIGKILL and a tracking-server outage; params and artifacts', async () => {
  const runId = 'tracked';
  const experiment = 'swerl-test';
  const iterations = 5;
  const config = tinyConfig(t.dir, { runId, iterations, tracking: { mlflow: { uri: mlflow.uri, experiment } } });
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--policy-port', '0', '--threads', '1'];
  const logFile = join(t.dir, 'worker.log');
  let worker: ChildProcess = spawnWorker(args, logFile);
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    // iteration 0 in MLflow; then kill the worker as iteration 1's report is likely under way
    const [run] = await waitFor(
      'the MLflow run with step 0',
      async () => {
        const runs = await mlflowRuns(experiment, runId);
        return runs.length && (await history(runs[0].info.run_id, 'meanReward')).length ? runs : null;
      },
      150_000,
    );
    await waitFor(
      'iteration 2 started',
      async () => {
        const s = await h.query(statusQuery);
        return s.iteration >= 2;
      },
      150_000,
      50,
    );
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    worker = spawnWorker(args, logFile);

    // paused after iteration 2 or 3, with everything so far in MLflow; then the tracking server goes
    // away and the run's last iteration(s) go on without it
    await h.signal(pauseSignal);
    const store = openStore(config.store.url);
    const paused = await waitFor(
      'paused',
      async () => {
        const s = await h.query(statusQuery);
        return s.phase === 'paused' ? s : null;
      },
      240_000,
    );
    assert.ok(paused.iteration < iterations);
    await waitFor('what ran so far delivered', async () => (await store.getJson<MlflowState>(keys.mlflowState(runId)))?.sentLines === paused.iteration, 240_000);
    assert.deepEqual(
      (await history(run.info.run_id, 'meanReward')).map((m) => m.step),
      Array.from({ length: paused.iteration }, (_, i) => i),
    );
    await mlflow.stop();
    await h.signal(resumeSignal);
    const result = (await h.result()) as TrainingRunResult;
    assert.equal(result.iterations, iterations, 'the run completes without its tracking server');
    const state = (await store.getJson<MlflowState>(keys.mlflowState(runId)))!;
    assert.ok(state.sentLines < iterations, `iterations ${state.sentLines}.. are pending while MLflow is down`);
    assert.ok(state.unreachable, 'the state names why');
    const catchUp = t.client.workflow.getHandle(trackingCatchUpWorkflowId(runId));
    assert.equal((await catchUp.describe()).status.name, 'RUNNING', 'a catch-up child carries on after the run');

    await mlflow.start();
    const delivered = await catchUp.result();
    assert.equal(delivered.tracking?.pending, 0);

    const lines = await readMetricsLines(store, runId);
    assert.equal(lines.length, iterations);
    // a report whose worker died after MLflow took its batches but before the store recorded it sends
    // them again: once with the delivery state behind, once with it lost (the run is found by its tag)
    const tracking = { mlflow: { uri: mlflow.uri, experiment } };
    const done = (await store.getJson<MlflowState>(keys.mlflowState(runId)))!;
    await store.putJson(keys.mlflowState(runId), { ...done, sentLines: 1, paramsLogged: false, artifactsOf: undefined, closed: undefined });
    assert.equal((await reportRun({ storeUrl: store.url, runId, tracking, final: { status: 'FINISHED' } })).tracking?.sent, iterations - 1);
    await store.put(keys.mlflowState(runId), '{}');
    const again = await reportRun({ storeUrl: store.url, runId, tracking, final: { status: 'FINISHED' } });
    assert.deepEqual([again.tracking?.mlflowRunId, again.tracking?.sent, again.tracking?.pending], [done.mlflowRunId, iterations, 0]);
    const runs = await mlflowRuns(experiment, runId);
    assert.equal(runs.length, 1, 'one MLflow run for our run id');
    const id = runs[0].info.run_id;
    assert.equal(runs[0].info.status, 'FINISHED');
    for (const key of ['meanReward', 'successRate', 'loss', 'gradNorm', 'tokens', 'filtered/max_steps', 'iterationSeconds']) {
      const h = await history(id, key);
      assert.deepEqual(
        h.map((m) => m.step),
        [0, 1, 2, 3, 4],
        `${key}: steps 0..4, each once`,
      );
      const field = key.split('/');
      assert.deepEqual(
        h.map((m) => m.value),
        lines.map((l) => Number(field.reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], l))),
        `${key}: the values of metrics.jsonl`,
      );
      assert.deepEqual(
        h.map((m) => m.timestamp),
        lines.map((l) => l.time),
        `${key}: at the time each line was recorded`,
      );
    }
    const params = Object.fromEntries((runs[0].data.params ?? []).map((p) => [p.key, p.value]));
    assert.equal(params['algorithm.lr'], '0.001');
    assert.equal(params['batch.tasks'], '4');
    assert.equal(params['env.kind'], 'frozenlake');
    const tags = Object.fromEntries((runs[0].data.tags ?? []).map((p) => [p.key, p.value]));
    assert.equal(tags['mlflow.runName'], runId);
    const files = async (path: string) =>
      ((await mlflow.api<{ files?: { path: string; file_size?: number }[] }>(`artifacts/list?run_id=${id}&path=${path}`)).files ?? []).map((f) => f.path);
    assert.deepEqual((await files('plots')).sort(), ['plots/reward.png', 'plots/reward.svg', 'plots/reward.vl.json']);
    assert.ok((await files('')).includes('metrics.jsonl'));
    const artifacts = runs[0].info.artifact_uri.replace(/^mlflow-artifacts:\//, '');
    const svg = await fetch(`${mlflow.uri}/api/2.0/mlflow-artifacts/artifacts/${artifacts}/plots/reward.svg`).then((r) => r.text());
    assert.equal((svg.match(/series: mean reward"/g) ?? []).length >= iterations, true, 'the uploaded plot has every iteration');
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
  }
});

test('an evaluation becomes its own MLflow run: pass@k at step = checkpoint, config as params, report files; once however often it is sent', async () => {
  const evalId = 'eval-ckpt-3';
  const experiment = 'swerl-evals';
  const store = openStore(fileStoreUrl(join(t.dir, 'eval-store')));
  await store.putJson(evalKeys.config(evalId), { evalId, tasksFile: 'tasks.jsonl', model: { run: 'tracked', checkpoint: 3 }, runs: 4 });
  const metrics = {
    tasks: 8,
    runs: 4,
    episodes: { planned: 32, completed: 31, resolved: 9, errors: 1 },
    pass1: 0.28125,
    pass1Completed: 0.29,
    pass1CI: { low: 0.1, high: 0.45, level: 0.95 },
    passAtK: [0.28125, 0.4, null, 0.5],
    passAtKCompleted: [0.29, 0.41, 0.47, 0.5],
    ends: { submitted: 30, max_steps: 1 },
    mean: { steps: 12.5, tokens: 9000, responseTokens: 2000, seconds: 40 },
    perRepo: [{ repo: 'a/b', tasks: 8 }],
  };
  await store.putJson(`${evalKeys.report(evalId)}/summary.json`, { evalId, checkpoint: 3, metrics });
  await store.put(`${evalKeys.report(evalId)}/run-0/predictions.jsonl`, '{"instance_id":"x","model_patch":""}\n');
  const tracking = { mlflow: { uri: mlflow.uri, experiment } };
  for (let i = 0; i < 2; i++) assert.equal((await reportEvaluation({ storeUrl: store.url, evalId, tracking }))?.pending, 0);

  const exp = await mlflow.api<{ experiment: { experiment_id: string } }>(`experiments/get-by-name?experiment_name=${experiment}`);
  const found = await mlflow.api<{ runs?: Run[] }>('runs/search', { experiment_ids: [exp.experiment.experiment_id], filter: `tags.\`swerl.eval_id\` = '${evalId}'` });
  assert.equal(found.runs?.length, 1);
  const run = found.runs![0];
  assert.equal(run.info.status, 'FINISHED');
  for (const [key, value] of [
    ['pass1', 0.28125],
    ['passAtK/2', 0.4],
    ['passAtK/4', 0.5],
    ['passAtKCompleted/3', 0.47],
    ['episodes/errors', 1],
    ['pass1CI/low', 0.1],
  ] as const) {
    const h = await history(run.info.run_id, key);
    assert.deepEqual(
      h.map((m) => [m.step, m.value]),
      [[3, value]],
      `${key} once, at the checkpoint's step`,
    );
  }
  assert.deepEqual(await history(run.info.run_id, 'passAtK/3'), [], 'pass@k without a value is not logged');
  const params = Object.fromEntries((run.data.params ?? []).map((p) => [p.key, p.value]));
  assert.equal(params['model.run'], 'tracked');
  assert.equal(params['runs'], '4');
  const files = (await mlflow.api<{ files?: { path: string }[] }>(`artifacts/list?run_id=${run.info.run_id}&path=report`)).files?.map((f) => f.path) ?? [];
  assert.deepEqual(files.sort(), ['report/run-0', 'report/summary.json']);
});

test('a terminated run (no workflow code runs) is closed KILLED in MLflow by swerl report --sync, which asks Temporal how it ended', async () => {
  const runId = 'terminated';
  const experiment = 'swerl-test';
  const config = tinyConfig(t.dir, { runId, iterations: 50, tracking: { mlflow: { uri: mlflow.uri, experiment } } });
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await waitFor(
      'the MLflow run with step 0',
      async () => {
        const runs = await mlflowRuns(experiment, runId);
        return runs.length && (await history(runs[0].info.run_id, 'meanReward')).length ? runs : null;
      },
      150_000,
    );
    await h.terminate('operator');
  } finally {
    await workers.shutdown();
  }
  assert.equal((await mlflowRuns(experiment, runId))[0]!.info.status, 'RUNNING', 'terminate gives the run no chance to close it');
  const said: string[] = [];
  await report({ runId, store: config.store.url, sync: true, address: t.server.address, log: (s) => said.push(s) });
  assert.equal((await mlflowRuns(experiment, runId))[0]!.info.status, 'KILLED', said.join('\n'));
  assert.match(said.join('\n'), /closed KILLED/);
});
