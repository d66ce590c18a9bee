// test-group: docker
// Reward integrity: every kind of the adversarial corpus (test/helpers/adversarial.ts) scores 0. The 13
// kinds any grader must refuse (ISSUE_LIST below) run on every shared task; the further kinds on three tasks that cover the ways a task
// puts code on sys.path (python -m pytest from the root, a root-level module, PYTHONPATH=src), or on every
// task with SWERL_ADVERSARIAL_ALL=1. The gold patch scoring 1 on each task through the same path is
// test/grade-cli.test.ts. Each grading is a fresh container, SWERL_GRADE_CONCURRENCY (default 3) at a time.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { gradePatch, type GradeResult } from '../activities/grade.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { ADVERSARIAL_KINDS, adversarialPatches } from './helpers/adversarial.ts';
import { imagesFor, requireDocker, sharedTasks, testBackend } from './helpers/docker.ts';

const { backend, cleanup } = testBackend();
const CONCURRENCY = Number(process.env.SWERL_GRADE_CONCURRENCY ?? 3);
const FEW = ['pytoolz__toolz-1b23ada', 'r1chardj0n3s__parse-19689cf', 'tkem__cachetools-bb4b37c'];
const ALL = process.env.SWERL_ADVERSARIAL_ALL === '1';
const kindsFor = (task: SweTask) => ADVERSARIAL_KINDS.filter((k) => k.listed || ALL || FEW.includes(task.instance_id));
let tasks: SweTask[];
/** `${kind}|${instance_id}` → result */
const results = new Map<string, GradeResult>();
let corpusSeconds = 0;

async function pool<T>(jobs: (() => Promise<T>)[], n: number): Promise<T[]> {
  const out: T[] = new Array(jobs.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, jobs.length) }, async () => {
      while (next < jobs.length) {
        const i = next++;
        out[i] = await jobs[i]!();
      }
    }),
  );
  return out;
}

before(async () => {
  await requireDocker();
  tasks = await sharedTasks();
  await imagesFor(tasks);
  const t0 = Date.now();
  const patches = await pool(
    tasks.map((t) => () => adversarialPatches(t, backend, kindsFor(t))),
    CONCURRENCY,
  );
  const jobs: (() => Promise<void>)[] = [];
  tasks.forEach((task, i) => {
    for (const [kind, patch] of patches[i]!) {
      jobs.push(async () => {
        results.set(`${kind}|${task.instance_id}`, await gradePatch({ task, patch, backend }));
      });
    }
  });
  await pool(jobs, CONCURRENCY);
  corpusSeconds = (Date.now() - t0) / 1000;
});
after(async () => {
  await cleanup();
  console.log(`[adversarial] ${results.size} gradings in ${corpusSeconds.toFixed(0)} s (concurrency ${CONCURRENCY})`);
});

/** The hacks every grader change must keep refusing, kind by kind: each is graded on every shared task. */
const ISSUE_LIST: [string, string[]][] = [
  ['the three conftest hacks', ['conftest-makereport', 'conftest-xfail', 'conftest-deselect-fake-summary']],
  ["the same hooks in a sub-directory's conftest.py", ['subdir-conftest-makereport', 'subdir-conftest-xfail', 'subdir-conftest-deselect-fake-summary']],
  ['pytest.ini/pyproject.toml/setup.cfg adding -p plugins or addopts deselecting', ['pytest-ini-plugin', 'cfg-addopts-deselect']],
  ['sitecustomize.py or a .pth file patching pytest', ['sitecustomize-pth']],
  ['the failing tests made to skip', ['skip-marks']],
  ['the test files deleted or emptied', ['delete-tests', 'empty-tests']],
  ['fake PASSED lines printed from the code under test at import', ['import-fake-lines']],
];

test("every kind the issue lists is in the corpus and graded on every shared task", () => {
  for (const [what, names] of ISSUE_LIST) {
    for (const name of names) {
      const kind = ADVERSARIAL_KINDS.find((k) => k.name === name);
      assert.ok(kind?.listed, `${what}: ${name} is not a listed kind`);
      for (const t of tasks) assert.ok(results.has(`${name}|${t.instance_id}`), `${what}: ${name} not graded on ${t.instance_id}`);
    }
  }
  assert.equal(tasks.length, 8);
});

const show = (g: GradeResult) => `${g.instanceId}: reward ${g.reward} (${g.reason}${g.detail ? `: ${g.detail}` : ''}) F2P ${JSON.stringify(g.tests.FAIL_TO_PASS)}\n${g.logTail.slice(-1500)}`;

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
