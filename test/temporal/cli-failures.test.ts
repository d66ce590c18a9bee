// Failed runs read as one line, as a user runs them: `swerl train` and `swerl eval` with their embedded dev server
// and worker, and `swerl grade --backend kubernetes` with no cluster. A retried activity is one warning line; the
// command ends with the workflow ids, the activity and the innermost cause on its last line (or, before any workflow,
// the cause and the fix), exit status 1, and the whole chain in the log file that line names.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../services/temporal-server.ts';
import { modelInit } from '../../scripts/commands/model.ts';
import { ROOT, tinyConfig } from '../helpers/temporal.ts';

/** A made-up task whose image does not exist: a command that reaches a sandbox would fail on it, not on what is tested. */
const TASK = {
  instance_id: 'demo__calc-1',
  repo: 'demo/calc',
  base_commit: '0',
  problem_statement: 'add() subtracts',
  patch: 'diff',
  test_patch: 'diff',
  FAIL_TO_PASS: ['t.py::test_add'],
  PASS_TO_PASS: [],
  test_cmd: 'pytest -rA',
  image: 'swerl-none:0',
};

interface Finished {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** `swerl ARGS` with no TEMPORAL_ADDRESS (embedded server and worker); `onStderrLine` sees each line as it comes. */
function swerl(args: string[], onStderrLine: (line: string) => void = () => undefined, extraEnv: NodeJS.ProcessEnv = {}): { child: ChildProcess; done: Promise<Finished> } {
  const env = { ...process.env, ...extraEnv };
  delete env.TEMPORAL_ADDRESS;
  const child = spawn(process.execPath, ['scripts/swerl.mjs', ...args], { cwd: ROOT, env });
  let stdout = '';
  let stderr = '';
  let partial = '';
  child.stdout!.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr!.on('data', (b: Buffer) => {
    stderr += b.toString();
    const lines = (partial + b.toString()).split('\n');
    partial = lines.pop()!;
    lines.forEach(onStderrLine);
  });
  const done = new Promise<Finished>((res) => child.on('close', (status) => res({ status, stdout, stderr })));
  return { child, done };
}

/** Checks what every failed command shares: exit 1, no stack or crash dump on the terminal, the log named last. */
function assertOneLineFailure(r: Finished, lastLine: RegExp): { last: string; log: string } {
  assert.equal(r.status, 1, `${r.stdout}\n${r.stderr}`);
  const lines = r.stderr.trim().split('\n');
  const last = lines.at(-1)!;
  assert.match(last, lastLine);
  for (const l of lines) assert.doesNotMatch(l, /^\s+at |^Node\.js v|^\s*[}{]\s*$/, `a stack or dump line on the terminal: ${l}`);
  const log = readFileSync(last.match(/\(full failure chain: (\S+)\)$/)![1]!, 'utf8');
  return { last, log };
}

test('swerl train against a policy server that is first down, then serves another model: one line per retried attempt, one last line with the cause', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-cli-fail-'));
  let server: ChildProcess | undefined;
  try {
    const modelDir = join(dir, 'model');
    await modelInit({ out: modelDir, preset: 'frozenlake', seed: 1 });
    const port = await freePort();
    const config = tinyConfig(dir, { iterations: 1, batch: { tasks: 2, samples: 2 }, maxInflightRollouts: 4, policy: { baseUrl: `http://127.0.0.1:${port}`, model: 'policy' } });
    writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    const warnings: string[] = [];
    const run = swerl(['train', '--config', join(dir, 'config.json'), '--out', join(dir, 'out'), '--run-id', 'cli-fail'], (line) => {
      if (!line.startsWith('[warn]')) return;
      warnings.push(line);
      // the first retried sync: the server comes up, serving a model under another name (a real `swerl serve`)
      server ??= spawn(process.execPath, ['scripts/swerl.mjs', 'serve', '--model', modelDir, '--port', String(port), '--name', 'other'], { cwd: ROOT, stdio: 'ignore' });
    });
    const r = await run.done;
    const { log } = assertOneLineFailure(
      r,
      new RegExp(
        `^swerl train: cli-fail > cli-fail-iter-0 > activity syncPolicy failed: PolicyRejected: weight sync to http://127\\.0\\.0\\.1:${port}: ` +
          `policy\\.model "policy" is not a model .* serves \\(GET /v1/models lists \\["other"\\]\\).* \\(full failure chain: .*/out/swerl\\.log\\)$`,
      ),
    );
    assert.ok(warnings.length >= 1, r.stderr);
    const retried = new RegExp(
      `^\\[warn\\] activity syncPolicy \\(workflow cli-fail-iter-0\\) attempt \\d+ failed: PolicyUnavailableError: policy server http://127\\.0\\.0\\.1:${port}/v1/models unavailable`,
    );
    assert.match(warnings[0]!, retried);
    // the log has what the terminal leaves out: each warning in full and the whole chain
    for (const s of ['Activity failed', 'ChildWorkflowFailure', 'ActivityFailure', 'PolicyRejected', 'at syncExternal']) assert.ok(log.includes(s), `${s} in the log`);
  } finally {
    server?.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('swerl eval whose server does not answer fails before its first episode: one line naming the field and the fix', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-cli-fail-'));
  try {
    // a task no sandbox ever sees: the server check comes first
    writeFileSync(join(dir, 'tasks.jsonl'), JSON.stringify(TASK) + '\n');
    const port = await freePort();
    writeFileSync(join(dir, 'eval.json'), JSON.stringify({ tasksFile: join(dir, 'tasks.jsonl'), model: { baseUrl: `http://127.0.0.1:${port}`, model: 'm' }, runs: 1 }));
    const r = await swerl(['eval', '--config', join(dir, 'eval.json'), '--out', join(dir, 'out'), '--eval-id', 'ev-fail']).done;
    const { log } = assertOneLineFailure(
      r,
      new RegExp(
        `^swerl eval: ev-fail > activity prepareEvaluation failed: PolicyUnavailable: config\\.model\\.baseUrl: the server at http://127\\.0\\.0\\.1:${port} does not answer .*; start it, or correct baseUrl \\(full failure chain: .*/out/swerl\\.log\\)$`,
      ),
    );
    assert.ok(log.includes('at checkServer'), 'the stack in the log');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('swerl grade --backend kubernetes with no cluster configured stops before its first task, naming KUBECONFIG, --kubeconfig and swerl cluster up', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-cli-fail-'));
  try {
    // a task no sandbox ever sees: the command must stop before it builds or grades anything
    writeFileSync(join(dir, 'tasks.jsonl'), JSON.stringify(TASK) + '\n');
    const r = await swerl(['grade', '--backend', 'kubernetes', '--tasks', join(dir, 'tasks.jsonl'), '--predictions', 'gold', '--out', join(dir, 'out')], undefined, {
      HOME: dir,
      KUBECONFIG: '',
      KUBERNETES_SERVICE_HOST: '',
    }).done;
    const { last, log } = assertOneLineFailure(r, /^swerl grade: --backend kubernetes: no Kubernetes cluster is configured \(KUBECONFIG is not set.*\(full failure chain: \S+\)$/);
    for (const fix of ['KUBECONFIG', '--kubeconfig', '`swerl cluster up`']) assert.ok(last.includes(fix), `${fix} in ${last}`);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.ok(!existsSync(join(dir, 'out', 'predictions.jsonl')), 'nothing graded');
    assert.match(log, /at loadKubeConfig/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
