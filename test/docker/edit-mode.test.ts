// Edit mode graded by tests in real sandboxes (with every integrity check of the grader), and `swerl eval`'s
// evaluationRun in edit mode: a scripted chat model answers run 0 with the gold edit and run 1 with a reply that is no
// edit, so the summary's pass@1 (by tests), mean reward and valid-edit rate are known.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSweEditEnvironment } from '../../activities/swe-env.ts';
import { fileStoreUrl, openStore } from '../../lib/store.ts';
import { evalKeys } from '../../lib/eval/keys.ts';
import type { EvalConfigInput } from '../../lib/eval/config.ts';
import type { EvaluationRunResult } from '../../lib/eval/shapes.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { imagesFor, requireDocker } from '../helpers/docker.ts';
import { startScriptedModel } from '../helpers/scripted-agent.ts';
import { seedTable } from '../helpers/eval.ts';
import { useTemporalWithWorker, type TestTemporal } from '../helpers/temporal.ts';
import { GOLD_REPLIES, writeEditTask } from '../helpers/edit-task.ts';

let t: TestTemporal;
let task: SweTask;
let tasksFile: string;
const dir = mkdtempSync(join(tmpdir(), 'edit-docker-'));
useTemporalWithWorker(
  (x) => (t = x),
  async () => {
    await requireDocker();
    ({ task, tasksFile } = writeEditTask(dir));
    await imagesFor([task]);
  },
);
test.after(() => rmSync(dir, { recursive: true, force: true }));

// sub's line made a product: the line the fix changes, the wrong change
const WRONG = '### calc/ops.py\n<<<<<<< SEARCH\ndef sub(a, b):\n    return a + b\n=======\ndef sub(a, b):\n    return a * b\n>>>>>>> REPLACE\n';

async function episode(reply: string, reward: 'tests' | 'hybrid') {
  const env = await createSweEditEnvironment(task.instance_id, { tasksFile, mode: 'edit', reward, edit: { format: 'search_replace' } });
  try {
    await env.reset();
    await env.step(reply);
    return await env.reward('submitted');
  } finally {
    await env.close();
  }
}

test('tests and hybrid rewards: the gold edit resolves the task, a wrong one does not, a malformed one is never graded', async () => {
  const gold = await episode(GOLD_REPLIES.search_replace, 'tests');
  assert.equal(gold.reward, 1);
  assert.equal(gold.info!.resolved, true);
  assert.equal(gold.info!.reason, 'passed');
  assert.equal(typeof gold.info!.graderVersion, 'string');
  const wrong = await episode(WRONG, 'tests');
  assert.equal(wrong.reward, 0);
  assert.equal(wrong.info!.resolved, false);
  // hybrid: unresolved, shaped by half its located similarity (it changes the fix's line)
  const shaped = await episode(WRONG, 'hybrid');
  assert.equal(shaped.info!.resolved, false);
  assert.ok(Number(shaped.info!.similarity) > 0.5, String(shaped.info!.similarity));
  assert.equal(shaped.reward, 0.5 * Number(shaped.info!.similarity));
  const malformed = await episode('The fix is to subtract.', 'tests');
  assert.equal(malformed.reward, -1);
  assert.equal(malformed.info!.editOutcome, 'no_block');
  assert.equal(malformed.info!.resolved, undefined, 'not graded');
});

test('evaluationRun in edit mode: pass@1 by tests, mean reward and valid-edit rate in summary.json, the setting named', async () => {
  const model = await startScriptedModel({
    identify: seedTable(3, [task.instance_id], 2, 1),
    script: ({ run }) => [{ text: run === 0 ? GOLD_REPLIES['swe-rl'] : 'Subtract instead of adding.' }],
  });
  try {
    const config: EvalConfigInput = {
      tasksFile,
      seed: 3,
      runs: 2,
      mode: 'edit',
      reward: 'similarity',
      edit: { format: 'swe-rl', contextTokens: 2048 },
      model: { baseUrl: model.url, model: 'scripted', api: 'chat', toolFormat: 'text' },
      maxTokensPerTurn: 1024,
      store: { url: fileStoreUrl(join(t.dir, 'store')) },
    };
    const h = await t.client.workflow.start('evaluationRun', { taskQueue: 'learner', workflowId: 'eval-edit', args: [config] });
    const r = (await h.result()) as EvaluationRunResult;
    assert.equal(r.summary.pass1, 0.5);
    const summary = (await openStore(fileStoreUrl(join(t.dir, 'store'))).getJson<{ metrics: Record<string, unknown>; setting: { mode: string; text: string } }>(
      `${evalKeys.report('eval-edit')}/summary.json`,
    ))!;
    assert.equal(summary.metrics.pass1, 0.5);
    assert.equal(summary.metrics.validEditRate, 0.5);
    assert.equal(summary.metrics.meanReward, 0, 'the gold edit 1, the reply with no edit −1');
    assert.equal(summary.setting.mode, 'edit');
    assert.match(summary.setting.text, /edit mode, format swe-rl, reward similarity \(rule located, malformed minus-one\), oracle files to 2048 tokens/);
  } finally {
    await model.close();
  }
});
