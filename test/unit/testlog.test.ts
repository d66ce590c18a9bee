// Small pure cases of the log parsers; the parsers are held to real runs in test/unit/testlog-real.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { logFormatOf, parseTestLog, pytestIdAt } from '../../lib/swe/testlog.ts';

test('pytestIdAt: where a node id ends on a summary line', () => {
  const cases: [string, string][] = [
    ['t.py::test_a', 't.py::test_a'],
    ['t.py::test_a - AssertionError: x [1] - y', 't.py::test_a'],
    ['t.py::T::test_b fixed upstream [456]', 't.py::T::test_b'],
    ['t.py::test_p[a b]', 't.py::test_p[a b]'],
    ['t.py::test_p[1 - 2]', 't.py::test_p[1 - 2]'],
    ['t.py::test_p[x]y] - mismatch [x]y]', 't.py::test_p[x]y]'],
    ['t.py::test_p[[nested]] - boom', 't.py::test_p[[nested]]'],
    ['t.py::test_p[c d] - AssertionError: clas...', 't.py::test_p[c d]'],
  ];
  for (const [rest, id] of cases) assert.equal(pytestIdAt(rest), id, rest);
});

test('pytest: a teardown ERROR after PASSED wins; XFAIL and XPASS stay apart', () => {
  const log = [
    '============================= test session starts ==============================',
    '=========================== short test summary info ============================',
    'PASSED t.py::test_a',
    'XFAIL t.py::test_x - reason [1]',
    'XPASS t.py::test_y reason',
    'ERROR t.py::test_a - RuntimeError: teardown',
    '========================= 1 passed, 1 error in 0.01s ==========================',
  ].join('\n');
  assert.deepEqual(Object.fromEntries(parseTestLog(log, 'pytest')), { 't.py::test_a': 'ERROR', 't.py::test_x': 'XFAIL', 't.py::test_y': 'XPASS' });
});

test('logFormatOf: the runner a test command prints for', () => {
  assert.equal(logFormatOf('python3 -m pytest -rA tests/x.py'), 'pytest');
  assert.equal(logFormatOf('./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 admin_views'), 'django');
  assert.equal(logFormatOf("PYTHONWARNINGS='ignore::UserWarning' bin/test -C --verbose sympy/core/tests/test_basic.py"), 'sympy');
  assert.equal(logFormatOf('python -m unittest -v tests.test_x'), 'unittest');
  assert.equal(logFormatOf('make check'), 'auto');
});
