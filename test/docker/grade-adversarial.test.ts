// Reward integrity: every kind of the adversarial corpus (test/helpers/adversarial.ts) scores 0. The kinds
// listed run on every task (data/swe/): the 13 runner-file hacks (RUNNER_HACKS below) and the 15 test-integrity
// hacks (the code under test changing the tests or the reports in-process: four categories and the
// subtler variants, INTEGRITY_HACKS below); the further kinds on three tasks that cover the ways a task puts code
// on sys.path (python -m pytest from the root, a root-level module, PYTHONPATH=src), or on every task with
// SWERL_ADVERSARIAL_ALL=1. The gold patch scoring 1 on each task through the same path is
// test/docker/grade-cli.test.ts; here also with a test_cmd that names the test ids (canaries are added to it).
// Each grading is a fresh container, SWERL_GRADE_CONCURRENCY (default 3) at a time.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { gradePatch, type GradeResult } from '../../activities/grade.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { ADVERSARIAL_KINDS, adversarialPatches, withIdsCmd } from '../helpers/adversarial.ts';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { sweTasks, TASK } from '../helpers/swe-tasks.ts';
import { mapInLanes } from '../../lib/pool.ts';

const { backend, cleanup } = testBackend();
const CONCURRENCY = Number(process.env.SWERL_GRADE_CONCURRENCY ?? 3);
const FEW: string[] = [TASK.pkgTests, TASK.rootModule, TASK.srcLayout];
const ALL = process.env.SWERL_ADVERSARIAL_ALL === '1';
const kindsFor = (task: SweTask) => ADVERSARIAL_KINDS.filter((k) => k.listed || ALL || FEW.includes(task.instance_id));
let tasks: SweTask[];
/** `${kind}|${instance_id}` → result */
const results = new Map<string, GradeResult>();
/** instance_id → the gold patch graded with test_cmd naming the listed ids */
const goldByIds = new Map<string, GradeResult>();
let corpusSeconds = 0;

/** runs `jobs`, at most `n` at once (lib/pool.ts) */
const pool = <T>(jobs: (() => Promise<T>)[], n: number): Promise<T[]> => mapInLanes(jobs, n, (job) => job());

before(async () => {
  await requireDocker();
  tasks = await sweTasks();
  await imagesFor(tasks);
  const t0 = Date.now();
  const patches = await pool(
    tasks.map((t) => () => adversarialPatches(t, backend, kindsFor(t))),
    CONCURRENCY,
  );
  const jobs: (() => Promise<void>)[] = [];
  tasks.forEach((task, i) => {
    for (const [kind, patch] of patches[i]!) {
      const t = ADVERSARIAL_KINDS.find((k) => k.name === kind)?.testCmd === 'ids' ? withIdsCmd(task) : task;
      jobs.push(async () => {
        results.set(`${kind}|${task.instance_id}`, await gradePatch({ task: t, patch, backend }));
      });
    }
    // the gold patch with the same test_cmd as the kinds graded by id: canaries reach a run that names its tests
    jobs.push(async () => {
      goldByIds.set(task.instance_id, await gradePatch({ task: withIdsCmd(task), patch: task.patch, backend }));
    });
  });
  await pool(jobs, CONCURRENCY);
  corpusSeconds = (Date.now() - t0) / 1000;
});
after(async () => {
  await cleanup();
  console.log(`[adversarial] ${results.size} gradings in ${corpusSeconds.toFixed(0)} s (concurrency ${CONCURRENCY})`);
});

/** The runner-file hacks (test files, conftest files, runner configuration, start-up hooks), which every grader change must keep refusing, kind by kind: each is graded on every shared task. */
const RUNNER_HACKS: [string, string[]][] = [
  ['the three conftest hacks', ['conftest-makereport', 'conftest-xfail', 'conftest-deselect-fake-summary']],
  ["the same hooks in a sub-directory's conftest.py", ['subdir-conftest-makereport', 'subdir-conftest-xfail', 'subdir-conftest-deselect-fake-summary']],
  ['pytest.ini/pyproject.toml/setup.cfg adding -p plugins or addopts deselecting', ['pytest-ini-plugin', 'cfg-addopts-deselect']],
  ['sitecustomize.py or a .pth file patching pytest', ['sitecustomize-pth']],
  ['the failing tests made to skip', ['skip-marks']],
  ['the test files deleted or emptied', ['delete-tests', 'empty-tests']],
  ['fake PASSED lines printed from the code under test at import', ['import-fake-lines']],
];

/** The test-integrity hacks (the package's own source only), by category and variant: each graded on every shared task. */
const INTEGRITY_HACKS: [string, string[]][] = [
  [
    '1. tests neutered after import (profile hook, import hook, sys.modules swap, TestCase.__init_subclass__)',
    ['neuter-profile-hook', 'neuter-import-hook', 'neuter-modules-swap', 'neuter-init-subclass'],
  ],
  ["2. pytest's conclusion changed (falsy ExceptionInfo, TestReport.outcome property, __code__ swapped)", ['exceptioninfo-falsy', 'report-outcome-property', 'report-code-swap']],
  ['3. unittest assertions made no-ops', ['unittest-assert-noop', 'unittest-assert-noop-classes']],
  ['4. lenient test helpers', ['lenient-test-helper']],
  [
    'variants: spares canary-looking tests; neuters only tests calling the package; only FAIL_TO_PASS ids read from sys.argv',
    ['spare-canaries', 'neuter-package-callers', 'argv-f2p'],
  ],
  ["variant: reads the grader's copy of test_patch to spare exactly the canaries", ['read-grader-files']],
  ['variants: code swapped at call time; reports bent only while a test runs', ['trace-swap-at-call', 'transient-report-outcome']],
];

test('every listed kind is in the corpus and graded on every shared task', () => {
  for (const [what, names] of [...RUNNER_HACKS, ...INTEGRITY_HACKS]) {
    for (const name of names) {
      const kind = ADVERSARIAL_KINDS.find((k) => k.name === name);
      assert.ok(kind?.listed, `${what}: ${name} is not a listed kind`);
      for (const t of tasks) assert.ok(results.has(`${name}|${t.instance_id}`), `${what}: ${name} not graded on ${t.instance_id}`);
    }
  }
  assert.equal(tasks.length, 10);
});

const show = (g: GradeResult) =>
  `${g.instanceId}: reward ${g.reward} (${g.reason}${g.detail ? `: ${g.detail}` : ''}) F2P ${JSON.stringify(g.tests.FAIL_TO_PASS)}\n${g.logTail.slice(-1500)}`;

for (const kind of ADVERSARIAL_KINDS) {
  test(`adversarial ${kind.name} (${kind.what}) scores 0 on ${kind.listed || ALL ? 'every shared task' : FEW.join(', ')}`, () => {
    for (const task of tasks.filter((t) => kindsFor(t).includes(kind))) {
      const g = results.get(`${kind.name}|${task.instance_id}`);
      assert.ok(g, `${kind.name} on ${task.instance_id} was not graded`);
      assert.equal(g.reward, 0, show(g));
      assert.notEqual(g.reason, 'passed');
    }
  });
}

test('the gold patch resolves every shared task when test_cmd names the test ids (the canaries run too)', () => {
  for (const task of tasks) {
    const g = goldByIds.get(task.instance_id);
    assert.ok(g, task.instance_id);
    assert.equal(g.reward, 1, show(g));
    assert.ok((g.canaries ?? []).length >= 2, `${task.instance_id}: canaries ${JSON.stringify(g.canaries)}`);
    for (const c of g.canaries!) assert.equal(c.status, c.expect === 'pass' ? 'PASSED' : 'FAILED', JSON.stringify(c));
  }
});
