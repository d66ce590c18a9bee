// evaluationRun end to end with scripted agents behind a real OpenAI-compatible chat server (the
// "model": test/helpers/scripted-agent.ts), real Docker sandboxes, real grading, a real dev server and
// an in-process worker. Known outcomes: gold replay → 1, nothing → 0, (i + r) mod 3 → hand-computed
// pass@k; a sandbox that fails to start once is retried and changes nothing; an unreachable server is
// an error with its reason, never a model failure; a run's "latest" checkpoint and a model directory are
// what the learner worker's policy server samples from.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { WorkflowFailedError } from '@temporalio/client';
import { harnessRunId, readEvalEpisodes, type EvalEpisodeRecord } from '../../activities/evaluation.ts';
import { createSandboxBackend } from '../../activities/sandbox/index.ts';
import { gradePatch } from '../../activities/grade.ts';
import { instanceReport, reportJson } from '../../lib/swe/report.ts';
import { validateEvalConfig, type EvalConfigInput } from '../../lib/eval/config.ts';
import { evalKeys } from '../../lib/eval/keys.ts';
import { freePort } from '../../services/temporal-server.ts';
import { assertSummariesAgree, harnessRunSummary } from '../helpers/swebench-harness.ts';
import { writeModel } from '../../lib/model-init.ts';
import { fileStoreUrl, keys, openStore } from '../../lib/store.ts';
import { filesInPatch, type SweTask } from '../../lib/swe/task.ts';
import { evaluationStatusQuery } from '../../workflows/evaluation-signals.ts';
import type { EvaluationRunResult } from '../../lib/eval/shapes.ts';
import { sweTasksFile } from '../helpers/swe-tasks.ts';
import { editCallsFromPatch, FINISH, startScriptedModel, type ScriptedModelServer, type ScriptTurn } from '../helpers/scripted-agent.ts';
import { scriptedEvalConfig, seedTable } from '../helpers/eval.ts';
import { ROOT, type TestTemporal } from '../helpers/temporal.ts';
import { useSweWorker } from '../helpers/swe-worker.ts';

const TASKS_FILE = await sweTasksFile();

let t: TestTemporal;
let tasks: SweTask[];
useSweWorker((x, ts) => ([t, tasks] = [x, ts]));

const storeUrl = () => fileStoreUrl(join(t.dir, 'store'));

function evalConfig(model: ScriptedModelServer, over: Partial<EvalConfigInput> & { tasks: string[] }): EvalConfigInput {
  return scriptedEvalConfig(model.url, TASKS_FILE, storeUrl(), {
    seed: 1,
    model: { baseUrl: model.url, model: 'scripted', api: 'chat', toolFormat: 'text' },
    concurrency: 6,
    maxAttempts: 3,
    heartbeatTimeoutSeconds: 30,
    ...over,
  });
}

async function evaluate(id: string, config: EvalConfigInput): Promise<EvaluationRunResult> {
  const h = await t.client.workflow.start('evaluationRun', { taskQueue: 'learner', workflowId: id, args: [config] });
  return (await h.result()) as EvaluationRunResult;
}

/** The messages of a failure and its causes. */
const chain = (e: unknown): string => {
  const out: string[] = [];
  for (let x = e as { message?: string; cause?: unknown } | undefined; x; x = x.cause as typeof x) out.push(x.message ?? '');
  return out.join(' <- ');
};

/** The SWE-bench harness's run summary of one run directory (scripts/checks/swebench_outputs.py). */
const round = (xs: (number | null)[]) => xs.map((x) => (x === null ? null : Number(x.toFixed(12))));

test('config errors name the field and the value', async () => {
  const bad = validateEvalConfig({ tasksFile: TASKS_FILE, model: { baseUrl: 'http://x:1', model: 'm', api: 'completions' }, runs: 0 });
  assert.ok(!bad.ok);
  assert.ok(bad.errors.includes('config.runs: must be ≥ 1, got 0'), bad.errors.join('\n'));
  assert.ok(
    bad.errors.some((e) => e.startsWith('config.model.tokenizer: required with api "completions"')),
    bad.errors.join('\n'),
  );
  const v = validateEvalConfig({ tasksFile: 'x.jsonl', model: { run: 'r1' } });
  assert.ok(v.ok);
  assert.equal(v.config.maxSteps, 100);
  assert.equal(v.config.responseBudget, 65_536);
  assert.equal(v.config.sampling.temperature, 1);
  assert.deepEqual(v.config.model, { run: 'r1', checkpoint: 'latest', toolFormat: 'text' });
  const h = await t.client.workflow.start('evaluationRun', {
    taskQueue: 'learner',
    workflowId: 'eval-bad',
    args: [{ tasksFile: TASKS_FILE, model: { path: '/m' }, concurrency: -2 }],
  });
  await assert.rejects(h.result(), (e: unknown) => e instanceof WorkflowFailedError && /config\.concurrency: must be ≥ 1, got -2/.test(chain(e)));
  const missing = await t.client.workflow.start('evaluationRun', {
    taskQueue: 'learner',
    workflowId: 'eval-missing-task',
    args: [{ tasksFile: TASKS_FILE, tasks: ['nope__nope-1'], model: { baseUrl: 'http://127.0.0.1:9/', model: 'm' }, store: { url: storeUrl() } }],
  });
  await assert.rejects(missing.result(), (e: unknown) => e instanceof WorkflowFailedError && /config\.tasks: "nope__nope-1" not valid tasks/.test(chain(e)));
});

test('gold replay on every task → pass@1 = 1; submitting nothing → 0 (both at once)', async () => {
  const ids = tasks.map((x) => x.instance_id);
  const byId = new Map(tasks.map((x) => [x.instance_id, x]));
  const gold = await startScriptedModel({ identify: seedTable(1, ids, 1), script: ({ taskId }): ScriptTurn[] => [...editCallsFromPatch(byId.get(taskId)!.patch), FINISH] });
  const nothing = await startScriptedModel({ identify: seedTable(1, ids, 1), script: () => [{ text: 'I am not sure.' }, FINISH] });
  try {
    const [g, n] = await Promise.all([evaluate('eval-gold', evalConfig(gold, { tasks: ids })), evaluate('eval-nothing', evalConfig(nothing, { tasks: ids }))]);
    assert.equal(g.summary.pass1, 1);
    const count = ids.length;
    assert.deepEqual(g.summary.episodes, { planned: count, completed: count, resolved: count, errors: 0 });
    assert.equal(n.summary.pass1, 0);
    assert.deepEqual(n.summary.episodes, { planned: count, completed: count, resolved: 0, errors: 0 });
    // the evaluation's integrity counts (docs/integrity.md): every graded episode, none caught
    assert.deepEqual(g.summary.integrity, { episodes: count, hacks: 0, hackRate: 0, counts: {} });
    assert.deepEqual(n.summary.integrity, { episodes: count, hacks: 0, hackRate: 0, counts: {} });

    const store = openStore(storeUrl());
    const eps = await readEvalEpisodes(store, 'eval-gold');
    assert.equal(eps.length, count);
    for (const e of eps) {
      assert.equal(e.end, 'submitted');
      assert.equal(e.prediction, e.patch, 'a graded submission is its patch');
      assert.deepEqual(filesInPatch(e.prediction).sort(), filesInPatch(byId.get(e.taskId)!.patch).sort(), `${e.taskId}: the replay changes the gold patch's files`);
      assert.ok(e.prediction.includes('diff --git'), e.taskId);
      assert.equal((e.grade as { reason?: string }).reason, 'passed');
      assert.ok(e.messages!.length >= 3 && e.turns.length === e.steps);
    }
    const preds = (await store.get(`${evalKeys.report('eval-gold')}/run-0/predictions.jsonl`))!
      .toString()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      preds.map((p) => p.instance_id),
      ids,
    );
    assert.ok(preds.every((p) => p.model_name_or_path === 'scripted' && p.model_patch.startsWith('diff --git')));
    const none = await readEvalEpisodes(store, 'eval-nothing');
    assert.ok(none.every((e) => e.end === 'submitted' && e.prediction === '' && !e.resolved && e.steps === 2));
    const summary = (await store.getJson<{ runs: { empty_patch_ids: string[]; resolved_ids: string[] }[] }>(`${evalKeys.report('eval-nothing')}/summary.json`))!;
    assert.deepEqual(summary.runs[0]!.empty_patch_ids, [...ids].sort());
    assert.deepEqual(summary.runs[0]!.resolved_ids, []);

    // one grading path: grading a prediction of the file again gives the evaluation's report, byte for byte
    const backend = await createSandboxBackend('docker');
    for (const p of preds.slice(2, 4)) {
      const task = byId.get(p.instance_id)!;
      const again = reportJson(instanceReport(p, await gradePatch({ task, patch: p.model_patch, backend })));
      const file = await store.get(`${evalKeys.report('eval-gold')}/run-0/logs/run_evaluation/${harnessRunId('eval-gold', 0)}/scripted/${p.instance_id}/report.json`);
      assert.equal(file?.toString(), again);
    }

    // the official harness's readers load the predictions and reports and count what we counted
    for (const [evalId, resolved] of [
      ['eval-gold', ids],
      ['eval-nothing', []],
    ] as const) {
      const runDir = store.dirFor(`${evalKeys.report(evalId)}/run-0`);
      const ours = JSON.parse(readFileSync(join(runDir, `scripted.${harnessRunId(evalId, 0)}.json`), 'utf8')) as Record<string, unknown>;
      const theirs = harnessRunSummary(runDir, TASKS_FILE, harnessRunId(evalId, 0), join(t.dir, 'harness', harnessRunId(evalId, 0)));
      assert.deepEqual(theirs.resolved_ids, [...resolved].sort());
      assertSummariesAgree(ours, theirs, evalId);
    }
  } finally {
    await gold.close();
    await nothing.close();
  }
});

test('(i + r) mod 3 over 8 tasks × 4 runs with OpenAI tool calls, a sandbox failing to start once: hand-computed pass@k', async () => {
  // eight of the tasks; the two real releases (tasks 0 and 9, the slowest to grade) at positions solved once (i = 2, 5)
  const order = [2, 3, 0, 4, 5, 9, 6, 7].map((k) => tasks[k]!.instance_id);
  const byId = new Map(tasks.map((x) => [x.instance_id, x]));
  const model = await startScriptedModel({
    identify: seedTable(3, order, 4),
    script: ({ taskId, run }): ScriptTurn[] => ((order.indexOf(taskId) + run) % 3 === 0 ? [...editCallsFromPatch(byId.get(taskId)!.patch), FINISH] : [FINISH]),
  });
  // infrastructure fault: the first agent sandbox of three tasks does not start
  const failOnce = new Set(order.slice(0, 3));
  const failed: string[] = [];
  // on the process's shared Docker backend, the one the evaluation's environments use
  const backend = await createSandboxBackend('docker');
  const start = backend.start;
  backend.start = async (image, limits, labels) => {
    const task = labels?.['swerl.task'];
    if (task && labels?.['swerl.purpose'] === undefined && failOnce.delete(task)) {
      failed.push(task);
      throw new Error(`injected: the sandbox of ${task} could not start`);
    }
    return start.call(backend, image, limits, labels);
  };
  try {
    const r = await evaluate(
      'eval-mod3',
      evalConfig(model, { tasks: order, runs: 4, seed: 3, concurrency: 8, model: { baseUrl: model.url, model: 'scripted', api: 'chat', toolFormat: 'openai' } }),
    );
    assert.equal(failed.length, 3);
    assert.deepEqual(round(r.summary.passAtK), [11 / 32, 5 / 8, 27 / 32, 1]);
    assert.equal(r.summary.pass1, 11 / 32);
    assert.deepEqual(r.summary.episodes, { planned: 32, completed: 32, resolved: 11, errors: 0 });
    // every episode reached the model exactly once: the failed starts were retried before any turn
    for (const id of order) for (let run = 0; run < 4; run++) assert.equal(model.requests.get(`${id}#${run}#0`), 1, `${id} run ${run}`);
    const eps = await readEvalEpisodes(openStore(storeUrl()), 'eval-mod3');
    assert.equal(eps.length, 32);
    const solved = eps.find((e) => e.resolved)!;
    assert.ok(
      solved.messages!.some((m) => m.role === 'tool'),
      'tool results go back as tool messages',
    );
    const st = await t.client.workflow.getHandle('eval-mod3').query(evaluationStatusQuery);
    assert.equal(st.phase, 'done');
    assert.equal(st.done, 32);
    const desc = await t.client.workflow.getHandle('eval-mod3').describe();
    assert.deepEqual(desc.searchAttributes.EvalDone, [32]);
    assert.deepEqual(desc.searchAttributes.EvalPass1, [11 / 32]);
  } finally {
    backend.start = start;
    await model.close();
  }
});

test('an unreachable server or an unknown model fails the evaluation at once, naming what to fix; no episode is run', async () => {
  const id = tasks[3]!.instance_id;
  const port = await freePort();
  const t0 = Date.now();
  const failure = await evaluate('eval-unreachable', {
    tasksFile: TASKS_FILE,
    tasks: [id],
    model: { baseUrl: `http://127.0.0.1:${port}/v1`, model: 'nobody', api: 'chat' },
    store: { url: storeUrl() },
  }).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(failure instanceof WorkflowFailedError);
  assert.match(chain(failure), new RegExp(`config.model.baseUrl: the server at http://127.0.0.1:${port} does not answer .*ECONNREFUSED.*start it, or correct baseUrl`));
  assert.ok(Date.now() - t0 < 60_000, `failed after ${Date.now() - t0} ms`);
  const store = openStore(storeUrl());
  assert.deepEqual(await store.list(evalKeys.episodes('eval-unreachable')), []);
  assert.deepEqual(await store.list(evalKeys.errors('eval-unreachable')), []);

  // a server that answers but serves another model (ours refuses other names)
  const { Learner } = (await import(join(ROOT, 'gpu-learner', 'index.ts'))) as { Learner: { load(dir: string, o?: { threads?: number }): Promise<{ close(): void }> } };
  const { startPolicyServer } = await import('../../policy-server/index.ts');
  const { loadTokenizer } = await import('../../lib/tokenizer.ts');
  const dir = (await writeModel(join(t.dir, 'unknown-model'), 'tiny', 1)).dir;
  const learner = await Learner.load(dir, { threads: 1 });
  const server = await startPolicyServer({ learner: learner as never, tokenizer: await loadTokenizer(dir) });
  try {
    const wrong = await evaluate('eval-unknown-model', {
      tasksFile: TASKS_FILE,
      tasks: [id],
      model: { baseUrl: server.url, model: 'qwen-coder', api: 'chat' },
      store: { url: storeUrl() },
    }).then(
      () => null,
      (e: unknown) => e,
    );
    assert.match(chain(wrong), /config.model: the server at .* does not serve model "qwen-coder" \(GET \/v1\/models lists "policy"/);
  } finally {
    await server.close();
    learner.close();
  }
});

test('swerl eval (CLI) when every episode is an error: the reasons are in summary.txt, the exit status is 1, and eval report prints them again', async () => {
  const id = tasks[3]!.instance_id;
  const model = await startScriptedModel({ identify: seedTable(1, [id], 1), script: () => [FINISH], failEpisodesWith: 500 });
  try {
    const configPath = join(t.dir, 'failing.json');
    writeFileSync(
      configPath,
      JSON.stringify({
        tasksFile: TASKS_FILE,
        tasks: [id],
        seed: 1,
        model: { baseUrl: `${model.url}/v1`, model: 'scripted', api: 'chat' },
        maxAttempts: 2,
        store: { url: storeUrl() },
      }),
    );
    const out = join(t.dir, 'out-failing');
    // asynchronously: the worker that runs the evaluation lives in this process
    const cli = await new Promise<{ status: number | null; stdout: string; stderr: string }>((res) => {
      const p = spawn(
        process.execPath,
        ['--import', 'tsx', join(ROOT, 'scripts/cli.ts'), 'eval', '--config', configPath, '--out', out, '--address', t.server.address, '--eval-id', 'eval-failing'],
        { cwd: ROOT },
      );
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
      p.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
      p.on('close', (status) => res({ status, stdout, stderr }));
    });
    assert.equal(cli.status, 1, `${cli.stdout}\n${cli.stderr}`);
    assert.match(cli.stderr, /none of the 1 episodes could happen/);
    const store = openStore(storeUrl());
    assert.equal(await store.exists(evalKeys.episode('eval-failing', id, 0)), false);
    assert.ok(await store.getJson<EvalEpisodeRecord>(evalKeys.error('eval-failing', id, 0)));
    const summaryTxt = readFileSync(join(out, 'summary.txt'), 'utf8');
    assert.match(summaryTxt, /1 episodes; completed 0, resolved 0, errors 1/);
    assert.match(
      summaryTxt,
      new RegExp(`errors \\(1 episodes that could not happen; not scored\\):\\n  1 × .*unavailable after .* attempts: HTTP 500.*failing with 500 as told[^\\n]*\\n      ${id}/0`),
    );
    // the run summary lists it under error_ids with its reason
    const runSummary = JSON.parse(readFileSync(join(out, 'run-0', `scripted.${harnessRunId('eval-failing', 0)}.json`), 'utf8')) as {
      error_ids: string[];
      error_reasons: Record<string, string>;
    };
    assert.deepEqual(runSummary.error_ids, [id]);
    assert.match(runSummary.error_reasons[id]!, /HTTP 500/);
    for (const f of ['summary.json', 'summary.txt', 'pass_at_k.html', 'pass_at_k.png', 'run-0/predictions.jsonl']) assert.ok(existsSync(join(out, f)), f);
    // `swerl eval report DIR` prints the table and the errors again
    const printed = execFileSync(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts/cli.ts'), 'eval', 'report', out], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(printed.trim(), summaryTxt.trim());
  } finally {
    await model.close();
  }
});

test("a run's latest checkpoint and a Hugging Face model directory, served by the learner worker's policy server", async () => {
  // run r-latest has checkpoints 0 and 2 (different weights); a model directory beside them
  const store = openStore(storeUrl());
  await writeModel(store.dirFor(keys.checkpoint('r-latest', 0)), 'tiny', 1);
  await writeModel(store.dirFor(keys.checkpoint('r-latest', 2)), 'tiny', 2);
  const hfDir = (await writeModel(join(t.dir, 'hf-model'), 'tiny', 3)).dir;
  const { Learner } = (await import(join(ROOT, 'gpu-learner', 'index.ts'))) as {
    Learner: { load(dir: string, o?: { threads?: number }): Promise<{ logprobs(b: { ids: Int32Array; offsets: Int32Array }): Promise<Float32Array>; close(): void }> };
  };
  /** largest gap between the episode's sampled log-probs and `dir`'s own log-probs of the same tokens */
  const gap = async (e: EvalEpisodeRecord, dir: string) => {
    const l = await Learner.load(dir, { threads: 1 });
    try {
      const s = e.stream!;
      const lp = await l.logprobs({ ids: Int32Array.from(s.ids), offsets: Int32Array.from([0, s.ids.length]) });
      return Math.max(...s.mask.map((m, i) => (m ? Math.abs(lp[i]! - s.logprobs[i]!) : 0)));
    } finally {
      l.close();
    }
  };
  const small = { tasksFile: TASKS_FILE, tasks: [tasks[2]!.instance_id], maxSteps: 1, responseBudget: 8, maxTokensPerTurn: 8, store: { url: storeUrl() } };
  const latest = await evaluate('eval-latest', { ...small, model: { run: 'r-latest', checkpoint: 'latest' } });
  assert.deepEqual(latest.summary.episodes, { planned: 1, completed: 1, resolved: 0, errors: 0 });
  const [el] = await readEvalEpisodes(store, 'eval-latest');
  assert.equal(el!.checkpoint, 2);
  assert.equal(el!.api, 'completions');
  assert.ok(el!.stream!.mask.some((m) => m === 1));
  // the tokens were sampled (temperature 1) from checkpoint 2's weights, not checkpoint 0's
  assert.ok((await gap(el!, store.dirFor(keys.checkpoint('r-latest', 2)))) < 1e-3);
  assert.ok((await gap(el!, store.dirFor(keys.checkpoint('r-latest', 0)))) > 1e-2);

  const hf = await evaluate('eval-hf-dir', { ...small, model: { path: hfDir } });
  assert.deepEqual(hf.summary.episodes, { planned: 1, completed: 1, resolved: 0, errors: 0 });
  const [eh] = await readEvalEpisodes(store, 'eval-hf-dir');
  assert.equal(eh!.modelName, hfDir);
  assert.ok((await gap(eh!, hfDir)) < 1e-3);
  assert.ok((await gap(eh!, store.dirFor(keys.checkpoint('r-latest', 2)))) > 1e-2);
});
