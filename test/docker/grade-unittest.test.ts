// Test integrity under unittest's own runner (`python3 -m unittest -v`, the machinery Django's runner uses
// too): two tasks whose tests are unittest.TestCase classes (a src/ layout, a root-level module), run without
// pytest (ids in unittest's format). The gold patch resolves with its canaries run and back as they must; the
// in-process kinds of the adversarial corpus that apply to unittest score 0 (each of them scores 1 against the
// log alone: bench/grade.ts --corpus shows the pytest side of that, tmp trials showed it here).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { gradePatch, type GradeResult } from '../../activities/grade.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { ADVERSARIAL_KINDS, adversarialPatches, withUnittestCmd } from '../helpers/adversarial.ts';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { sweTask, TASK } from '../helpers/swe-tasks.ts';

const { backend, cleanup } = testBackend();
const TASKS = [TASK.srcLayout, TASK.rootModule];
const KINDS = [
  'neuter-profile-hook',
  'neuter-init-subclass',
  'unittest-assert-noop',
  'unittest-assert-noop-classes',
  'spare-canaries',
  'neuter-package-callers',
  'trace-swap-at-call',
];
const CONCURRENCY = Number(process.env.SWERL_GRADE_CONCURRENCY ?? 3);
let tasks: SweTask[];
const results = new Map<string, GradeResult>();

before(async () => {
  await requireDocker();
  tasks = await Promise.all(TASKS.map((t) => sweTask(t)));
  await imagesFor(tasks);
  const jobs: (() => Promise<void>)[] = [];
  for (const t of tasks) {
    const ut = withUnittestCmd(t);
    jobs.push(async () => void results.set(`gold|${t.instance_id}`, await gradePatch({ task: ut, patch: t.patch, backend })));
    const patches = await adversarialPatches(
      t,
      backend,
      ADVERSARIAL_KINDS.filter((k) => KINDS.includes(k.name)),
    );
    for (const [kind, patch] of patches) jobs.push(async () => void results.set(`${kind}|${t.instance_id}`, await gradePatch({ task: ut, patch, backend })));
  }
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < jobs.length) await jobs[next++]!();
    }),
  );
});
after(async () => {
  await cleanup();
});

const show = (g: GradeResult) =>
  `${g.instanceId}: reward ${g.reward} (${g.reason}${g.detail ? `: ${g.detail}` : ''}) F2P ${JSON.stringify(g.tests.FAIL_TO_PASS)}\n${g.logTail.slice(-1500)}`;

test('unittest runner: the gold patch resolves, read from the log, with the plugin loaded in the test process and the canaries back as they must', () => {
  for (const t of tasks) {
    const g = results.get(`gold|${t.instance_id}`)!;
    assert.equal(g.reward, 1, show(g));
    assert.equal(g.channel, 'log');
    assert.equal(g.detail, undefined, 'the integrity checks loaded (no note that they did not)');
    assert.ok((g.canaries ?? []).length >= 2, JSON.stringify(g.canaries));
    for (const c of g.canaries!) {
      assert.match(c.id, /^test_\w+ \([\w.]+\.test_\w+\)$/, "in unittest's own format");
      assert.equal(c.status, c.expect === 'pass' ? 'PASSED' : 'FAILED', JSON.stringify(c));
    }
  }
});

for (const kind of KINDS) {
  test(`unittest runner: ${kind} scores 0`, () => {
    for (const t of tasks) {
      const g = results.get(`${kind}|${t.instance_id}`);
      assert.ok(g, `${kind} on ${t.instance_id} was not graded`);
      assert.equal(g.reward, 0, show(g));
    }
  });
}
