// Log parsers on hand-written samples of each format and on real pytest output from a task container.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parsePytestLog, parseSympyLog, parseTestLog, parseUnittestLog } from '../lib/swe/testlog.ts';
import { imagesFor, requireDocker, sharedTask, testBackend } from './helpers/docker.ts';

test('pytest -rA short summary', () => {
  const log = [
    '============================= test session starts ==============================',
    'tests/test_a.py ..F.sx                                                    [100%]',
    '=========================== short test summary info ============================',
    'PASSED tests/test_a.py::TestX::test_one',
    'PASSED tests/test_a.py::test_param[a - b]',
    'FAILED tests/test_a.py::TestX::test_two - AssertionError: assert 1 == 2',
    'ERROR tests/test_a.py::test_fixture - RuntimeError: boom',
    'SKIPPED [1] tests/test_a.py:40: needs network',
    'XFAIL tests/test_a.py::test_known - reason: bug 12',
    '\x1b[32mPASSED\x1b[0m tests/test_a.py::test_colour',
    '=================== 1 failed, 3 passed, 1 skipped, 1 xfailed ===================',
  ].join('\n');
  const m = parsePytestLog(log);
  assert.equal(m.get('tests/test_a.py::TestX::test_one'), 'PASSED');
  assert.equal(m.get('tests/test_a.py::test_param[a - b]'), 'PASSED');
  assert.equal(m.get('tests/test_a.py::TestX::test_two'), 'FAILED');
  assert.equal(m.get('tests/test_a.py::test_fixture'), 'ERROR');
  assert.equal(m.get('tests/test_a.py::test_known'), 'XFAIL');
  assert.equal(m.get('tests/test_a.py::test_colour'), 'PASSED');
  assert.equal(m.size, 6);
});

test('pytest: a teardown ERROR after PASSED wins; -v progress lines parse', () => {
  const m = parsePytestLog('t.py::test_a PASSED  [ 50%]\nt.py::test_b FAILED  [100%]\nPASSED t.py::test_a\nERROR t.py::test_a - teardown\n');
  assert.equal(m.get('t.py::test_a'), 'ERROR');
  assert.equal(m.get('t.py::test_b'), 'FAILED');
});

test('unittest verbose (old and 3.11+ ids, docstring lines)', () => {
  const log = [
    'test_add (tests.test_math.MathTest) ... ok',
    'test_sub (tests.test_math.MathTest.test_sub) ... FAIL',
    'test_div (tests.test_math.MathTest)',
    'Division by zero raises. ... ERROR',
    "test_net (tests.test_math.MathTest) ... skipped 'offline'",
    'test_xf (tests.test_math.MathTest) ... expected failure',
    '',
    '----------------------------------------------------------------------',
    'Ran 5 tests in 0.001s',
  ].join('\n');
  const m = parseUnittestLog(log);
  assert.deepEqual(Object.fromEntries(m), {
    'test_add (tests.test_math.MathTest)': 'PASSED',
    'test_sub (tests.test_math.MathTest)': 'FAILED',
    'test_div (tests.test_math.MathTest)': 'ERROR',
    'test_net (tests.test_math.MathTest)': 'SKIPPED',
    'test_xf (tests.test_math.MathTest)': 'XFAIL',
  });
});

test('Django runner output', () => {
  const log = [
    'Creating test database for alias \'default\'...',
    'test_get (admin_views.tests.AdminViewBasicTest.test_get) ... ok',
    'test_post (admin_views.tests.AdminViewBasicTest) ... ERROR',
    'System check identified no issues (0 silenced).',
  ].join('\n');
  const m = parseTestLog(log, 'django');
  assert.equal(m.get('test_get (admin_views.tests.AdminViewBasicTest)'), 'PASSED');
  assert.equal(m.get('test_post (admin_views.tests.AdminViewBasicTest)'), 'ERROR');
});

test('sympy bin/test', () => {
  const log = ['sympy/core/tests/test_basic.py[4] ', 'test_equality ok', 'test_matches_basic F', 'test_has E', 'test_slow s', 'test_known f', '', '________ tests finished: 2 passed, 1 failed ________'].join('\n');
  assert.deepEqual(Object.fromEntries(parseSympyLog(log)), {
    test_equality: 'PASSED',
    test_matches_basic: 'FAILED',
    test_has: 'ERROR',
    test_slow: 'SKIPPED',
    test_known: 'XFAIL',
  });
});

test('real pytest -rA output from a task container', async () => {
  await requireDocker();
  const task = await sharedTask('r1chardj0n3s__parse-19689cf');
  const [image] = await imagesFor([task]);
  const { backend, cleanup } = testBackend();
  const sb = await backend.start(image!);
  try {
    await sb.writeFile('/tmp/test.diff', task.test_patch);
    assert.equal((await sb.exec('git apply /tmp/test.diff', 30)).exit, 0);
    const r = await sb.exec(task.test_cmd, 120);
    const m = parseTestLog(r.stdout + r.stderr);
    for (const id of task.FAIL_TO_PASS) assert.equal(m.get(id), 'FAILED', id);
    for (const id of task.PASS_TO_PASS) assert.equal(m.get(id), 'PASSED', id);
    assert.ok(m.size >= task.PASS_TO_PASS.length);
  } finally {
    await sb.stop();
    await cleanup();
  }
});
