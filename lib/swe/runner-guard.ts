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
//      directories under pytest's rootdir insertion). Modules the repository already had are its code.
// What stays open (the code under test monkeypatching the runner in-process) is handled, as far as it
// is, by the results plugin's audit; see activities/grade.ts.

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

export type RestoreCause = 'runner' | 'tests' | 'shadowing';

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
  for (const p of input.touched) {
    if (isRunnerPath(p)) out.set(p, 'runner');
    else if (tests.has(p)) out.set(p, 'tests');
    else if (!input.baseFiles.has(p) && shadows(p)) out.set(p, 'shadowing');
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
