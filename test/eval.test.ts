// evaluationRun end to end with scripted agents behind a real OpenAI-compatible chat server (the
// "model"), real Docker sandboxes, real grading and a real dev server with an in-process worker.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { turnSeed } from '../lib/episode.ts';
import { evalEpisodeSeed } from '../activities/evaluation.ts';
import { fileStoreUrl } from '../lib/store.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { evaluationStatusQuery } from '../workflows/evaluation-signals.ts';
import type { EvaluationRunResult } from '../workflows/evaluation-shapes.ts';
import { imagesFor, requireDocker, sharedTasks, TASKS_FILE } from './helpers/docker.ts';
import { editCallsFromPatch, FINISH, startScriptedModel, type ScriptContext, type ScriptTurn } from './helpers/scripted-agent.ts';
import { useTemporalWithWorker, type TestTemporal } from './helpers/temporal.ts';

let t: TestTemporal;
let tasks: SweTask[];
useTemporalWithWorker((x) => (t = x), async () => {
  await requireDocker();
  tasks = await sharedTasks();
  await imagesFor(tasks);
});

/** seed → (task, run, turn) for every episode of an evaluation with this seed. */
function seedTable(seed: number, taskIds: string[], runs: number, maxTurns = 40): (s: number) => ScriptContext | undefined {
  const m = new Map<number, ScriptContext>();
  for (const taskId of taskIds) for (let run = 0; run < runs; run++) {
    const es = evalEpisodeSeed(seed, taskId, run);
    for (let turn = 0; turn < maxTurns; turn++) m.set(turnSeed(es, turn), { taskId, run, turn });
  }
  return (s) => m.get(s);
}

test('gold replay → pass@1 = 1', async () => {
  const ids = tasks.slice(2, 4).map((x) => x.instance_id);
  const byId = new Map(tasks.map((x) => [x.instance_id, x]));
  const model = await startScriptedModel({
    identify: seedTable(5, ids, 1),
    script: ({ taskId }): ScriptTurn[] => [...editCallsFromPatch(byId.get(taskId)!.patch), FINISH],
  });
  try {
    const config = {
      tasksFile: TASKS_FILE,
      tasks: ids,
      seed: 5,
      model: { baseUrl: model.url, model: 'scripted', api: 'chat', toolFormat: 'text' },
      maxSteps: 20,
      concurrency: 4,
      store: { url: fileStoreUrl(join(t.dir, 'store')) },
    };
    const h = await t.client.workflow.start('evaluationRun', { taskQueue: 'learner', workflowId: 'eval-gold', args: [config] });
    const r = (await h.result()) as EvaluationRunResult;
    console.log(JSON.stringify(r, null, 1));
    console.log(JSON.stringify(await h.query(evaluationStatusQuery)));
    assert.equal(r.summary.pass1, 1);
  } finally {
    await model.close();
  }
});
