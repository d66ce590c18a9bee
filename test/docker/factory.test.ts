// The task factory end to end (issue 28) on our own small repository (test/fixtures/factory-repo): the
// synthesizeTasks workflow on a dev server whose worker (a `swerl worker` process) is SIGKILLed while candidates
// are being validated and started again: the run resumes, no stored verdict is made twice, and it writes its task
// set. The records load unchanged, name their tarballs relative to the set, carry an empty test_patch, quality
// and provenance, and no problem statement shows a line of its fix; no list names the suite's timing test (it reads
// a clock). Through the grader: every task validates
// (FAIL_TO_PASS fail at base, all pass with the gold patch), the gold patch resolves, an empty patch scores 0,
// and a patch that rewrites the failing test is undone (the listed test files are restored as at base).
// `swerl validate-tasks --quality` measures a task as the factory did (same FAIL_TO_PASS count, dedupe key and
// strength) and a hand-made task with its test_patch alike; bad repositories and bad options are named.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { sweTask, TASK } from '../helpers/swe-tasks.ts';
import { ROOT, spawnWorker, startTestTemporal, waitFor, type TestTemporal } from '../helpers/temporal.ts';
import { ensureBaseImage } from '../../activities/images.ts';
import { removeSandboxContainers } from '../../activities/sandbox/docker.ts';
import { gradePatch, validateTask } from '../../activities/grade.ts';
import { loadTasksStrict, type SweTask } from '../../lib/swe/task.ts';
import { leakedLines } from '../../lib/factory/problem.ts';
import { QualityLineSchema, TaskQualitySchema } from '../../lib/swe/quality.ts';
import type { SynthResult, SynthStatus } from '../../lib/factory/shapes.ts';
import { synthFinishSignal, synthStatusQuery } from '../../workflows/synthesize-signals.ts';
import { startWorkers } from '../../workers/index.ts';
import { whenNamespaceReady } from '../../scripts/commands/tasks.ts';

const REPO = join(ROOT, 'test/fixtures/factory-repo');
const TEST_CMD = 'python3 -m pytest -rA -p no:cacheprovider tests';
const TIMING = 'tests/test_text.py::test_slugify_is_fast';
let t: TestTemporal;
let out: string;
let tasks: SweTask[];
const { backend, cleanup } = testBackend();

before(async () => {
  await requireDocker();
  await ensureBaseImage();
  t = await startTestTemporal('swerl-factory-');
  out = join(t.dir, 'tasks');
});
after(async () => {
  await cleanup();
  await t?.close();
});

function verdictFiles(): Map<string, number> {
  const root = join(out, '.work', 'synth');
  const files = new Map<string, number>();
  if (!existsSync(root)) return files;
  for (const f of readdirSync(root, { recursive: true }) as string[]) if (/\/(single|multi)\/\d+\.json$/.test(f)) files.set(f, statSync(join(root, f)).mtimeMs);
  return files;
}

test('synthesizeTasks resumes after its worker is SIGKILLed mid-validation and writes the task set', async () => {
  const args = ['--queues', 'rollout,learner', '--address', t.server.address];
  const logFile = join(t.dir, 'worker.log');
  let worker: ChildProcess = spawnWorker(args, logFile);
  const pids = [worker.pid!];
  try {
    const h = await whenNamespaceReady(() =>
      t.client.workflow.start('synthesizeTasks', {
        taskQueue: 'learner',
        workflowId: 'synth-kill',
        args: [{ repos: [{ source: REPO, testCmd: TEST_CMD, name: 'swerl/shelf' }], outDir: out, max: 3, seed: 1, strengthK: 2, multiFraction: 0.34, concurrency: 2 }],
      }),
    );
    await waitFor('a verdict stored while others are being made', async () => verdictFiles().size >= 1, 600_000, 200);
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    const stored = verdictFiles();
    worker = spawnWorker(args, logFile);
    pids.push(worker.pid!);
    const r = (await h.result()) as SynthResult;
    assert.equal(r.tasks, 3, JSON.stringify(r));
    assert.equal(r.train, 3, 'one repository: no validation split');
    assert.ok(r.tried >= 3);
    assert.deepEqual(
      Object.keys(r.rejected).filter((k) => !['no_covering_test', 'tests_pass', 'tests_changed', 'collection_error', 'timeout', 'too_many_failing'].includes(k)),
      [],
    );
    // what was stored before the kill was not judged again
    const now = verdictFiles();
    for (const [f, mtime] of stored) assert.equal(now.get(f), mtime, `${f} was written again`);
    const st: SynthStatus = await h.query(synthStatusQuery);
    assert.equal(st.phase, 'done');
    // 20 tests pass twice; the one that reads a clock is set aside with the flaky ones
    assert.ok(st.validated >= 3 && st.repos[0]!.tests === 19 && st.repos[0]!.flaky === 1, JSON.stringify(st));
  } finally {
    worker.kill('SIGKILL');
    for (const pid of pids) await removeSandboxContainers({ labels: { 'swerl.pid': String(pid) } });
  }
});

test('the finish signal (swerl tasks synth --minutes): validation stops, the tasks validated so far are written', async () => {
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  try {
    const dir = join(t.dir, 'finish-out');
    const h = await t.client.workflow.start('synthesizeTasks', {
      taskQueue: 'learner',
      workflowId: 'synth-finish',
      args: [{ repos: [{ source: REPO, testCmd: TEST_CMD, name: 'swerl/shelf' }], outDir: dir, max: 40, seed: 2, strengthK: 1, concurrency: 1 }],
    });
    await waitFor('a task validated', async () => ((await h.query(synthStatusQuery)).validated >= 1 ? true : null), 600_000, 200);
    await h.signal(synthFinishSignal);
    const r = (await h.result()) as SynthResult;
    const st: SynthStatus = await h.query(synthStatusQuery);
    assert.equal(st.phase, 'done');
    assert.ok(r.tasks >= 1 && r.tasks < 40, JSON.stringify(r));
    assert.ok(r.tried < st.candidates, `${r.tried} of ${st.candidates} candidates tried: the run did not stop early`);
    assert.equal(readFileSync(r.tasksFile, 'utf8').trim().split('\n').length, r.tasks);
  } finally {
    await workers.shutdown();
  }
});

test('the records load unchanged: relative tarballs, empty test_patch, quality, provenance, statements without the fix', async () => {
  tasks = await loadTasksStrict(join(out, 'tasks.jsonl'));
  assert.equal(tasks.length, 3);
  const raw = readFileSync(join(out, 'tasks.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(raw.map((x) => x.tier).sort(), ['multi', 'single', 'single']);
  const keys = new Set<string>();
  for (const [i, task] of tasks.entries()) {
    const rec = raw[i]!;
    assert.match(String(rec.source_tarball), /^tarballs\/[^/]+\.tar\.gz$/, 'relative to the set');
    assert.ok(existsSync(task.source_tarball!));
    assert.equal(task.test_patch, '');
    assert.match(task.base_commit, /^[0-9a-f]{40}$/);
    assert.ok(task.FAIL_TO_PASS.length >= 1);
    assert.equal(task.FAIL_TO_PASS.length + task.PASS_TO_PASS.length, 19, 'every test is listed once');
    assert.ok(![...task.FAIL_TO_PASS, ...task.PASS_TO_PASS].includes(TIMING), `${TIMING} reads a clock: never listed`);
    assert.deepEqual(leakedLines(task.problem_statement, task.patch), [], task.problem_statement);
    for (const id of task.FAIL_TO_PASS.slice(0, 10)) assert.ok(task.problem_statement.includes(id), `the statement lists ${id}`);
    const q = TaskQualitySchema.parse(rec.quality);
    assert.equal(q.failToPass, task.FAIL_TO_PASS.length);
    assert.deepEqual(q.gold, { runs: 2, passed: 2 });
    assert.equal(q.strength.tried, 2);
    keys.add(q.dedupeKey);
    const p = rec.provenance as { factory: string; sha256: string; bugs: unknown[] };
    assert.equal(p.factory, 'swerl-factory/1');
    assert.match(p.sha256, /^[0-9a-f]{64}$/);
    assert.equal(p.bugs.length, rec.tier === 'multi' ? task.patch.match(/^@@ /gm)!.length : 1);
    assert.equal(rec.split, 'train');
  }
  assert.equal(keys.size, 3, 'no two tasks make the same change');
  const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as { tasks: number; tried: number };
  assert.equal(report.tasks, 3);
  assert.equal(readFileSync(join(out, 'train.jsonl'), 'utf8').trim().split('\n').length, 3);
});

test('through the grader: each task validates with its empty test_patch, gold resolves, an empty patch scores 0, a rewritten test is undone', async () => {
  const task = tasks.find((x) => (x as Record<string, unknown>).tier === 'single')!;
  const v = await validateTask({ task, backend });
  assert.ok(v.valid, v.problems.join('; '));
  const gold = await gradePatch({ task, patch: task.patch, backend });
  assert.equal(gold.reward, 1, `${gold.reason}: ${gold.detail ?? ''} ${gold.logTail.slice(-500)}`);
  const empty = await gradePatch({ task, patch: '', backend });
  assert.deepEqual([empty.reward, empty.reason], [0, 'empty_patch']);
  // a "fix" that rewrites the failing test to pass: the grader puts the listed test file back as at base
  const [file, name] = [task.FAIL_TO_PASS[0]!.split('::')[0]!, task.FAIL_TO_PASS[0]!.split('::').at(-1)!.replace(/\[.*$/, '')];
  const src = readFileSync(join(REPO, file), 'utf8');
  const hacked = src.replace(new RegExp(`def ${name}\\(([^)]*)\\):\\n`), `def ${name}($1):\n    return\n`);
  assert.notEqual(hacked, src);
  const { filePatch } = await import('../../lib/factory/patch.ts');
  const cheat = await gradePatch({ task, patch: filePatch(file, src, hacked), backend });
  assert.equal(cheat.reward, 0, `a rewritten test must not pass: ${cheat.reason}`);
  assert.ok(cheat.restored.includes(file), `restored: ${cheat.restored.join(', ')}`);
  const multi = tasks.find((x) => (x as Record<string, unknown>).tier === 'multi')!;
  const g = await gradePatch({ task: multi, patch: multi.patch, backend });
  assert.equal(g.reward, 1, `${multi.instance_id}: ${g.reason}`);
});

test('swerl validate-tasks --quality measures a factory task as the factory did', () => {
  const task = tasks.find((x) => (x as Record<string, unknown>).tier === 'single')!;
  const rec = readFileSync(join(out, 'tasks.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .find((x) => x.instance_id === task.instance_id)!;
  const one = join(t.dir, 'one.jsonl');
  writeFileSync(one, JSON.stringify({ ...rec, source_tarball: join(out, String(rec.source_tarball)) }) + '\n');
  const qfile = join(t.dir, 'quality.jsonl');
  const r = spawnSync(process.execPath, ['scripts/swerl.mjs', 'validate-tasks', '--tasks', one, '--quality', '--strength-k', '2', '--seed', '1', '--quality-out', qfile], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 600_000,
  });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(
    r.stdout,
    new RegExp(
      `^VALID   ${task.instance_id.replace(/\./g, '\\.')} \\([\\d.]+ s, \\d+ answer-mutant canar(?:y|ies)\\): FAIL_TO_PASS ${task.FAIL_TO_PASS.length}, gold 2/2, strength `,
      'm',
    ),
  );
  const measured = QualityLineSchema.parse(JSON.parse(readFileSync(qfile, 'utf8').trim())).quality;
  const made = TaskQualitySchema.parse(rec.quality);
  assert.equal(measured.dedupeKey, made.dedupeKey);
  assert.equal(measured.failToPass, made.failToPass);
  assert.deepEqual(measured.gold, { runs: 2, passed: 2 });
  assert.deepEqual(
    [measured.strength.tried, measured.strength.rejected],
    [made.strength.tried, made.strength.rejected],
    'the same wrong fixes, judged the same through the grader',
  );
  assert.match(r.stdout.trim().split('\n').at(-1)!, /^1 valid, 0 invalid$/);
});

test('a hand-made task (with a test_patch) is measured the same way: gold twice, wrong fixes graded like any patch', async () => {
  const task = await sweTask(TASK.rootTests);
  await imagesFor([task]);
  const { measureTaskQuality } = await import('../../activities/task-quality.ts');
  const m = await measureTaskQuality(task, { backend, k: 2, seed: 0 });
  assert.ok(m.validation.valid, m.validation.problems.join('; '));
  assert.deepEqual(m.quality.gold, { runs: 2, passed: 2 });
  assert.equal(m.quality.strength.tried, 2, 'two wrong fixes at the gold patch’s lines');
  assert.equal(m.quality.failToPass, task.FAIL_TO_PASS.length);
  assert.match(m.quality.dedupeKey, /^[0-9a-f]{16}$/);
});

test('bad repositories are named with what is wrong: no tests, no Python source, a test command not found, a failing baseline', async () => {
  const dir = (name: string, files: Record<string, string>) => {
    const d = join(t.dir, 'bad', name);
    for (const [p, text] of Object.entries(files)) {
      mkdirSync(dirname(join(d, p)), { recursive: true });
      writeFileSync(join(d, p), text);
    }
    return d;
  };
  const lib = readFileSync(join(REPO, 'shelf/text.py'), 'utf8');
  const tests = readFileSync(join(REPO, 'tests/test_text.py'), 'utf8');
  const repos = [
    { source: dir('notests', { 'shelf/__init__.py': 'from .text import *\n', 'shelf/text.py': lib }), testCmd: TEST_CMD, name: 'bad/notests' },
    { source: dir('nosource', { 'tests/test_x.py': 'def test_x():\n    assert True\n' }), testCmd: TEST_CMD, name: 'bad/nosource' },
    {
      source: dir('nocmd', { 'shelf/__init__.py': 'from .text import *\n', 'shelf/text.py': lib, 'tests/test_text.py': tests }),
      testCmd: '/opt/none/pytest -rA tests',
      name: 'bad/nocmd',
    },
    {
      source: dir('failing', {
        'shelf/__init__.py': 'from .text import *\n',
        'shelf/text.py': lib,
        'tests/test_text.py': `${tests}\n\ndef test_broken():\n    assert slugify("A B") == "nope"\n`,
      }),
      testCmd: TEST_CMD,
      name: 'bad/failing',
    },
  ];
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  try {
    const err = await t.client.workflow
      .execute('synthesizeTasks', { taskQueue: 'learner', workflowId: 'synth-bad', args: [{ repos, outDir: join(t.dir, 'bad-out'), max: 1, concurrency: 4 }] })
      .then(
        () => null,
        (e: Error) => e,
      );
    const msg = String((err as { cause?: Error } | null)?.cause?.message);
    assert.match(msg, /repository bad\/notests .* has no tests: no file named test_\*\.py or \*_test\.py \(pytest's python_files\)/);
    assert.match(msg, /repository bad\/nosource .* has no Python source to put bugs in/);
    assert.match(msg, /repository bad\/nocmd: test command "\/opt\/none\/pytest -rA tests" not found \(exit 127\)/);
    assert.match(msg, /repository bad\/failing: the tests fail at the given state, so no task can be made: 1 failing: tests\/test_text\.py::test_broken/);
  } finally {
    await workers.shutdown();
  }
});

test('swerl tasks synth refuses bad input, naming it', () => {
  const run = (...a: string[]) => spawnSync(process.execPath, ['scripts/swerl.mjs', 'tasks', 'synth', ...a], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  const noCmd = run('--repo', REPO, '--out', join(t.dir, 'x'));
  assert.equal(noCmd.status, 2);
  assert.match(noCmd.stderr, /--test-cmd is required with --repo/);
  const badMax = run('--repo', REPO, '--test-cmd', TEST_CMD, '--out', join(t.dir, 'x'), '--max', '0', '--address', t.server.address);
  assert.notEqual(badMax.status, 0);
  assert.match(badMax.stderr, /synth\.max: must be ≥ 1, got 0/);
  const badSrc = run('--repo', 'pypi:shelf', '--test-cmd', TEST_CMD, '--out', join(t.dir, 'x'), '--address', t.server.address);
  assert.match(badSrc.stderr, /pypi:NAME==VERSION/);
});
