// Records histories of the evaluation workflows into test/histories/ for test/unit/replay.test.ts (needs Docker
// and the shared SWE tasks): evaluationRun with two shards (a scripted chat model: gold in run 0, nothing
// in run 1), selectBestOfK over it (the tiny model as the execution-free judge, regression tests), and a
// one-iteration SWE training run whose rlIteration starts a validation evaluationRun.
// Re-record only after an intended change of these workflows: `node --import tsx scripts/record-eval-histories.ts`.
// `... record-eval-histories.ts tracking` records only evaluationRun-tracking-0.json (an evaluation with
// config.tracking whose MLflow server is down) and trackingCatchUp-eval-0.json, its catch-up child.
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPolicyServer } from '../policy-server/index.ts';
import { writeModel } from '../lib/model-init.ts';
import { fileStoreUrl } from '../lib/store.ts';
import { loadTokenizer } from '../lib/tokenizer.ts';
import { loadTasksStrict } from '../lib/swe/task.ts';
import { saveHistory, startTemporalWithWorker } from '../test/helpers/temporal.ts';
import { iterationWorkflowId } from '../lib/training/shapes.ts';
import { shardWorkflowId } from '../workflows/evaluation-run.ts';
import { editCallsFromPatch, FINISH, startScriptedModel, type ScriptTurn } from '../test/helpers/scripted-agent.ts';
import { scriptedEvalConfig, seedTable } from '../test/helpers/eval.ts';
import type { EvalConfigInput } from '../lib/eval/config.ts';
import { buildSweTasks } from './build-swe-tasks.ts';
import { trackingCatchUpWorkflowId } from '../workflows/run-reporting.ts';

const only = process.argv[2];

const root = fileURLToPath(new URL('..', import.meta.url));
const tasksFile = await buildSweTasks();
const outDir = join(root, 'test/histories');
const t = await startTemporalWithWorker('swerl-record-eval-');
const { dir, client } = t;
const storeUrl = fileStoreUrl(join(dir, 'store'));
const tasks = (await loadTasksStrict(tasksFile)).slice(2, 4);
const ids = tasks.map((t) => t.instance_id);
const model = await startScriptedModel({
  identify: seedTable(2, ids, 2),
  script: ({ taskId, run }): ScriptTurn[] => (run === 0 ? [...editCallsFromPatch(tasks.find((t) => t.instance_id === taskId)!.patch), FINISH] : [FINISH]),
});
const { Learner } = await import('../gpu-learner/index.ts');
const tiny = await writeModel(join(dir, 'judge'), 'tiny', 7);
const judgeModel = await Learner.load(tiny.dir, { threads: 1 });
const judge = await startPolicyServer({ learner: judgeModel, tokenizer: await loadTokenizer(tiny.dir), modelName: 'judge' });
const save = (workflowId: string, file: string) => saveHistory(client, join(outDir, file), workflowId);
/** an evaluation of the scripted model on the tasks `ids` (all by default) */
const evalInput = (evalId: string, o: Partial<EvalConfigInput> & { tasks: string[] }) => ({ evalId, ...scriptedEvalConfig(model.url, tasksFile, storeUrl, { seed: 2, ...o }) });
try {
  mkdirSync(outDir, { recursive: true });
  if (only === 'tracking') {
    // nothing listens on port 9: the evaluation's MLflow run stays pending and a catch-up child carries on
    const ev = await client.workflow.start('evaluationRun', {
      taskQueue: 'learner',
      workflowId: 'recorded-eval-tracking',
      args: [
        evalInput('recorded-eval-tracking', {
          tasks: ids.slice(0, 1),
          runs: 1,
          concurrency: 1,
          shardSize: 1,
          tracking: { mlflow: { uri: 'http://127.0.0.1:9', experiment: 'recorded' } },
        }),
      ],
    });
    await ev.result();
    await save('recorded-eval-tracking', 'evaluationRun-tracking-0.json');
    const catchUp = client.workflow.getHandle(trackingCatchUpWorkflowId('recorded-eval-tracking'));
    await new Promise((r) => setTimeout(r, 2000));
    await save(trackingCatchUpWorkflowId('recorded-eval-tracking'), 'trackingCatchUp-eval-0.json');
    await catchUp.terminate('recorded');
    console.log(`recorded evaluationRun-tracking-0.json and trackingCatchUp-eval-0.json into ${outDir}`);
  } else {
    const ev = await client.workflow.start('evaluationRun', {
      taskQueue: 'learner',
      workflowId: 'recorded-eval',
      args: [evalInput('recorded-eval', { tasks: ids, runs: 2, concurrency: 2, shardSize: 2 })],
    });
    await ev.result();
    await save('recorded-eval', 'evaluationRun-0.json');
    for (const i of [0, 1]) await save(shardWorkflowId('recorded-eval', i), `evaluationShard-${i}.json`);

    const sel = await client.workflow.start('selectBestOfK', {
      taskQueue: 'learner',
      workflowId: 'recorded-selection',
      args: [
        {
          evalId: 'recorded-eval',
          selectionId: 'sel',
          executionFree: { model: { baseUrl: judge.url, model: 'judge' }, maxTokens: 4, topLogprobs: 5, maxPromptChars: 4000 },
          executionBased: { timeoutSeconds: 120 },
          concurrency: 2,
          store: { url: storeUrl },
        },
      ],
    });
    await sel.result();
    await save('recorded-selection', 'selectBestOfK-0.json');
    await save('recorded-eval-sel-shard-0', 'selectionShard-0.json');

    const config = JSON.parse(readFileSync(join(root, 'configs/swe.json'), 'utf8'));
    Object.assign(config, { runId: 'recorded-validation', batch: { tasks: 1, samples: 1 }, store: { url: storeUrl } });
    config.env.tasksFile = tasksFile;
    config.eval = { every: 1, tasks: tasksFile, runs: 1, limit: 1, maxSteps: 1, responseBudget: 16 };
    const tr = await client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: 'recorded-validation', args: [config] });
    await tr.result();
    await save(iterationWorkflowId('recorded-validation', 0), 'rlIteration-validation.json');
    console.log(`recorded evaluationRun, evaluationShard ×2, selectBestOfK, selectionShard and rlIteration-validation into ${outDir}`);
  }
} finally {
  await model.close();
  await judge.close();
  judgeModel.close();
  await t.close();
}
