// Reward (DESIGN §3, DeepSWE, today's SWE-bench rules; lib/swe/grading.ts): in a fresh container of the
// task image apply the patch, put back everything that configures or extends the test runner, the tests
// and their support files to base + test_patch (lib/swe/runner-guard.ts), add canary tests to the listed
// test files (lib/swe/canaries.ts), run test_cmd with a 5-minute limit, and read the statuses from a
// channel the agent's code does not write in the normal course:
//   pytest      our results plugin (activities/swerl_pytest_results.py) under a per-run random module
//               name, loaded with `-p` before any conftest or test module, writing to a file descriptor
//               whose file the shell unlinked. Before any repository code runs it removes every file the
//               grader put in the container (test_patch's copy, the plugin, its configuration), compiles
//               the listed test files and their support modules fresh, and snapshots what runs tests and
//               makes reports. Each test of those files is checked before its call (the function called
//               is the one compiled from the file on disk, no trace/profile function, the core of pytest
//               and unittest unchanged) and its call goes through the plugin's wrapper, which records
//               whether the test's own call raised. The grader believes the run only when all of that,
//               the reports, the canaries, the -rA log, the exit status, the number of tests that started,
//               the hooks that could change reports and the snapshots agree (lib/swe/pytest-results.ts);
//   unittest, Django's runner: the log (lib/swe/testlog.ts), cross-checked with the exit status as SWE-bench
//               does, and the same plugin, imported at start-up by its .pth file in the test process only:
//               it wraps unittest.TestCase._callTestMethod and makes the same checks and records, which
//               the log must agree with;
//   sympy (and anything else): the log and the exit status alone; only the restored runner, test and
//               test-support files stand between the agent and the verdict there.
// Residual risk, stated plainly (README "Left open"): the code under test runs in the test process.
// Code written against this grader in particular (find the plugin in memory and patch its checks, or
// forge its records and the log together) can still pass; closing that needs process isolation between
// the tests and the reporter, which a runner that imports the code under test cannot give.
// A run that cannot happen (sandbox, image, the channel never came up) throws GradingError: infrastructure.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Sandbox, SandboxBackend, SandboxLimits } from '../lib/sandbox.ts';
import { filesInPatch, type SweTask } from '../lib/swe/task.ts';
import { logFormatOf, parsePytestLog, parseTestLog } from '../lib/swe/testlog.ts';
import { GRADER_VERSION, GradingError, judgeTests, listedTests, type GradeReason, type GradeResult, type ResultChannel, type TestOutcome } from '../lib/swe/grading.ts';
import { filesOfTestIds, filesOfUnittestIds, pathsToRestore, testTreeImports } from '../lib/swe/runner-guard.ts';
import { integrityContradictions, pluginRunContradictions, readPluginRecords } from '../lib/swe/pytest-results.ts';
import { canariesFor, type Canary, type CanaryFile } from '../lib/swe/canaries.ts';
import { ensureTaskImage } from './images.ts';
import { gradingSeconds } from '../lib/metrics.ts';
import { shq } from '../lib/shell.ts';

export { GRADER_VERSION, GradingError, type GradeReason, type GradeResult, type TestOutcome } from '../lib/swe/grading.ts';
export const GRADE_TIMEOUT_S = 300;
const LOG_TAIL_CHARS = 4000;
/** a tampered run can contradict itself on every test: the first few say enough (the result crosses Temporal) */
const DETAIL_ITEMS = 12;
const DETAIL_CHARS = 4000;

/** Contradictions as one detail string: the first DETAIL_ITEMS, then how many more. */
export function contradictionDetail(items: readonly string[]): string {
  const shown = items.slice(0, DETAIL_ITEMS).map((x) => (x.length > 600 ? `${x.slice(0, 600)}…` : x));
  const more = items.length - shown.length;
  const text = shown.join('; ') + (more > 0 ? `; … and ${more} more` : '');
  return text.length > DETAIL_CHARS ? `${text.slice(0, DETAIL_CHARS)}…` : text;
}
const PLUGIN_SOURCE = readFileSync(new URL('./swerl_pytest_results.py', import.meta.url), 'utf8');
/** the descriptor the test process inherits for the plugin's records */
const RESULTS_FD = 9;

export interface GradeInput {
  task: SweTask;
  /** the agent's patch (`git diff` against the task's base); may be empty */
  patch: string;
  backend: SandboxBackend;
  timeoutS?: number;
  limits?: Partial<SandboxLimits>;
  /** receives the whole test log (the result keeps its tail), e.g. to write the harness's test_output.txt */
  onLog?: (log: string) => void | Promise<void>;
  /**
   * The in-process integrity checks (canaries, the plugin's code checks, call wrapper and snapshots);
   * default true. Off only to measure what they cost (bench/grade.ts): a grading without them is no reward.
   */
  integrity?: boolean;
}

/** Whether test_cmd runs pytest (then the plugin channel is used). */
export function runsPytest(testCmd: string): boolean {
  return /(^|[\s;&|(/])(py\.test|pytest)(\s|$|;)/.test(testCmd);
}

/**
 * The Python process of a unittest-style test_cmd that runs the tests: `python -m MODULE` or a script
 * (Django's tests/runtests.py); undefined when it cannot be told (then the run is read from the log alone).
 */
export function testProcessOf(testCmd: string): { module: string } | { script: string } | undefined {
  const m = /(?:^|[\s;&|(/])python[\d.]*\s+(?:-[A-Za-z]+(?:\s+[^-\s]\S*)?\s+)*?-m\s+([\w.]+)/.exec(testCmd);
  if (m) return { module: m[1]! };
  const s = /(?:^|\s)(\S*runtests\.py)(?=\s|$)/.exec(testCmd) ?? /(?:^|[\s;&|(/])python[\d.]*\s+(?:-[A-Za-z]+\s+)*(\S+\.py)(?=\s|$)/.exec(testCmd);
  return s ? { script: s[1]! } : undefined;
}

/** The .pth line that imports the plugin at start-up in the test process only (unittest-style runs). */
export function startupLine(module: string, proc: { module: string } | { script: string }): string {
  // imported, then no longer findable under its per-run name
  const load = `__import__(${JSON.stringify(module)}) and sys.modules.pop(${JSON.stringify(module)}, None)`;
  if ('module' in proc) {
    // (site execs the line in a function: no comprehension can see its names)
    return `import sys; _a = getattr(sys, 'orig_argv', None); (('\\0-m\\0' + ${JSON.stringify(proc.module)} + '\\0') in ('\\0' + '\\0'.join(_a) + '\\0') if _a else sys.argv[:1] == ['-m']) and ${load}`;
  }
  const base = proc.script.split('/').at(-1)!;
  return `import sys, os; os.path.basename((sys.argv or [''])[0]) == ${JSON.stringify(base)} and ${load}`;
}

/** Files a unittest id may name, under the roots unittest and Django's runner import from (prepare keeps those that exist). */
function unittestIdCandidates(ids: readonly string[]): string[] {
  const out = new Set<string>();
  for (const id of ids) {
    const m = /^\w+ \(([\w.]+)\)/.exec(id);
    if (!m) continue;
    const parts = m[1]!.split('.');
    for (let n = 1; n < parts.length; n++) for (const r of ['', 'src/', 'tests/']) out.add(`${r}${parts.slice(0, n).join('/')}.py`);
  }
  return [...out];
}

/** A unittest id (`name (module.Class)` or `name (module.Class.name)`) as file::Class::name, given its file. */
function unittestAsNodeId(id: string, file: string): string | undefined {
  const m = /^(\w+) \(([\w.]+)\)/.exec(id);
  if (!m) return undefined;
  const parts = m[2]!.split('.');
  const stem = file.replace(/\.py$/, '').split('/');
  // the dotted module is the file's path, from some root on
  for (let k = 0; k < stem.length; k++) {
    const mod = stem.slice(k);
    if (mod.every((p, i) => parts[i] === p)) {
      const rest = parts.slice(mod.length);
      if (rest.length === 1 || (rest.length === 2 && rest[1] === m[1])) return `${file}::${rest[0]}::${m[1]}`;
    }
  }
  return undefined;
}

/** Prints one JSON line per interpreter: its top-level module names from outside /testbed and its site directories. */
const PROBE = [
  'import sys,os,json,site,sysconfig',
  "n=set(sys.builtin_module_names)|set(getattr(sys,'stdlib_module_names',()))",
  'for p in sys.path:',
  " r=os.path.realpath(p or '.')",
  " if r=='/testbed' or r.startswith('/testbed/') or not os.path.isdir(r): continue",
  ' for e in os.listdir(r):',
  "  if e.endswith(('.py','.pyc','.so','.pyd')) or os.path.isdir(os.path.join(r,e)): n.add(e.split('.')[0])",
  "s=list(site.getsitepackages()) if hasattr(site,'getsitepackages') else []",
  "s.append(sysconfig.get_paths()['purelib'])",
  "print(json.dumps({'exe':sys.executable,'names':sorted(x for x in n if x.isidentifier()),'site':s}))",
].join('\n');

interface Prep {
  names: Set<string>;
  siteDirs: string[];
  /** every file of the base commit → its blob id */
  baseBlobs: Map<string, string>;
  baseFiles: Set<string>;
  applied: boolean;
  applyLog: string;
  touched: string[];
  packageInits: Set<string>;
  /** the asked-for files as base + test_patch has them (absent: no such file, or test_patch does not apply) */
  testSources: Map<string, string>;
}

/** `git apply --numstat -z`: "A\tD\tpath\0" or, for a rename, "A\tD\t\0old\0new\0". */
export function parseNumstatZ(out: string): string[] {
  const parts = out.split('\0');
  const paths: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    if (p === '') continue;
    const m = /^(?:\d+|-)\t(?:\d+|-)\t(.*)$/s.exec(p);
    if (!m) continue;
    if (m[1] !== '') paths.push(m[1]!);
    else {
      if (parts[i + 1]) paths.push(parts[i + 1]!);
      if (parts[i + 2]) paths.push(parts[i + 2]!);
      i += 2;
    }
  }
  return [...new Set(paths)];
}

/** `git ls-tree -r -z HEAD`: "mode type oid\tpath\0" → path → blob id. */
export function parseLsTreeZ(out: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const e of out.split('\0')) {
    const tab = e.indexOf('\t');
    if (tab < 0) continue;
    const [, type, oid] = e.slice(0, tab).replace(/^\n+/, '').split(' ');
    if (type === 'blob' && oid) m.set(e.slice(tab + 1), oid);
  }
  return m;
}

function sections(out: string, marker: string): Map<string, string> {
  const m = new Map<string, string>();
  const parts = out.split(`\n${marker} `);
  for (const p of parts.slice(1)) {
    const nl = p.indexOf('\n');
    m.set(nl < 0 ? p : p.slice(0, nl), nl < 0 ? '' : p.slice(nl + 1));
  }
  return m;
}

/**
 * Before the patch: interpreters probed, the base file list, the `wanted` files as base + test_patch has
 * them (through a scratch index: the work tree is not touched); then the patch applied and what it touched.
 */
async function prepare(sb: Sandbox, work: string, marker: string, hasPatch: boolean, wanted: readonly string[]): Promise<Prep> {
  const idx = `GIT_INDEX_FILE=${work}/index`;
  const script = [
    'cd /testbed',
    `for py in python3 python; do command -v "$py" >/dev/null 2>&1 || continue; (cd / && "$py" -I -c ${shq(PROBE)}) 2>/dev/null | sed 's/^/@probe /'; done`,
    `printf '\\n${marker} base\\n'; git ls-tree -r -z HEAD`,
    wanted.length
      ? [
          // an empty test_patch (factory tasks): the listed files as base has them
          `if ${idx} git read-tree HEAD && { [ ! -s ${work}/test.diff ] || ${idx} git apply --cached --whitespace=nowarn ${work}/test.diff 2>/dev/null; }; then`,
          `  for f in ${wanted.map(shq).join(' ')}; do if ${idx} git cat-file -e ":$f" 2>/dev/null; then printf '\\n${marker} file %s\\n' "$f"; ${idx} git show ":$f"; fi; done`,
          `fi; rm -f ${work}/index`,
        ].join('\n')
      : '',
    hasPatch
      ? [
          `printf '\\n${marker} apply\\n'`,
          `if git apply --whitespace=nowarn ${work}/patch.diff 2>${work}/apply.log; then echo applied`,
          `elif command -v patch >/dev/null 2>&1 && patch --batch --fuzz=5 -p1 --dry-run -i ${work}/patch.diff >/dev/null 2>&1 && patch --batch --fuzz=5 -p1 -i ${work}/patch.diff >${work}/apply.log 2>&1; then echo applied`,
          `else echo failed; cat ${work}/apply.log; fi`,
          `printf '\\n${marker} touched\\n'; git apply --numstat -z ${work}/patch.diff`,
        ].join('\n')
      : '',
    `printf '\\n${marker} inits\\n'; find . -path ./.git -prune -o -name __init__.py -print0`,
    `printf '\\n${marker} end\\n'`,
  ].join('\n');
  const r = await sb.exec(script, 120, { maxOutputBytes: 64 << 20 });
  const s = sections('\n' + r.stdout, marker);
  if (!s.has('end')) throw new Error(`preparing the grading run failed (exit ${r.exit}): ${(r.stdout + r.stderr).slice(-500)}`);
  const names = new Set<string>();
  const siteDirs: string[] = [];
  for (const line of r.stdout.split('\n')) {
    if (!line.startsWith('@probe ')) continue;
    try {
      const p = JSON.parse(line.slice(7)) as { names: string[]; site: string[] };
      for (const n of p.names) names.add(n);
      for (const d of p.site) if (!siteDirs.includes(d)) siteDirs.push(d);
    } catch {
      // an interpreter that printed something else (Python 2 without -I, say): not one the tests use
    }
  }
  const z = (t: string | undefined) =>
    (t ?? '')
      .split('\0')
      .map((x) => x.replace(/^\n+|\n+$/g, ''))
      .filter((x) => x !== '');
  const apply = s.get('apply') ?? 'applied\n';
  const baseBlobs = parseLsTreeZ(s.get('base') ?? '');
  const testSources = new Map<string, string>();
  for (const [k, v] of s) if (k.startsWith('file ')) testSources.set(k.slice(5), v);
  return {
    names,
    siteDirs,
    baseBlobs,
    baseFiles: new Set(baseBlobs.keys()),
    applied: apply.startsWith('applied'),
    applyLog: apply.replace(/^(applied|failed)\n?/, ''),
    touched: parseNumstatZ(s.get('touched') ?? ''),
    packageInits: new Set(z(s.get('inits')).map((p) => p.replace(/^\.\//, ''))),
    testSources,
  };
}

/** The results plugin's configuration (activities/swerl_pytest_results.py reads it at load, then removes it). */
interface PluginConfig {
  fd: number;
  /** the grader's directory in the container: removed at load */
  workdir: string;
  /** other files of the grader: removed at load (.pth files) */
  remove: string[];
  /** what the grader appended to PYTEST_ADDOPTS: removed from the environment at load */
  addopts: string;
  testbed: string;
  /** absolute paths compiled fresh at load: the listed test files and their test-support modules */
  files: string[];
  /** the listed test files among them */
  testFiles: string[];
  /** repository paths the patch changed and the grader did not restore */
  touched: string[];
  /** repository .py files as the base commit has them (path → blob id): code met outside `files` is checked against them */
  blobs: Record<string, string>;
  checks: boolean;
  /** pytest (loaded with -p) or unittest (imported at start-up by the .pth file in the test process) */
  runner: 'pytest' | 'unittest';
}

/**
 * The shell of the test run: the results descriptor is opened on a file that is unlinked at once (the
 * test process holds it, nothing names it), test_cmd runs in a subshell with the plugin in PYTEST_ADDOPTS
 * (and `extraArgs`, e.g. canary ids when test_cmd names test ids), and the records are kept afterwards.
 */
export function testRunScript(o: { testCmd: string; addopts: string; resultsTmp: string; resultsOut: string; fd: number }): string {
  const addopts = o.addopts;
  return [
    `exec ${o.fd}>${shq(o.resultsTmp)} && rm -f ${shq(o.resultsTmp)}`,
    ...(addopts ? [`export PYTEST_ADDOPTS="\${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }"${shq(addopts)}`] : []),
    `(\n${o.testCmd}\n)`,
    'rc=$?',
    `mkdir -p ${shq(o.resultsOut.slice(0, o.resultsOut.lastIndexOf('/')))} && cat /proc/self/fd/${o.fd} > ${shq(o.resultsOut)}`,
    'exit $rc',
  ].join('\n');
}

/** The records the run left ('' when there are none: the caller decides whether that is the agent's doing). */
async function readResults(sb: Sandbox, path: string): Promise<string> {
  try {
    return await sb.readFile(path);
  } catch (e) {
    if ((e as Error).name === 'SandboxDeadError') throw e;
    return '';
  }
}

/** Runs the task's tests in a fresh sandbox with `patch` (may be empty) + test_patch, graded by today's SWE-bench rules. */
export async function runTaskTests(input: GradeInput): Promise<GradeResult> {
  const { task, patch, backend } = input;
  const timeoutS = input.timeoutS ?? GRADE_TIMEOUT_S;
  const integrity = input.integrity ?? true;
  const t0 = Date.now();
  const nonce = randomBytes(8).toString('hex');
  const work = `/opt/swerl-grade-${nonce}`;
  const module = `swerl_results_${nonce}`;
  const resultsTmp = `${work}/results`;
  const resultsOut = `/opt/swerl-results-${nonce}/results.jsonl`;
  const marker = `@@swerl-${nonce}`;
  const hasPatch = patch.trim() !== '';
  const pytest = runsPytest(task.test_cmd);
  const format = logFormatOf(task.test_cmd);
  // unittest and Django's runner: the same checks, loaded at interpreter start-up in the test process
  const proc = !pytest && (format === 'unittest' || format === 'django') ? testProcessOf(task.test_cmd) : undefined;
  const unittest = integrity && proc !== undefined;
  const plugin = pytest || unittest;
  const listed = [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS];
  const listedFiles = pytest ? filesOfTestIds(listed) : unittest ? unittestIdCandidates(listed) : [];
  let image = '';
  let canaries: Canary[] = [];
  const base = {
    instanceId: task.instance_id,
    patchExists: hasPatch,
    graderVersion: GRADER_VERSION,
  };
  const result = (
    fields: { reason: GradeReason; patchApplied: boolean; statuses?: Map<string, TestOutcome>; channel: ResultChannel; restored?: string[]; exitCode?: number | null },
    log: string,
    detail?: string,
  ): GradeResult => {
    const tests = listedTests(task, fields.statuses ?? new Map());
    const resolved = fields.reason === 'tests_failed' && judgeTests(tests).resolved;
    const r: GradeResult = {
      ...base,
      reward: resolved ? 1 : 0,
      resolved,
      reason: resolved ? 'passed' : fields.reason,
      patchApplied: fields.patchApplied,
      tests,
      channel: fields.channel,
      restored: fields.restored ?? [],
      exitCode: fields.exitCode ?? null,
      durationS: (Date.now() - t0) / 1000,
      logTail: log.slice(-LOG_TAIL_CHARS),
      image,
    };
    if (canaries.length) r.canaries = canaries.map((c) => ({ ...c, status: fields.statuses?.get(c.id) ?? 'MISSING' }));
    if (detail) r.detail = detail;
    gradingSeconds.observe({ reason: r.reason }, r.durationS);
    return r;
  };

  let sb: Sandbox;
  try {
    image = (await ensureTaskImage(task)).image;
    sb = await backend.start(image, input.limits, { 'swerl.purpose': 'grade', 'swerl.task': task.instance_id.slice(0, 63) });
  } catch (e) {
    throw new GradingError(task.instance_id, `sandbox could not start: ${(e as Error).message}`);
  }
  try {
    const files = [{ path: 'test.diff', content: task.test_patch }];
    if (hasPatch) files.push({ path: 'patch.diff', content: patch.endsWith('\n') ? patch : patch + '\n' });
    await sb.copyIn(files, work);
    const prep = await prepare(sb, work, marker, hasPatch, listedFiles);
    if (unittest) {
      // of the candidate files, those the ids name
      const named = new Set(filesOfUnittestIds(listed, new Set(prep.testSources.keys())));
      for (const f of [...prep.testSources.keys()]) if (!named.has(f)) prep.testSources.delete(f);
    }
    if (!prep.applied) return result({ reason: 'patch_apply_failed', patchApplied: false, channel: 'none' }, prep.applyLog, 'git apply (and patch --fuzz=5) refused the patch');

    const testPatchFiles = filesInPatch(task.test_patch);
    const repoFiles = new Set([...prep.baseFiles, ...prep.touched, ...testPatchFiles]);
    const testImports = testTreeImports(prep.testSources, repoFiles);
    const restore = pathsToRestore({
      touched: prep.touched,
      baseFiles: prep.baseFiles,
      packageDirsAfterPatch: new Set([...prep.packageInits].map((p) => p.split('/').slice(0, -1).join('/'))),
      testPatchFiles,
      testIds: listed,
      testCmd: task.test_cmd,
      externalModules: prep.names,
      testImports,
      goldFiles: filesInPatch(task.patch),
    });
    const restored = [...restore.keys()];
    const toRestore = [...new Set([...restored, ...testPatchFiles])];
    const restoredSet = new Set(toRestore);
    const patchedPaths = prep.touched.filter((p) => !restoredSet.has(p));

    // the canaries, and the plugin's configuration
    const canaryFiles: CanaryFile[] = [];
    // unittest's --failfast stops at the first failure, a must-fail canary's (pytest's -x/--maxfail is lifted by the plugin)
    const failfast = unittest && /(^|\s)(-f|--failfast)(?=\s|$)/.test(task.test_cmd);
    if (plugin && integrity && !failfast) {
      for (const [path, source] of prep.testSources) {
        if (pytest) {
          const c = await canariesFor(path, source, task.PASS_TO_PASS, task.FAIL_TO_PASS);
          if (c) canaryFiles.push(c);
          continue;
        }
        // unittest ids as file::Class::name; a test test_cmd names by itself is not a source (its canary would not run)
        const asNode = new Map<string, string>();
        for (const id of listed) {
          const n = unittestAsNodeId(id, path);
          if (n && !new RegExp(`\\.${n.split('::').at(-1)}\\b`).test(task.test_cmd)) asNode.set(n, id);
        }
        const pick = (ids: readonly string[]) => ids.map((i) => unittestAsNodeId(i, path)).filter((n): n is string => !!n && asNode.has(n));
        const c = await canariesFor(path, source, pick(task.PASS_TO_PASS), pick(task.FAIL_TO_PASS));
        if (!c) continue;
        c.canaries = c.canaries.map((x) => {
          const src = asNode.get(x.source)!;
          const [from, to] = [x.source.split('::').at(-1)!, x.id.split('::').at(-1)!];
          const id = src.replace(new RegExp(`^${from} \\((.*?)(\\.${from})?\\)$`), (_a, inner: string, tail?: string) => `${to} (${inner}${tail ? `.${to}` : ''})`);
          return { ...x, id, source: src };
        });
        canaryFiles.push(c);
      }
      canaries = canaryFiles.flatMap((c) => c.canaries);
    }
    const pth = plugin ? prep.siteDirs.map((d) => `${d}/${module}.pth`) : [];
    // canaries run however test_cmd selects tests: where it names pytest ids, their ids are added
    const addopts = pytest ? [`-p ${module}`, ...(/::/.test(task.test_cmd) ? canaries.map((c) => shq(c.id)) : [])].join(' ') : '';
    const abs = (p: string) => `/testbed/${p}`;
    const checkedFiles = [...prep.testSources.keys()];
    const config: PluginConfig = {
      fd: RESULTS_FD,
      workdir: work,
      remove: pth,
      addopts,
      testbed: '/testbed',
      files: [...new Set([...checkedFiles, ...testImports, ...testPatchFiles.filter((f) => f.endsWith('.py'))])].map(abs),
      testFiles: checkedFiles.map(abs),
      touched: patchedPaths,
      blobs: Object.fromEntries([...prep.baseBlobs].filter(([p]) => p.endsWith('.py') && !restoredSet.has(p) && !patchedPaths.includes(p))),
      checks: integrity,
      runner: pytest ? 'pytest' : 'unittest',
    };
    if (plugin) {
      await sb.copyIn(
        [
          { path: `${module}.py`, content: PLUGIN_SOURCE.replace('"__SWERL_CONFIG_PATH__"', JSON.stringify(`${work}/config.json`)) },
          { path: 'config.json', content: JSON.stringify(config) },
          ...canaryFiles.map((c, i) => ({ path: `canary/${i}`, content: c.content })),
        ],
        work,
      );
    }
    const setup = [
      'set -e',
      'restore() { rm -rf -- "$1"; if git cat-file -e "HEAD:$1" 2>/dev/null; then git checkout -q HEAD -- "$1"; fi; }',
      ...toRestore.map((f) => `restore ${shq(f)}`),
      `[ ! -s ${work}/test.diff ] || git apply --whitespace=nowarn ${work}/test.diff`,
      ...canaryFiles.map((c, i) => `cat ${work}/canary/${i} > ${shq(c.path)}`),
      // nothing of test_patch, the patch or the canaries stays beside the plugin
      `rm -rf ${work}/test.diff ${work}/patch.diff ${work}/apply.log ${work}/canary`,
      ...(plugin
        ? prep.siteDirs.map(
            (d) => `mkdir -p ${shq(d)} && printf '%s\\n' ${[work, ...(unittest ? [startupLine(module, proc!)] : [])].map(shq).join(' ')} > ${shq(`${d}/${module}.pth`)}`,
          )
        : []),
    ].join('\n');
    const tp = await sb.exec(setup, 120);
    if (tp.exit !== 0) {
      return result(
        { reason: 'test_patch_apply_failed', patchApplied: true, channel: 'none', restored },
        tp.stdout + tp.stderr,
        `restoring the tests and applying test_patch failed (exit ${tp.exit})`,
      );
    }

    const cmd = plugin ? testRunScript({ testCmd: task.test_cmd, addopts, resultsTmp, resultsOut, fd: RESULTS_FD }) : task.test_cmd;
    const run = await sb.exec(cmd, timeoutS, { maxOutputBytes: 16 << 20 });
    const log = run.stdout + (run.stderr ? `\n${run.stderr}` : '');
    await input.onLog?.(log);
    const exitCode = run.timedOut ? null : run.exit;
    const timeoutDetail = `test_cmd ran past ${timeoutS} s`;

    if (!pytest) {
      if (!run.timedOut && (run.exit === 126 || run.exit === 127)) throw new GradingError(task.instance_id, `test_cmd could not start (exit ${run.exit}): ${log.slice(-300)}`);
      const statuses = parseTestLog(log, format);
      const fields = { patchApplied: true, statuses, channel: 'log' as const, restored, exitCode };
      if (run.timedOut) return result({ ...fields, reason: 'timeout' }, log, timeoutDetail);
      const anyFailed = [...statuses.values()].some((s) => s === 'FAILED' || s === 'ERROR');
      if (run.exit !== 0 && statuses.size > 0 && !anyFailed) {
        return result({ ...fields, reason: 'runner_tampered' }, log, `exit status ${run.exit} but the log reports no failure`);
      }
      if (!unittest) return result({ ...fields, reason: 'tests_failed' }, log);
      const pr = readPluginRecords(await readResults(sb, resultsOut));
      if (!pr.start && log.includes('[swerl-grade] results plugin loaded')) return result({ ...fields, reason: 'runner_tampered' }, log, 'the results were emptied during the run');
      // the test process was not recognised (an unusual test_cmd): the log alone, as before
      if (!pr.start) return result({ ...fields, reason: 'tests_failed' }, log, 'the integrity checks did not load in the test process');
      const repoFiles = new Set([...prep.baseFiles, ...testPatchFiles]);
      const fileOf = (id: string) => filesOfUnittestIds([id], repoFiles)[0];
      const contradictions = integrityContradictions({ run: pr, listed, canaries, patched: new Set(patchedPaths), log: statuses, unittest: { fileOf } });
      if (contradictions.length) return result({ ...fields, reason: 'runner_tampered' }, log, contradictionDetail(contradictions));
      return result({ ...fields, reason: 'tests_failed' }, log);
    }

    const pr = readPluginRecords(await readResults(sb, resultsOut));
    const fields = { patchApplied: true, statuses: pr.statuses, channel: 'pytest-plugin' as const, restored, exitCode };
    // a run past the limit scores 0 (DESIGN §3) whatever it reported so far
    if (run.timedOut) return result({ ...fields, reason: 'timeout' }, log, timeoutDetail);
    // the plugin loads before any repository code: without its start record the channel never came up,
    // unless it said it loaded (then the run emptied its records: the agent's doing)
    if (!pr.start && log.includes('[swerl-grade] results plugin loaded')) return result({ ...fields, reason: 'runner_tampered' }, log, 'the results were emptied during the run');
    if (!pr.start) throw new GradingError(task.instance_id, `the results plugin never started (exit ${run.exit}): ${log.slice(-500)}`);
    const contradictions = [
      ...pluginRunContradictions({ run: pr, exitCode, patchedFiles: new Set(patchedPaths.map(abs)) }),
      ...integrityContradictions({ run: pr, listed, canaries, patched: new Set(patchedPaths), log: integrity ? parsePytestLog(log) : undefined }),
    ];
    if (contradictions.length) return result({ ...fields, reason: 'runner_tampered' }, log, contradictionDetail(contradictions));
    if (!pr.finish) return result({ ...fields, reason: 'tests_failed' }, log, `the pytest session never finished (exit ${run.exit})`);
    return result({ ...fields, reason: 'tests_failed' }, log, pr.finish.exitstatus > 1 ? `pytest exit status ${pr.finish.exitstatus}` : undefined);
  } catch (e) {
    if (e instanceof GradingError) throw e;
    throw new GradingError(task.instance_id, (e as Error).message);
  } finally {
    await sb.stop().catch(() => undefined);
  }
}

/** DeepSWE's binary reward for the agent's patch. An empty patch scores 0 without running tests. */
export async function gradePatch(input: GradeInput): Promise<GradeResult> {
  const { task } = input;
  if (input.patch.trim() === '') {
    let image: string;
    try {
      image = (await ensureTaskImage(task)).image;
    } catch (e) {
      throw new GradingError(task.instance_id, `task image: ${(e as Error).message}`);
    }
    return {
      instanceId: task.instance_id,
      reward: 0,
      resolved: false,
      reason: 'empty_patch',
      patchExists: false,
      patchApplied: false,
      tests: listedTests(task, new Map()),
      graderVersion: GRADER_VERSION,
      channel: 'none',
      restored: [],
      exitCode: null,
      durationS: 0,
      logTail: '',
      image,
    };
  }
  return runTaskTests(input);
}

export interface ValidationResult {
  instanceId: string;
  valid: boolean;
  problems: string[];
  durationS: number;
  /** statuses without the fix (test_patch only) and with the gold patch */
  before: GradeResult['tests'];
  after: GradeResult['tests'];
}

/** A task is valid when, with test_patch alone, every FAIL_TO_PASS fails and every PASS_TO_PASS passes, and with the gold patch all pass. */
export async function validateTask(input: { task: SweTask; backend: SandboxBackend; timeoutS?: number }): Promise<ValidationResult> {
  const { task } = input;
  const t0 = Date.now();
  const [before, after] = await Promise.all([runTaskTests({ ...input, patch: '' }), runTaskTests({ ...input, patch: task.patch })]);
  const problems: string[] = [];
  if (!task.FAIL_TO_PASS.length) problems.push('FAIL_TO_PASS is empty');
  const ran = (r: GradeResult) => r.reason === 'tests_failed' || r.reason === 'passed';
  for (const [label, r] of [
    ['without the fix', before],
    ['with the gold patch', after],
  ] as const) {
    if (!ran(r)) problems.push(`${label}: ${r.reason}${r.detail ? ` (${r.detail})` : ''}`);
  }
  if (ran(before)) {
    for (const [id, s] of Object.entries(before.tests.FAIL_TO_PASS)) if (s === 'PASSED') problems.push(`FAIL_TO_PASS ${id} passes without the fix`);
    for (const [id, s] of Object.entries(before.tests.PASS_TO_PASS)) if (s !== 'PASSED') problems.push(`PASS_TO_PASS ${id} is ${s} without the fix`);
  }
  if (ran(after)) {
    for (const [id, s] of [...Object.entries(after.tests.FAIL_TO_PASS), ...Object.entries(after.tests.PASS_TO_PASS)]) {
      if (s !== 'PASSED') problems.push(`${id} is ${s} with the gold patch`);
    }
  }
  return { instanceId: task.instance_id, valid: problems.length === 0, problems, durationS: (Date.now() - t0) / 1000, before: before.tests, after: after.tests };
}
