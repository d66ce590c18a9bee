// Grading in fresh containers of a real task image.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { gradePatch, GradingError, GRADER_VERSION } from '../../activities/grade.ts';
import type { Sandbox, SandboxBackend } from '../../lib/sandbox.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import Docker from 'dockerode';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { sweTask, TASK } from '../helpers/swe-tasks.ts';
import { metricValue } from '../helpers/metrics.ts';
import { decoratedTask } from '../helpers/adversarial.ts';
import { mutantsCacheFile } from '../../activities/canary-mutants.ts';

const { backend, cleanup } = testBackend();
let task: SweTask;

before(async () => {
  await requireDocker();
  // a src/ layout with tests/ of unittest.TestCase classes
  task = await sweTask(TASK.srcLayout);
  await imagesFor([task]);
});
after(async () => {
  await cleanup();
});

describe('gradePatch', () => {
  test('gold patch → 1, every listed test PASSED', async () => {
    const timed = await metricValue('swerl_grading_seconds_count', { reason: 'passed' });
    const g = await gradePatch({ task, patch: task.patch, backend });
    assert.equal(await metricValue('swerl_grading_seconds_count', { reason: 'passed' }), timed + 1, 'the grading is timed for Prometheus');
    assert.equal(g.reward, 1, g.logTail);
    assert.equal(g.reason, 'passed');
    assert.equal(g.resolved, true);
    assert.equal(g.patchApplied, true);
    assert.equal(g.channel, 'pytest-plugin');
    assert.equal(g.graderVersion, GRADER_VERSION);
    // the must-fail canaries (an inverted copy, the answer-mutants of FAIL_TO_PASS tests) fail, every other test passes
    assert.equal(g.exitCode, 1);
    assert.deepEqual(
      g.canaries?.filter((c) => !c.mutant).map((c) => [c.expect, c.status]),
      [
        ['pass', 'PASSED'],
        ['fail', 'FAILED'],
      ],
    );
    const mutants = g.canaries!.filter((c) => c.mutant);
    assert.ok(mutants.length >= 1, JSON.stringify(g.canaries));
    for (const m of mutants) {
      assert.equal(m.status, 'FAILED');
      assert.ok(task.FAIL_TO_PASS.includes(m.source), m.source);
    }
    assert.deepEqual(g.integrity, []);
    assert.deepEqual(Object.keys(g.timings ?? {}), ['start', 'prepare', 'plan', 'run', 'verdict', 'total']);
    for (const id of task.FAIL_TO_PASS) assert.equal(g.tests.FAIL_TO_PASS[id], 'PASSED', id);
    for (const id of task.PASS_TO_PASS) assert.equal(g.tests.PASS_TO_PASS[id], 'PASSED', id);
    assert.ok(g.durationS > 0);
  });

  test('empty patch → 0', async () => {
    const g = await gradePatch({ task, patch: '  \n', backend });
    assert.equal(g.reward, 0);
    assert.equal(g.reason, 'empty_patch');
    assert.equal(g.patchExists, false);
    assert.deepEqual(
      Object.values(g.tests.FAIL_TO_PASS),
      task.FAIL_TO_PASS.map(() => 'MISSING'),
    );
  });

  test('a patch that does not apply → 0, patch_apply_failed', async () => {
    const bad = 'diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1,1 +1,1 @@\n-old\n+new\n';
    const g = await gradePatch({ task, patch: bad, backend });
    assert.equal(g.reward, 0);
    assert.equal(g.reason, 'patch_apply_failed');
    assert.equal(g.patchApplied, false);
    assert.match(g.logTail, /nope\.py/);
  });

  test('a patch that edits the tests to pass → 0 (tests restored before test_patch)', async () => {
    // replace the failing tests' file with a trivially passing one; no source fix
    const testFile = task.FAIL_TO_PASS[0]!.split('::')[0]!;
    const cheat = await cheatPatch(testFile);
    const g = await gradePatch({ task, patch: cheat, backend });
    assert.equal(g.reward, 0, g.logTail);
    assert.equal(g.reason, 'tests_failed');
    assert.ok(task.FAIL_TO_PASS.some((id) => g.tests.FAIL_TO_PASS[id] !== 'PASSED'));
    assert.ok(g.restored.includes(testFile), JSON.stringify(g.restored));
  });

  test('a correct fix that also adds a conftest.py and pytest settings: they are dropped, the fix still resolves', async () => {
    const conftest = 'import pytest\n\n\n@pytest.fixture\ndef cache_size():\n    return 10\n';
    const extra = [
      'diff --git a/tests/conftest.py b/tests/conftest.py',
      'new file mode 100644',
      '--- /dev/null',
      '+++ b/tests/conftest.py',
      `@@ -0,0 +1,${conftest.split('\n').length - 1} @@`,
      ...conftest
        .split('\n')
        .slice(0, -1)
        .map((l) => `+${l}`),
      '',
    ].join('\n');
    const g = await gradePatch({ task, patch: task.patch + extra, backend });
    assert.equal(g.reward, 1, `${g.reason} ${g.detail ?? ''}`);
    assert.deepEqual(g.restored, ['tests/conftest.py']);
  });

  test('a correct fix that also changes an existing conftest.py (a marker registered): the change is dropped, the fix still resolves', async () => {
    // the task's image with a conftest.py committed at its base, as many repositories have one
    const sb = await backend.start((await imagesFor([task]))[0]!);
    const image = `swerl-test-conftest-${process.pid}`;
    try {
      const conftest = 'import pytest\n\n\n@pytest.fixture\ndef maxsize():\n    return 2\n';
      await sb.copyIn([{ path: 'conftest.py', content: conftest }], '/testbed/tests');
      const c = await sb.exec('git add tests/conftest.py && git -c user.name=t -c user.email=t@t commit -qm conftest', 30);
      assert.equal(c.exit, 0, c.stderr);
      await new Docker().getContainer(sb.id).commit({ repo: image, tag: 'latest' });
      const m = await sb.exec(`printf '\\n\\ndef pytest_configure(config):\\n    config.addinivalue_line("markers", "slow: a slow test")\\n' >> tests/conftest.py`, 30);
      assert.equal(m.exit, 0, m.stderr);
      const change = await sb.diff();
      assert.match(change, /addinivalue_line/);
      const g = await gradePatch({ task: { ...task, image: `${image}:latest` }, patch: task.patch + change, backend });
      assert.equal(g.reward, 1, `${g.reason} ${g.detail ?? ''}\n${g.logTail}`);
      assert.deepEqual(g.restored, ['tests/conftest.py']);
    } finally {
      await sb.stop();
      await new Docker()
        .getImage(`${image}:latest`)
        .remove({ force: true })
        .catch(() => undefined);
    }
  });

  test('a gold fix whose tests use wrappers, mocks, fixtures, marks, skips, mixins and generated tests: no contradiction, the canaries as expected', async () => {
    // test/fixtures/grading/test_swerl_quirks.py added by test_patch to a task with its tests in the package, every test in it listed
    const pkg = await sweTask(TASK.pkgTests);
    await imagesFor([pkg]);
    const path = 'keyvals/tests/test_swerl_quirks.py';
    const text = readFileSync(new URL('../fixtures/grading/test_swerl_quirks.py', import.meta.url), 'utf8');
    const lines = text.split('\n').slice(0, -1);
    const add = [
      'diff --git a/' + path + ' b/' + path,
      'new file mode 100644',
      '--- /dev/null',
      `+++ b/${path}`,
      `@@ -0,0 +1,${lines.length} @@`,
      ...lines.map((l) => `+${l}`),
      '',
    ].join('\n');
    const ids = [
      'test_wrapped_by_file_decorator',
      'test_wrapped_without_wraps',
      'test_mock_patch',
      'test_parametrized[a]',
      'test_parametrized[b]',
      'test_fixture',
      'test_marked_by_assignment',
      'test_generated',
      'TestCaseQuirks::test_from_mixin',
      'TestCaseQuirks::test_own_helper',
      'TestCaseQuirks::test_skipped',
      'TestCaseQuirks::test_skipif_false',
      'TestCaseQuirks::test_expected_failure',
      'TestCaseQuirks::test_subtests',
      'TestCaseQuirks::test_last',
      'TestPlainClass::test_method',
      'TestPlainClass::TestNested::test_nested',
      'test_async_unsupported',
    ].map((n) => `${path}::${n}`);
    const quirks: SweTask = { ...pkg, test_patch: pkg.test_patch + add, PASS_TO_PASS: [...pkg.PASS_TO_PASS, ...ids], test_cmd: `${pkg.test_cmd} ${path}` };
    const g = await gradePatch({ task: quirks, patch: pkg.patch, backend });
    const off = Object.entries({ ...g.tests.FAIL_TO_PASS, ...g.tests.PASS_TO_PASS }).filter(([, v]) => v !== 'PASSED');
    assert.equal(g.reward, 1, `${g.reason} ${g.detail ?? ''} ${JSON.stringify(off)}\n${g.logTail}`);
    const want: Record<string, string> = { test_skipped: 'SKIPPED', test_expected_failure: 'XFAIL', test_marked_by_assignment: 'XFAIL', test_async_unsupported: 'SKIPPED' };
    for (const id of ids) assert.equal(g.tests.PASS_TO_PASS[id], want[id.split('::').at(-1)!] ?? 'PASSED', id);
    assert.ok(g.canaries && g.canaries.some((c) => c.source.startsWith(path)), JSON.stringify(g.canaries));
    for (const c of g.canaries!) {
      const src = g.tests.PASS_TO_PASS[c.source] ?? g.tests.FAIL_TO_PASS[c.source];
      if (src === 'PASSED') assert.equal(c.status, c.expect === 'pass' ? 'PASSED' : 'FAILED', JSON.stringify(c));
    }
  });

  test('a test wrapped by a decorator the patch changes: the fix resolves (its own call is recorded through the wrapper); a wrapper that swallows the failure is runner_tampered', async () => {
    // a task with a decorator added to the file its gold patch fixes, and a listed test using it
    const sdist = await sweTask(TASK.sdist);
    await imagesFor([sdist]);
    const made = await decoratedTask(sdist, backend, 'calls');
    const g = await gradePatch({ task: made.task, patch: made.gold, backend });
    assert.equal(g.reward, 1, `${g.reason} ${g.detail ?? ''}\n${g.logTail}`);
    assert.equal(g.tests.PASS_TO_PASS[made.testId], 'PASSED');
    // the same wrapper catching the failure of a test that is wrong
    const bad = await decoratedTask(sdist, backend, 'swallows');
    const h = await gradePatch({ task: bad.task, patch: bad.gold, backend });
    assert.equal(h.reward, 0);
    assert.equal(h.reason, 'runner_tampered', `${h.reason} ${h.detail ?? ''}`);
    assert.match(h.detail ?? '', /test_swerl_decorated: reported passed, but the test's own call raised builtins\.AssertionError inside wrapper/);
    assert.ok(
      h.integrity?.some((f) => f.kind === 'runner_tampered' && f.rule === 'wrapper_swallowed'),
      JSON.stringify(h.integrity),
    );
  });

  test('test_cmd with -x: the run does not stop at the failing canary, every listed test runs', async () => {
    const g = await gradePatch({ task: { ...task, test_cmd: `${task.test_cmd} -x` }, patch: task.patch, backend });
    assert.equal(g.reward, 1, `${g.reason} ${g.detail ?? ''}\n${g.logTail}`);
    assert.ok(g.canaries?.some((c) => c.expect === 'fail' && c.status === 'FAILED'));
    assert.doesNotMatch(g.logTail, /stopping after \d+ failures/);
  });

  test('a test run past the limit → 0, timeout', async () => {
    const slow: SweTask = { ...task, test_cmd: `sleep 30; ${task.test_cmd}` };
    rmSync(mutantsCacheFile(slow), { force: true });
    const g = await gradePatch({ task: slow, patch: task.patch, backend, timeoutS: 2 });
    assert.equal(g.reward, 0);
    assert.equal(g.reason, 'timeout');
    assert.equal(g.exitCode, null);
    // the answer-mutants' gold run had the same limit, and a verification that timed out is not cached
    assert.equal(existsSync(mutantsCacheFile(slow)), false);
  });

  test('a task image that does not exist → GradingError (infrastructure), never a reward', async () => {
    const ghost: SweTask = { ...task, image: 'swerl-no-such-image:missing' };
    await assert.rejects(gradePatch({ task: ghost, patch: task.patch, backend }), (e: unknown) => e instanceof GradingError && e.name === 'GradingError');
  });

  test('a run in which no status can be read (pytest never started) → GradingError, never a reward', async () => {
    const broken: SweTask = { ...task, test_cmd: `python3 -c 'raise SystemExit(3)' && ${task.test_cmd}` };
    await assert.rejects(gradePatch({ task: broken, patch: task.patch, backend }), (e: unknown) => e instanceof GradingError && /results plugin never started/.test(e.message));
  });

  test('a sandbox that dies before the tests run → GradingError', async () => {
    // the real container, stopped under the grader just before test_cmd
    const dying: SandboxBackend = {
      name: 'docker',
      start: async (image, limits, labels) => {
        const sb = await backend.start(image, limits, labels);
        const wrapped: Sandbox = Object.create(sb) as Sandbox;
        wrapped.exec = async (cmd, t, o) => {
          if (cmd.includes(task.test_cmd)) await sb.stop();
          return sb.exec(cmd, t, o);
        };
        return wrapped;
      },
    };
    await assert.rejects(gradePatch({ task, patch: task.patch, backend: dying }), GradingError);
  });
});

/** A diff that turns every test in `file` into `pass` (made in a sandbox so it applies exactly). */
async function cheatPatch(file: string): Promise<string> {
  const sb = await backend.start((await imagesFor([task]))[0]!);
  try {
    const r = await sb.exec(
      `python3 - <<'EOF'\nimport re\np='${file}'\ns=open(p).read()\ns=re.sub(r'(def test_\\w+\\(self[^)]*\\):)', r'\\1\\n        return', s)\nopen(p,'w').write(s)\nEOF`,
      30,
    );
    assert.equal(r.exit, 0, r.stderr);
    const d = await sb.diff();
    assert.match(d, /return/);
    return d;
  } finally {
    await sb.stop();
  }
}
