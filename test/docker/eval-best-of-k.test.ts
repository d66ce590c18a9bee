// Best@K over a finished evaluation whose four runs per task are {gold, empty, wrong fix, an edit of the
// test files} (scripted agents, real sandboxes and grading): the execution-based verifier (regression
// tests in fresh containers + reproduction tests from a scripted generator behind a real chat server)
// picks gold; the execution-free verifier runs on the tiny model behind our own policy server (scores
// in [0, 1], the same on a rerun). The evaluation goes through the `temporal` CLI and the rerun through the
// `swerl eval best-of-k` command line, as the README gives them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { existsSync, writeFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { readEvalEpisodes } from '../../activities/evaluation.ts';
import { startPolicyServer, type ServableModel } from '../../policy-server/index.ts';
import type { ExecutionFreeResult, ExecutionScores } from '../../activities/verifiers.ts';
import { evalKeys } from '../../lib/eval/keys.ts';
import { passAtK } from '../../lib/eval/metrics.ts';
import { writeModel } from '../../lib/model-init.ts';
import { fileStoreUrl, openStore } from '../../lib/store.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { temporalBinary } from '../../services/temporal-server.ts';
import { loadTokenizer } from '../../lib/tokenizer.ts';
import type { EvaluationRunResult } from '../../lib/eval/shapes.ts';
import type { SelectionResult } from '../../workflows/select-best-of-k.ts';
import { sweTasksFile, TASK } from '../helpers/swe-tasks.ts';
import { scriptedEvalConfig, seedTable } from '../helpers/eval.ts';
import { editCallsFromPatch, FINISH, startScriptedModel, type ScriptTurn } from '../helpers/scripted-agent.ts';
import { ROOT, waitFor, type TestTemporal } from '../helpers/temporal.ts';
import { useSweWorker } from '../helpers/swe-worker.ts';

const run = promisify(execFile);
const TASKS_FILE = await sweTasksFile();

let t: TestTemporal;
let tasks: SweTask[];
useSweWorker((x, ts) => ([t, tasks] = [x, ts]));

/** Per task: a fix that does not fix, a test-file edit, and a script that reproduces the issue. */
const CASES: Record<string, { wrong: string; testFile: string; repro: string }> = {
  [TASK.rootModule]: {
    wrong: `diff --git a/verspec.py b/verspec.py
--- a/verspec.py
+++ b/verspec.py
@@ -80,7 +80,7 @@ class Version:
         return self._key() < other._key()
 
     def __hash__(self):
-        return hash((self.release, self.pre))
+        return hash((str(self), self.pre))
 
     def __str__(self):
         text = ".".join(str(p) for p in self.release)
`,
    testFile: 'test_verspec.py',
    repro: `from verspec import parse
print("ISSUE RESOLVED" if len({parse("1.0"), parse("1.0.0"), parse("1")}) == 1 else "ISSUE REPRODUCED")
`,
  },
  [TASK.sdist]: {
    wrong: `diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py
--- a/toolz/itertoolz.py
+++ b/toolz/itertoolz.py
@@ -524,7 +524,10 @@ def interpose(el, seq):
     [1, 'a', 2, 'a', 3]
     """
     inposed = concat(zip(itertools.repeat(el), seq))
-    next(inposed)
+    try:
+        next(inposed)
+    except StopIteration:
+        return iter([el])
     return inposed
 
 
`,
    testFile: 'toolz/tests/test_itertoolz.py',
    repro: `from toolz import interpose
try:
    out = list(interpose("x", []))
except StopIteration:
    out = None
print("ISSUE RESOLVED" if out == [] else "ISSUE REPRODUCED")
`,
  },
};
const KINDS = ['gold', 'empty', 'wrong', 'test-edit'] as const;

test('Best@K: the execution-based verifier picks gold among {gold, empty, wrong fix, test-file edit}; the execution-free verifier on the tiny model', async () => {
  const ids = Object.keys(CASES);
  const byId = new Map(tasks.map((x) => [x.instance_id, x]));
  const kindOf = (taskId: string, run: number) => KINDS[(ids.indexOf(taskId) + run) % 4]!;
  const agent = await startScriptedModel({
    identify: seedTable(4, ids, 4),
    script: ({ taskId, run }): ScriptTurn[] => {
      const c = CASES[taskId]!;
      switch (kindOf(taskId, run)) {
        case 'gold':
          return [...editCallsFromPatch(byId.get(taskId)!.patch), FINISH];
        case 'wrong':
          return [...editCallsFromPatch(c.wrong), FINISH];
        case 'test-edit':
          return [{ name: 'execute_bash', args: { cmd: `printf '\\n\\ndef test_trivially_passes():\\n    assert True\\n' >> ${c.testFile}` } }, FINISH];
        default:
          return [FINISH];
      }
    },
  });
  // the reproduction-test generator: a chat server answering each issue with its script
  const generator = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (x: Buffer) => chunks.push(x));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { messages: { content: string }[] };
      const id = ids.find((k) => body.messages.at(-1)!.content.includes(byId.get(k)!.problem_statement.trim().slice(0, 200)));
      const content = id ? `Here is a script.\n\`\`\`python\n${CASES[id]!.repro}\`\`\`\n` : 'I cannot tell.';
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ message: { role: 'assistant', content }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1 } }));
    });
  });
  await new Promise<void>((r) => generator.listen(0, '127.0.0.1', () => r()));
  // the execution-free verifier: the tiny model behind our policy server
  const { Learner } = (await import(join(ROOT, 'gpu-learner', 'index.ts'))) as { Learner: { load(dir: string, o?: { threads?: number }): Promise<ServableModel> } };
  const tiny = await writeModel(join(t.dir, 'judge'), 'tiny', 7);
  const judgeModel = await Learner.load(tiny.dir, { threads: 1 });
  const judge = await startPolicyServer({ learner: judgeModel, tokenizer: await loadTokenizer(tiny.dir), modelName: 'judge' });
  const storeUrl = fileStoreUrl(join(t.dir, 'store'));
  try {
    // the evaluation started, queried and listed with the official `temporal` CLI, as the README shows
    const evalConfig = scriptedEvalConfig(agent.url, TASKS_FILE, storeUrl, { tasks: ids, runs: 4, seed: 4, concurrency: 6 });
    const temporal = async (...args: string[]) => (await run(temporalBinary(), [...args, '--address', t.server.address], { encoding: 'utf8', timeout: 120_000 })).stdout;
    await temporal('workflow', 'start', '--type', 'evaluationRun', '--task-queue', 'learner', '--workflow-id', 'eval-bok', '--input', JSON.stringify(evalConfig));
    const er = (await t.client.workflow.getHandle('eval-bok').result()) as EvaluationRunResult;
    assert.deepEqual(er.summary.episodes, { planned: 8, completed: 8, resolved: 2, errors: 0 });
    const st = JSON.parse(await temporal('workflow', 'query', '--workflow-id', 'eval-bok', '--type', 'status', '--output', 'json')) as {
      queryResult: { phase: string; total: number; done: number; resolved: number; errors: number }[];
    };
    assert.deepEqual(st.queryResult[0], { ...st.queryResult[0], phase: 'done', total: 8, done: 8, resolved: 2, errors: 0 });
    const listed = await waitFor(
      'the evaluation in the visibility list',
      async () => {
        const out = await temporal('workflow', 'list', '--query', 'EvalPass1 > 0.2 AND EvalDone = 8', '--output', 'json');
        return out.includes('eval-bok') ? out : undefined;
      },
      30_000,
      500,
    );
    assert.match(listed, /eval-bok/);

    const genUrl = `http://127.0.0.1:${(generator.address() as AddressInfo).port}`;
    const executionFree = { model: { baseUrl: judge.url, model: 'judge' }, maxTokens: 24, topLogprobs: 20, maxPromptChars: 5000 };
    const config = {
      evalId: 'eval-bok',
      selectionId: 'sel-1',
      executionFree,
      executionBased: { reproduction: { model: { baseUrl: genUrl, model: 'generator' }, tests: 1 }, timeoutSeconds: 120 },
      concurrency: 2,
      store: { url: storeUrl },
    };
    const h = await t.client.workflow.start('selectBestOfK', { taskQueue: 'learner', workflowId: 'bok-1', args: [config] });
    const r = (await h.result()) as SelectionResult;

    const store = openStore(storeUrl);
    const eps = await readEvalEpisodes(store, 'eval-bok');
    const goldRun = (id: string) => [0, 1, 2, 3].find((run) => kindOf(id, run) === 'gold')!;
    const summary = (await store.getJson<{ selections: Record<string, Record<string, number>>; curves: Record<string, number[]> }>(`${r.reportKey}/best_of_k.json`))!;
    for (const id of ids) {
      assert.equal(summary.selections.executionBased![id], goldRun(id), `${id}: execution-based picks gold`);
      const scores = new Map<string, ExecutionScores>();
      for (let run = 0; run < 4; run++) scores.set(kindOf(id, run), (await store.getJson<ExecutionScores>(evalKeys.execution('eval-bok', 'sel-1', id, run)))!);
      // an empty patch keeps every base-passing test: regression alone cannot tell it from gold
      assert.equal(scores.get('empty')!.regression, scores.get('empty')!.regressionOf);
      assert.ok(scores.get('empty')!.regressionOf >= 10);
      assert.equal(scores.get('gold')!.regression, scores.get('gold')!.regressionOf);
      assert.equal(scores.get('test-edit')!.regression, scores.get('test-edit')!.regressionOf);
      assert.deepEqual([...scores].map(([k, s]) => [k, s.reproduction]).sort(), [
        ['empty', 0],
        ['gold', 1],
        ['test-edit', 0],
        ['wrong', 0],
      ]);
      const gold = eps.find((e) => e.taskId === id && e.run === goldRun(id))!;
      assert.ok(gold.resolved);
    }
    assert.equal(r.resolvedAtK.executionBased, 1);
    assert.equal(r.resolvedAtK.reproduction, 1);
    // pass@K ceiling: one resolved run of four per task
    assert.deepEqual(
      r.curves['pass@k']!.map((x) => x!.toFixed(12)),
      [1, 2, 3, 4].map((k) => passAtK(4, 1, k).toFixed(12)),
    );
    assert.equal(r.curves.executionBased!.at(-1), 1);
    // the selected predictions and reports are the evaluation's own for those patches
    const chosenReport = (id: string) => store.get(`${r.reportKey}/executionBased/logs/run_evaluation/eval-bok-sel-1-executionBased/scripted/${id}/report.json`);
    for (const id of ids) {
      const evalReport = await store.get(`${evalKeys.report('eval-bok')}/run-${goldRun(id)}/logs/run_evaluation/eval-bok-run-${goldRun(id)}/scripted/${id}/report.json`);
      assert.deepEqual((await chosenReport(id))?.toString(), evalReport?.toString());
    }

    // execution-free: scores in [0, 1] from the answer token's log-probs, the same on a rerun
    let found = 0;
    const efScores = async (sel: string) => {
      const out: number[] = [];
      for (const id of ids)
        for (let run = 0; run < 4; run++) {
          const s = (await store.getJson<ExecutionFreeResult>(evalKeys.executionFree('eval-bok', sel, id, run)))!;
          assert.ok(s.score >= 0 && s.score <= 1, JSON.stringify(s));
          out.push(s.score);
          found += s.how === 'none' ? 0 : 1;
        }
      return out;
    };
    const first = await efScores('sel-1');
    // the rerun through the `swerl eval best-of-k` command line as the README gives it (the evaluation and
    // its store as --eval-id and --store DIR), then `swerl eval report` of the evaluation
    const cfg2 = join(t.dir, 'bok-2.json');
    writeFileSync(cfg2, JSON.stringify({ selectionId: 'sel-2', executionFree }));
    const out2 = join(t.dir, 'bok-2');
    const swerl = (...args: string[]) => run(process.execPath, ['scripts/swerl.mjs', ...args], { cwd: ROOT, encoding: 'utf8', timeout: 600_000 });
    const o2 = await swerl('eval', 'best-of-k', '--config', cfg2, '--eval-id', 'eval-bok', '--store', join(t.dir, 'store'), '--out', out2, '--address', t.server.address);
    assert.match(o2.stdout, /Best@K over 4 runs[\s\S]*executionFree[\s\S]*pass@k/);
    assert.ok(existsSync(join(out2, 'best_at_k.png')) && existsSync(join(out2, 'executionFree', 'predictions.jsonl')));
    assert.deepEqual(await efScores('sel-2'), first);
    const rep = await swerl('eval', 'report', store.dirFor(evalKeys.report('eval-bok')));
    assert.match(rep.stdout, /evaluation eval-bok \(scripted; agent mode, graded by tests\): 2 tasks × 4 runs = 8 episodes; completed 8, resolved 2, errors 0/);
    assert.ok(found > 0, 'the random tiny judge still shows a YES/NO alternative somewhere');
  } finally {
    await agent.close();
    await judge.close();
    judgeModel.close();
    generator.closeAllConnections();
    await new Promise((r) => generator.close(() => r(undefined)));
  }
});
