// Which paths of an agent's patch are put back to base + test_patch before the grading run (pure).
//
// Threat model: the agent writes any file of /testbed through its patch, and its code runs inside the
// test process. Everything that decides *how* the tests are collected, run or reported must therefore
// be the base commit's (plus test_patch), wherever in the tree the patch added or changed it:
//   1. runner configuration and extension, by name (RUNNER_FILES / RUNNER_SUFFIXES / RUNNER_DIRS):
//      conftest.py (hooks, fixtures, `pytest_plugins`), pytest.ini/.pytest.ini/pytest.toml/tox.ini/setup.cfg/
//      pyproject.toml (addopts, `-p` plugins, python_files, filterwarnings; restored whole: the package is
//      not reinstalled at grading time, so their other sections do not matter there), .coveragerc (coverage
//      plugins), sitecustomize/usercustomize (imported by `site` from any sys.path entry, e.g. PYTHONPATH=src),
//      *.pth (run by `site`), *.dist-info/*.egg-info/*.egg-link (entry points: pytest autoloads `pytest11`
//      plugins found on sys.path, which holds /testbed under `python -m pytest`), __pycache__/*.pyc/*.pyo
//      (unchecked hash-based pycs are loaded without looking at the source), .pytest_cache (--lf/--ff/--sw),
//      runtests.py (Django's and sympy's runners live in the repository);
//   2. the tests: every file test_patch touches, every file a listed pytest id names, the script test_cmd runs;
//   3. modules that load before our results plugin: a file or package the patch *adds* whose top-level
//      name shadows a module from outside /testbed (stdlib, pytest, pluggy, ...) in a directory that can
//      be on sys.path (no __init__.py: /testbed itself under `python -m`, src/ under PYTHONPATH=src, test
//      directories under pytest's rootdir insertion). Modules the repository already had are its code;
//   4. test-support files: every file under a directory named test/, tests/ or testing/ (helpers,
//      harnesses, base classes, package __init__ files the tests import), and every module the listed
//      test files import from the repository's test tree (those directories, and a listed test file's
//      own directory when its name says tests: testsuite/, unit_tests/, ...), unless the task's reference
//      patch changes that file (then it is code under test by the task's own definition).
// What stays open (the code under test changing the tests or the runner in-process) is checked by the
// results plugin (lib/swe/swerl_pytest_results.py); see activities/grade.ts.

const RUNNER_FILES = new Set([
  'conftest.py',
  'pytest.ini',
  '.pytest.ini',
  'pytest.toml',
  '.pytest.toml',
  'tox.ini',
  'setup.cfg',
  'pyproject.toml',
  '.coveragerc',
  'sitecustomize.py',
  'usercustomize.py',
  'runtests.py',
]);
const RUNNER_SUFFIXES = ['.pth', '.pyc', '.pyo', '.egg-link'];
/** a path with one of these as a directory component */
const RUNNER_DIRS = [/\.dist-info$/, /\.egg-info$/, /^__pycache__$/, /^\.pytest_cache$/, /^sitecustomize$/, /^usercustomize$/];

export type RestoreCause = 'runner' | 'tests' | 'shadowing' | 'test-support';

/** Directory names whose files are test support, restored whole (rule 4). */
const TEST_DIRS = new Set(['test', 'tests', 'testing']);
/** A listed test file's directory with such a name is part of the test tree too (its imported modules are restored). */
const TESTISH_DIR = /^(tests?|testing|testsuite|test[_-]\w+|\w+[_-]tests?)$/i;

/** Whether a path lies under a test/, tests/ or testing/ directory (rule 4, by name). */
export function isTestSupportPath(path: string): boolean {
  return path
    .split('/')
    .slice(0, -1)
    .some((d) => TEST_DIRS.has(d));
}

/** Whether a path configures or extends the test runner by its name alone (rule 1). */
export function isRunnerPath(path: string): boolean {
  const parts = path.split('/');
  const base = parts.at(-1)!;
  if (RUNNER_FILES.has(base)) return true;
  if (RUNNER_SUFFIXES.some((s) => base.endsWith(s))) return true;
  return parts.some((p) => RUNNER_DIRS.some((re) => re.test(p)));
}

/** Files a listed pytest id names (`path/to/test_x.py::T::t` → `path/to/test_x.py`). Other runners' ids name no file. */
export function filesOfTestIds(ids: readonly string[]): string[] {
  const out = new Set<string>();
  for (const id of ids) {
    const i = id.indexOf('::');
    const f = i >= 0 ? id.slice(0, i) : '';
    if (f.endsWith('.py') && !f.startsWith('/') && !f.split('/').includes('..')) out.add(f);
  }
  return [...out];
}

/** Relative paths in test_cmd that name a file of the repository (the runner script, the test files). */
export function filesOfTestCmd(testCmd: string, baseFiles: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const tok of testCmd.split(/[\s;&|()<>'"=]+/)) {
    const t = tok.replace(/^\.\//, '').split('::')[0]!;
    if (t && baseFiles.has(t) && !out.includes(t)) out.push(t);
  }
  return out;
}

/** The importable top-level name of a directory entry, or undefined (`foo.py`, `foo/`, `foo.cpython-311-x86_64-linux-gnu.so` → foo). */
function moduleName(entry: string, isDir: boolean): string | undefined {
  const name = isDir ? entry : /\.(py|pyw|pyc|so|pyd)$/.test(entry) ? entry.split('.')[0]! : undefined;
  return name !== undefined && /^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? name : undefined;
}

export interface RestoreInput {
  /** paths the agent's patch adds, changes, deletes or renames (both sides), repository-relative */
  touched: readonly string[];
  /** every file of the base commit */
  baseFiles: ReadonlySet<string>;
  /** directories that hold an __init__.py once the patch is applied ('' is /testbed) */
  packageDirsAfterPatch: ReadonlySet<string>;
  /** files test_patch touches */
  testPatchFiles: readonly string[];
  /** FAIL_TO_PASS + PASS_TO_PASS ids */
  testIds: readonly string[];
  testCmd: string;
  /** top-level module names importable from outside /testbed (stdlib, site-packages) */
  externalModules: ReadonlySet<string>;
  /** modules the listed test files import from the test tree (testTreeImports) */
  testImports?: readonly string[];
  /** files the task's reference patch changes: never restored as test support */
  goldFiles?: readonly string[];
}

/** Touched paths to put back to their base state (checkout, or removal when the base lacks them), with why. */
export function pathsToRestore(input: RestoreInput): Map<string, RestoreCause> {
  const out = new Map<string, RestoreCause>();
  const tests = new Set([...input.testPatchFiles, ...filesOfTestIds(input.testIds), ...filesOfTestCmd(input.testCmd, input.baseFiles)]);
  const baseEntries = new Set<string>();
  for (const f of input.baseFiles) {
    const parts = f.split('/');
    for (let i = 1; i <= parts.length; i++) baseEntries.add(parts.slice(0, i).join('/'));
  }
  const gold = new Set(input.goldFiles ?? []);
  const imported = new Set(input.testImports ?? []);
  for (const p of input.touched) {
    if (isRunnerPath(p)) out.set(p, 'runner');
    else if (tests.has(p)) out.set(p, 'tests');
    else if (!input.baseFiles.has(p) && shadows(p)) out.set(p, 'shadowing');
    else if ((isTestSupportPath(p) || imported.has(p)) && !gold.has(p)) out.set(p, 'test-support');
  }
  return out;

  function shadows(p: string): boolean {
    const parts = p.split('/');
    // every ancestor directory without __init__.py may be a sys.path entry; '' is /testbed
    for (let i = 0; i < parts.length; i++) {
      const dir = parts.slice(0, i).join('/');
      if (i > 0 && input.packageDirsAfterPatch.has(dir)) continue;
      const entry = parts[i]!;
      const name = moduleName(entry, i < parts.length - 1);
      if (!name || !input.externalModules.has(name)) continue;
      const at = dir ? `${dir}/${entry}` : entry;
      if (!baseEntries.has(at)) return true;
    }
    return false;
  }
}

/** Module names a Python source imports: [dots (0 for absolute), dotted name, imported names]. Line-based, good enough for test files. */
export function pythonImports(source: string): { level: number; module: string; names: string[] }[] {
  const out: { level: number; module: string; names: string[] }[] = [];
  // join parenthesised and backslash-continued import lines
  const text = source.replace(/\\\n/g, ' ').replace(/\(([^()]*)\)/g, (m, inner: string) => (/\n/.test(inner) ? `(${inner.replace(/\n/g, ' ')})` : m));
  for (const raw of text.split('\n')) {
    const line = raw.replace(/#.*$/, '').trim();
    let m = /^from\s+(\.*)([\w.]*)\s+import\s+\(?([^)]*)\)?$/.exec(line);
    if (m) {
      const names = m[3]!
        .split(',')
        .map((n) =>
          n
            .trim()
            .split(/\s+as\s+/)[0]!
            .trim(),
        )
        .filter((n) => /^\w+$/.test(n));
      out.push({ level: m[1]!.length, module: m[2]!, names });
      continue;
    }
    m = /^import\s+(.+)$/.exec(line);
    if (m)
      for (const part of m[1]!.split(',')) {
        const mod = part
          .trim()
          .split(/\s+as\s+/)[0]!
          .trim();
        if (/^[\w.]+$/.test(mod)) out.push({ level: 0, module: mod, names: [] });
      }
  }
  return out;
}

/** Whether a repository path lies in the test tree: under test/tests/testing, or in a listed test file's test-named directory. */
function inTestTree(path: string, testFileDirs: readonly string[]): boolean {
  if (isTestSupportPath(path)) return true;
  return testFileDirs.some((d) => d !== '' && TESTISH_DIR.test(d.split('/').at(-1)!) && path.startsWith(`${d}/`));
}

/**
 * Repository modules the listed test files import (directly: their import statements, with the
 * packages those imports execute) that lie in the test tree. `testFiles`: path → source (as the run
 * will have it); `repoFiles`: files of the tree the run will have. Resolved the way the runners put
 * directories on sys.path: the repository root, src/, and each test file's directory and its parents.
 */
export function testTreeImports(testFiles: ReadonlyMap<string, string>, repoFiles: ReadonlySet<string>): string[] {
  const dirOf = (p: string) => (p.includes('/') ? p.slice(0, p.lastIndexOf('/')) : '');
  const testDirs = [...testFiles.keys()].map(dirOf);
  const roots = new Set(['', 'src']);
  for (const d of testDirs)
    for (let x = d; ; x = dirOf(x)) {
      roots.add(x);
      if (x === '') break;
    }
  const out = new Set<string>();
  const join = (a: string, b: string) => (a === '' ? b : b === '' ? a : `${a}/${b}`);
  const candidates = (dir: string, dotted: string): string[] => {
    // a.b.c from dir: the packages it executes and the module itself
    const parts = dotted === '' ? [] : dotted.split('.');
    const c: string[] = [];
    for (let i = 1; i <= parts.length; i++) c.push(join(dir, `${parts.slice(0, i).join('/')}/__init__.py`));
    if (parts.length) c.push(join(dir, `${parts.join('/')}.py`));
    else c.push(join(dir, '__init__.py'));
    return c;
  };
  for (const [file, source] of testFiles) {
    for (const imp of pythonImports(source)) {
      const found: string[] = [];
      if (imp.level > 0) {
        let dir = dirOf(file);
        for (let i = 1; i < imp.level; i++) dir = dirOf(dir);
        found.push(...candidates(dir, imp.module));
        for (const n of imp.names) found.push(...candidates(dir, imp.module ? `${imp.module}.${n}` : n));
      } else {
        for (const root of roots) {
          found.push(...candidates(root, imp.module));
          for (const n of imp.names) found.push(...candidates(root, `${imp.module}.${n}`));
        }
      }
      for (const f of found) if (f !== file && repoFiles.has(f) && inTestTree(f, testDirs)) out.add(f);
    }
  }
  return [...out].sort();
}

/**
 * Files unittest-style ids name (`test_x (pkg.mod.Class)`, `test_x (pkg.mod.Class.test_x)`): the longest
 * dotted prefix that is a module file under the root, src/ or tests/ (Django's runner puts tests/ on sys.path).
 */
export function filesOfUnittestIds(ids: readonly string[], repoFiles: ReadonlySet<string>): string[] {
  const out = new Set<string>();
  for (const id of ids) {
    const m = /^\w+ \(([\w.]+)\)/.exec(id);
    if (!m) continue;
    const parts = m[1]!.split('.');
    for (let n = parts.length - 1; n >= 1; n--) {
      const rel = `${parts.slice(0, n).join('/')}.py`;
      const hit = ['', 'src/', 'tests/'].map((r) => r + rel).find((f) => repoFiles.has(f));
      if (hit) {
        out.add(hit);
        break;
      }
    }
  }
  return [...out];
}
