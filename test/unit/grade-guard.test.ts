// What the grader restores before the run, and how it reads and doubts the results plugin's records (pure).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { filesOfTestCmd, filesOfTestIds, isRunnerPath, pathsToRestore, type RestoreInput } from '../../lib/swe/runner-guard.ts';
import { pluginRunContradictions, readPluginRecords } from '../../lib/swe/pytest-results.ts';
import { parseNumstatZ, runsPytest } from '../../lib/swe/grade-plan.ts';

/** the contradictions' texts (their rules are checked where they matter) */
const texts = (cs: readonly { text: string }[]) => cs.map((c) => c.text);

test('runner configuration by name, anywhere in the tree', () => {
  for (const p of [
    'conftest.py',
    'a/b/conftest.py',
    'pytest.ini',
    'sub/tox.ini',
    'setup.cfg',
    'pyproject.toml',
    'src/sitecustomize.py',
    'usercustomize.py',
    'sitecustomize/__init__.py',
    'x.pth',
    'src/evil-1.0.dist-info/entry_points.txt',
    'evil.egg-info/entry_points.txt',
    'evil.egg-link',
    'tests/__pycache__/conftest.cpython-311-pytest-7.2.1.pyc',
    'mod.pyc',
    '.pytest_cache/v/cache/lastfailed',
    'tests/runtests.py',
    '.coveragerc',
    'pytest.toml',
  ]) {
    assert.ok(isRunnerPath(p), p);
  }
  for (const p of ['src/pkg/core.py', 'README.md', 'tests/test_x.py', 'setup.py', 'docs/conf.py']) assert.ok(!isRunnerPath(p), p);
});

test('test files: from ids and from test_cmd', () => {
  assert.deepEqual(filesOfTestIds(['tests/t.py::A::b', 'tests/t.py::c[x::y]', 'test_x (m.C)', 'test_y', '../x.py::t']), ['tests/t.py']);
  assert.deepEqual(filesOfTestCmd('PYTHONPATH=src python3 -m pytest -rA tests/test_ttl.py', new Set(['tests/test_ttl.py', 'src/a.py'])), ['tests/test_ttl.py']);
  assert.deepEqual(filesOfTestCmd('./tests/runtests.py --settings=test_sqlite admin_views', new Set(['tests/runtests.py'])), ['tests/runtests.py']);
});

const base = (touched: string[], over: Partial<RestoreInput> = {}): RestoreInput => ({
  touched,
  baseFiles: new Set(['more_itertools/__init__.py', 'more_itertools/more.py', 'tests/test_more.py', 'conftest.py', 'src/cachetools/__init__.py', 'setup.cfg']),
  packageDirsAfterPatch: new Set(['more_itertools', 'src/cachetools']),
  testPatchFiles: ['tests/test_more.py'],
  testIds: ['tests/test_more.py::T::t', 'tests/test_other.py::x'],
  testCmd: 'python3 -m pytest tests/test_more.py',
  externalModules: new Set(['json', 'argparse', 'pytest', '_pytest', 'pluggy', 'more_itertools', 'tests', 'encodings']),
  ...over,
});

test('restore: runner files, tests, and added modules that shadow outside ones', () => {
  const r = pathsToRestore(
    base([
      'more_itertools/more.py', // the fix
      'more_itertools/newmod.py', // a new module of the package
      'more_itertools/json.py', // inside a package: more_itertools.json, shadows nothing
      'conftest.py',
      'tests/test_more.py',
      'tests/test_other.py',
      'pytest.py', // shadows pytest from /testbed (sys.path[0] under python -m)
      'argparse.py',
      'src/pluggy/__init__.py', // shadows pluggy under PYTHONPATH=src
      'src/encodings/__init__.py',
      'tests/argparse.py', // tests/ has no __init__.py: rootdir insertion
      'newdir/helper.py',
      'setup.cfg',
    ]),
  );
  assert.deepEqual(Object.fromEntries(r), {
    'conftest.py': 'runner',
    'tests/test_more.py': 'tests',
    'tests/test_other.py': 'tests',
    'pytest.py': 'shadowing',
    'argparse.py': 'shadowing',
    'src/pluggy/__init__.py': 'shadowing',
    'src/encodings/__init__.py': 'shadowing',
    'tests/argparse.py': 'shadowing',
    'setup.cfg': 'runner',
  });
});

test('restore: a package dir whose __init__.py the patch deleted becomes a possible sys.path entry', () => {
  const r = pathsToRestore(base(['more_itertools/__init__.py', 'more_itertools/json.py'], { packageDirsAfterPatch: new Set(['src/cachetools']) }));
  assert.equal(r.get('more_itertools/json.py'), 'shadowing');
  assert.equal(r.get('more_itertools/__init__.py'), undefined);
});

test('numstat -z: plain, binary and renamed paths; pytest commands', () => {
  assert.deepEqual(parseNumstatZ('1\t2\ta.py\0-\t-\tb.pyc\0' + '0\t0\t\0old name.py\0new\tname.py\0'), ['a.py', 'b.pyc', 'old name.py', 'new\tname.py']);
  assert.ok(runsPytest('python3 -m pytest -rA x'));
  assert.ok(runsPytest('PYTHONPATH=src pytest'));
  assert.ok(runsPytest('cd a && py.test -x'));
  assert.ok(!runsPytest('./tests/runtests.py --verbosity 2'));
  assert.ok(!runsPytest('bin/test -C --verbose sympy/core/tests/test_pytest_compat.py'));
});

const rec = (o: object) => JSON.stringify(o);
const start = rec({ event: 'start', python: '3.11.2', pytest: '7.2.1', runner_dir: '/usr/lib/python3/dist-packages/_pytest', preloaded: [], pid: 1 });
const finish = (o: object = {}) =>
  rec({
    event: 'finish',
    exitstatus: 1,
    testscollected: 5,
    testsfailed: 1,
    logstart: 5,
    deselected: 0,
    shouldstop: false,
    shouldfail: false,
    changed: [],
    audit: { hookimpls: [{ hook: 'pytest_runtest_makereport', plugin: 'skipping', file: '/usr/lib/python3/dist-packages/_pytest/skipping.py', exists: true }], plugins: [] },
    ...o,
  });
const t = (nodeid: string, when: string, outcome: string, xfail = false) => rec({ event: 'test', nodeid, when, outcome, xfail });

test('plugin records → statuses: call phase, setup errors/skips, xfail/xpass, teardown errors', () => {
  const lines = [
    start,
    t('a', 'setup', 'passed'),
    t('a', 'call', 'passed'),
    t('a', 'teardown', 'passed'),
    t('b', 'setup', 'passed'),
    t('b', 'call', 'failed'),
    t('b', 'teardown', 'passed'),
    t('c', 'setup', 'failed'),
    t('c', 'teardown', 'passed'),
    t('d', 'setup', 'skipped'),
    t('e', 'setup', 'passed'),
    t('e', 'call', 'skipped', true),
    t('f', 'setup', 'passed'),
    t('f', 'call', 'passed', true),
    t('g', 'setup', 'passed'),
    t('g', 'call', 'passed'),
    t('g', 'teardown', 'failed'),
    finish(),
  ];
  const r = readPluginRecords(lines.join('\n'));
  assert.deepEqual(Object.fromEntries(r.statuses), { a: 'PASSED', b: 'FAILED', c: 'ERROR', d: 'SKIPPED', e: 'XFAIL', f: 'XPASS', g: 'ERROR' });
  assert.equal(r.finish?.exitstatus, 1);
  assert.equal(r.badLines, 0);
});

test('plugin run contradictions', () => {
  const ok = readPluginRecords([start, t('a', 'call', 'failed'), finish()].join('\n'));
  assert.deepEqual(texts(pluginRunContradictions({ run: ok, exitCode: 1, patchedFiles: new Set() })), []);
  assert.match(texts(pluginRunContradictions({ run: ok, exitCode: 0, patchedFiles: new Set() })).join(), /exit status 0, but the session ended with 1/);
  const zeroWithFailures = readPluginRecords([start, t('a', 'call', 'failed'), finish({ exitstatus: 0 })].join('\n'));
  assert.match(texts(pluginRunContradictions({ run: zeroWithFailures, exitCode: 0, patchedFiles: new Set() })).join(), /exit status 0 with failed tests/);
  const fewer = readPluginRecords([start, t('a', 'call', 'failed'), finish({ logstart: 2 })].join('\n'));
  assert.match(texts(pluginRunContradictions({ run: fewer, exitCode: 1, patchedFiles: new Set() })).join(), /2 tests started, 5 collected/);
  const hooked = readPluginRecords(
    [
      start,
      t('a', 'call', 'failed'),
      finish({ audit: { hookimpls: [{ hook: 'pytest_runtest_makereport', plugin: 'x', file: '/testbed/src/pkg/core.py', exists: true }], plugins: [] } }),
    ].join('\n'),
  );
  assert.match(
    texts(pluginRunContradictions({ run: hooked, exitCode: 1, patchedFiles: new Set(['/testbed/src/pkg/core.py']) })).join(),
    /implemented in \/testbed\/src\/pkg\/core\.py, which the patch changed/,
  );
  assert.deepEqual(texts(pluginRunContradictions({ run: hooked, exitCode: 1, patchedFiles: new Set() })), []);
  const ghost = readPluginRecords(
    [start, finish({ audit: { hookimpls: [{ hook: 'pytest_runtest_logreport', plugin: 'x', file: '/nowhere.py', exists: false }], plugins: [] } })].join('\n'),
  );
  assert.match(texts(pluginRunContradictions({ run: ghost, exitCode: 1, patchedFiles: new Set() })).join(), /does not exist/);
  const changed = readPluginRecords(
    [start, rec({ event: 'test', nodeid: 'a', when: 'call', outcome: 'passed', xfail: false, changed: ['_pytest.runner:call_and_report'] }), finish()].join('\n'),
  );
  assert.match(texts(pluginRunContradictions({ run: changed, exitCode: 1, patchedFiles: new Set() })).join(), /replaced during the run: _pytest\.runner:call_and_report/);
  const scribbled = readPluginRecords([start, 'PASSED a', finish()].join('\n'));
  assert.match(texts(pluginRunContradictions({ run: scribbled, exitCode: 1, patchedFiles: new Set() })).join(), /1 lines in the results file/);
});
