// Records histories of trainingRun (every run of its continue-as-new chain), rlIteration and rolloutChunk
// from short FrozenLake runs on a temporary dev server, into test/histories/*.json for test/unit/replay.test.ts.
// Re-record after an intended workflow change; a change that breaks replay of histories of runs still in
// flight needs patched() until they end. Scenarios (arguments; all when none): `run` (trainingRun-0/1.json:
// two runs of a continue-as-new chain with pause, update, query and resume, its tracker down so it ends with
// a trackingCatchUp child, trackingCatchUp-run-0.json; rlIteration-0/1.json), `fanout`
// (rlIteration-fanout.json and its rolloutChunk-fanout-*.json children), `one-step` (trainingRun-one-step-*.json, a
// chain, and oneStepIteration-0/1.json) and `pump` (trainingRun-pump-admission-*.json, a chain, trainingRun-pump-
// streaming-0.json, and a rolloutGroup of each). Record only the one you change.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runChain, saveHistory, startTemporalWithWorker, tinyConfig } from '../test/helpers/temporal.ts';
import { pauseSignal, resumeSignal, statusQuery, updateHyperparametersUpdate } from '../workflows/signals.ts';
import { iterationWorkflowId, rolloutChunkWorkflowId, rolloutGroupWorkflowId } from '../lib/training/shapes.ts';
import { trackingCatchUpWorkflowId } from '../workflows/run-reporting.ts';

const scenarios = process.argv.slice(2);
const wanted = (name: string) => scenarios.length === 0 || scenarios.includes(name);

const outDir = fileURLToPath(new URL('../test/histories/', import.meta.url));
const t = await startTemporalWithWorker('swerl-record-');
const { dir, client } = t;
try {
  // the tests' FrozenLake config (test/helpers/temporal.ts), smaller: 2 tasks x 2 samples, 6 steps
  const tests = tinyConfig(dir);
  const baseConfig = (runId: string) =>
    tinyConfig(dir, {
      runId,
      seed: 3,
      batch: { tasks: 2, samples: 2 },
      maxInflightRollouts: 2,
      rollout: { ...tests.rollout, maxAttempts: 3 },
      episode: { ...tests.episode, maxSteps: 6, responseBudget: 6, maxTokensPerTurn: 1 },
      algorithm: { ...tests.algorithm, lMax: 6 },
      env: { kind: 'frozenlake', size: 4, maxSteps: 6 },
    });
  mkdirSync(outDir, { recursive: true });
  const save = (workflowId: string, file: string, runId?: string) => saveHistory(client, join(outDir, file), workflowId, runId);
  if (wanted('run')) {
    const runId = 'recorded-run';
    // one iteration per workflow run (a continue-as-new chain); nothing listens on port 9, so every report
    // leaves the metrics pending and the run ends with a catch-up child
    const config = { ...baseConfig(runId), continueAsNewEvery: 1, tracking: { mlflow: { uri: 'http://127.0.0.1:9', experiment: 'recorded' } } };
    const h = await client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    // exercise the handlers so their commands are in the recorded history
    await h.signal(pauseSignal);
    await h.executeUpdate(updateHyperparametersUpdate, { args: [{ lr: 2e-3 }] });
    await h.query(statusQuery);
    await h.signal(resumeSignal);
    await h.result();
    const chain = await runChain(client, runId);
    let i = 0;
    for (const r of chain) await save(runId, `trainingRun-${i++}.json`, r);
    for (const n of [0, 1]) await save(iterationWorkflowId(runId, n), `rlIteration-${n}.json`);
    // the catch-up child retries its report until the tracker answers: record it as it waits, then end it
    const catchUp = client.workflow.getHandle(trackingCatchUpWorkflowId(runId));
    await new Promise((r) => setTimeout(r, 2000));
    await save(trackingCatchUpWorkflowId(runId), 'trackingCatchUp-run-0.json');
    await catchUp.terminate('recorded');
    console.log(`recorded ${chain.length} trainingRun, 2 rlIteration and 1 trackingCatchUp histories into ${outDir}`);
  }
  if (wanted('one-step')) {
    // async one-step (DESIGN §10): two iterations, one continue-as-new between them carrying the pending batch
    const runId = 'recorded-one-step';
    const config = { ...baseConfig(runId), continueAsNewEvery: 1, async: { mode: 'one-step' } };
    await client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    const chain = await runChain(client, runId);
    let i = 0;
    for (const r of chain) await save(runId, `trainingRun-one-step-${i++}.json`, r);
    for (const n of [0, 1]) await save(iterationWorkflowId(runId, n), `oneStepIteration-${n}.json`);
    console.log(`recorded ${chain.length} one-step trainingRun and 2 oneStepIteration histories into ${outDir}`);
  }
  if (wanted('pump')) {
    // async pump (DESIGN §10), admission order with a continue-as-new after each step (its groups outlive it), and
    // streaming order in one run; with the first group of each
    for (const order of ['admission', 'streaming'] as const) {
      const runId = `recorded-pump-${order}`;
      const config = {
        ...baseConfig(runId),
        maxInflightRollouts: 8,
        async: { mode: 'pump', maxStaleness: 1, order },
        ...(order === 'admission' ? { continueAsNewEvery: 1 } : {}),
      };
      await client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
      const chain = await runChain(client, runId);
      let i = 0;
      for (const r of chain) await save(runId, `trainingRun-pump-${order}-${i++}.json`, r);
      await save(rolloutGroupWorkflowId(runId, 0), `rolloutGroup-${order}-0.json`);
      console.log(`recorded ${chain.length} pump (${order}) trainingRun histories and a rolloutGroup into ${outDir}`);
    }
  }
  if (wanted('fanout')) {
    // 3 tasks × 2 samples, 2 rollouts per workflow: three rolloutChunk children of one task, two at a time
    const runId = 'recorded-fanout';
    const config = { ...baseConfig(runId), iterations: 1, batch: { tasks: 3, samples: 2 }, rolloutsPerWorkflow: 2, maxInflightRollouts: 2 };
    await client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await save(iterationWorkflowId(runId, 0), 'rlIteration-fanout.json');
    for (const k of [0, 1, 2]) await save(rolloutChunkWorkflowId(runId, 0, k), `rolloutChunk-fanout-${k}.json`);
    console.log(`recorded the fanned-out rlIteration and its 3 rolloutChunk histories into ${outDir}`);
  }
} finally {
  await t.close();
}
