// Reward (DESIGN §3, DeepSWE, today's SWE-bench rules; lib/swe/grading.ts): in a fresh container of the
// task image apply the patch, put back everything that configures or extends the test runner, the tests
// and their support files to base + test_patch (lib/swe/runner-guard.ts), audit what the patch adds
// (lib/swe/audit.ts), add canary tests to the listed test files (lib/swe/canaries.ts, answer-mutants
// verified by activities/canary-mutants.ts), run test_cmd with a 5-minute limit, and read the statuses from a
// channel the agent's code does not write in the normal course:
//   pytest      our results plugin (lib/swe/swerl_pytest_results.py) under a per-run random module
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
// The phases (start, prepare, plan, run, verdict) are timed by one PhaseTimer: the result's `timings`.
// Residual risk, stated plainly (docs/integrity.md): the code under test runs in the test process; the
// audit and the answer-mutant canaries are what stand against code written against the plugin itself.
// A run that cannot happen (sandbox, image, the channel never came up) throws GradingError: infrastructure.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Sandbox, SandboxBackend, SandboxLimits } from '../lib/sandbox.ts';
import { filesInPatch, type SweTask } from '../lib/swe/task.ts';
import { logFormatOf, parsePytestLog, parseTestLog, type TestLogFormat, type TestStatus } from '../lib/swe/testlog.ts';
import {
  GRADER_VERSION,
  GradingError,
  judgeTests,
  listedTests,
  type GradeReason,
  type GradeResult,
  type IntegrityFinding,
  type ResultChannel,
  type TestOutcome,
} from '../lib/swe/grading.ts';
import { filesOfTestIds, filesOfUnittestIds, pathsToRestore, testTreeImports, type RestoreCause } from '../lib/swe/runner-guard.ts';
import { exitOneWithoutFailure, integrityContradictions, pluginRunContradictions, readPluginRecords, type Contradiction } from '../lib/swe/pytest-results.ts';
import { canariesFor, type Canary, type CanaryFile, type VerifiedMutant } from '../lib/swe/canaries.ts';
import {
  contradictionDetail,
  parsePrepare,
  prepareScript,
  renamesInPatch,
  runsPytest,
  setupScript,
  startupLine,
  testProcessOf,
  testRunScript,
  unittestAsNodeId,
  unittestIdCandidates,
  unittestIdLike,
  type PluginConfig,
  type Prep,
} from '../lib/swe/grade-plan.ts';
import { auditFiles, isAuditedPath, type AuditFinding } from '../lib/swe/audit.ts';
import { integrityFindingOfAudit, integrityFindingsOf, restoreFindings } from '../lib/swe/integrity.ts';
import { PhaseTimer } from '../lib/timing.ts';
import { ensureTaskImage } from './images.ts';
import { gradingSeconds } from '../lib/metrics.ts';
import { verifiedMutants } from './canary-mutants.ts';
import { shq } from '../lib/shell.ts';

export { GRADER_VERSION, GradingError, type GradeReason, type GradeResult, type TestOutcome } from '../lib/swe/grading.ts';
export const GRADE_TIMEOUT_S = 300;
const LOG_TAIL_CHARS = 4000;
const PLUGIN_SOURCE = readFileSync(new URL('../lib/swe/swerl_pytest_results.py', import.meta.url), 'utf8');
/** the descriptor the test process inherits for the plugin's records */
const RESULTS_FD = 9;

/** What the static audit's flags do: zero the reward (default), only record them, or no audit. */
export type AuditMode = 'zero' | 'flag' | 'off';

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
   * The integrity checks (the audit, canaries, the plugin's code checks, call wrapper and snapshots);
   * default true. Off only to measure what they cost (bench/grade.ts): a grading without them is no reward.
   */
  integrity?: boolean;
  /** the static audit (lib/swe/audit.ts); default `zero` */
  audit?: AuditMode;
  /** answer-mutant canaries of the FAIL_TO_PASS tests (verified once per task with the gold patch); default true */
  mutants?: boolean;
}

/** One grading's fixed facts: names in the container, the runner, the listed tests, and what it found so far. */
interface Grading {
  input: GradeInput;
  task: SweTask;
  t0: number;
  work: string;
  module: string;
  resultsTmp: string;
  resultsOut: string;
  marker: string;
  hasPatch: boolean;
  hasTestPatch: boolean;
  pytest: boolean;
  format: TestLogFormat;
  /** unittest and Django's runner: the test process the plugin loads in (undefined: read from the log alone) */
  proc: { module: string } | { script: string } | undefined;
  unittest: boolean;
  plugin: boolean;
  integrity: boolean;
  audit: AuditMode;
  listed: string[];
  listedFiles: string[];
  image: string;
  canaries: Canary[];
  findings: IntegrityFinding[];
}

function gradingOf(input: GradeInput): Grading {
  const { task } = input;
  const nonce = randomBytes(8).toString('hex');
  const work = `/opt/swerl-grade-${nonce}`;
  const pytest = runsPytest(task.test_cmd);
  const format = logFormatOf(task.test_cmd);
  const integrity = input.integrity ?? true;
  // unittest and Django's runner: the same checks, loaded at interpreter start-up in the test process
  const proc = !pytest && (format === 'unittest' || format === 'django') ? testProcessOf(task.test_cmd) : undefined;
  const unittest = integrity && proc !== undefined;
  const listed = [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS];
  return {
    input,
    task,
    t0: Date.now(),
    work,
    module: `swerl_results_${nonce}`,
    resultsTmp: `${work}/results`,
    resultsOut: `/opt/swerl-results-${nonce}/results.jsonl`,
    marker: `@@swerl-${nonce}`,
    hasPatch: input.patch.trim() !== '',
    hasTestPatch: task.test_patch.trim() !== '',
    pytest,
    format,
    proc,
    unittest,
    plugin: pytest || unittest,
    integrity,
    audit: integrity ? (input.audit ?? 'zero') : 'off',
    listed,
    listedFiles: pytest ? filesOfTestIds(listed) : unittest ? unittestIdCandidates(listed) : [],
    image: '',
    canaries: [],
    findings: [],
  };
}

interface Outcome {
  reason: GradeReason;
  patchApplied: boolean;
  statuses?: Map<string, TestOutcome>;
  channel: ResultChannel;
  restored?: string[];
  exitCode?: number | null;
}

/** The GradeResult of `g` ending with `o`; `contradictions` (runner_tampered) join the integrity findings. */
function resultOf(g: Grading, o: Outcome, log: string, detail?: string, contradictions: readonly Contradiction[] = []): GradeResult {
  const tests = listedTests(g.task, o.statuses ?? new Map());
  const resolved = o.reason === 'tests_failed' && judgeTests(tests).resolved;
  const r: GradeResult = {
    instanceId: g.task.instance_id,
    reward: resolved ? 1 : 0,
    resolved,
    reason: resolved ? 'passed' : o.reason,
    patchExists: g.hasPatch,
    patchApplied: o.patchApplied,
    tests,
    graderVersion: GRADER_VERSION,
    channel: o.channel,
    restored: o.restored ?? [],
    exitCode: o.exitCode ?? null,
    durationS: (Date.now() - g.t0) / 1000,
    logTail: log.slice(-LOG_TAIL_CHARS),
    image: g.image,
    integrity: [...g.findings, ...integrityFindingsOf(contradictions)],
    audit: g.audit,
  };
  if (g.canaries.length) r.canaries = g.canaries.map((c) => ({ ...c, status: o.statuses?.get(c.id) ?? 'MISSING' }));
  if (detail) r.detail = detail;
  gradingSeconds.observe({ reason: r.reason }, r.durationS);
  return r;
}

/** Phase 1: the task image and a fresh sandbox of it. */
async function startSandbox(g: Grading): Promise<Sandbox> {
  try {
    g.image = (await ensureTaskImage(g.task)).image;
    return await g.input.backend.start(g.image, g.input.limits, { 'swerl.purpose': 'grade', 'swerl.task': g.task.instance_id.slice(0, 63) });
  } catch (e) {
    throw new GradingError(g.task.instance_id, `sandbox could not start: ${(e as Error).message}`);
  }
}

/** Phase 2: the container probed, the listed test files read as base + test_patch has them, the patch applied, the audited files read. */
async function prepare(sb: Sandbox, g: Grading): Promise<Prep> {
  const { patch } = g.input;
  const files = [];
  if (g.hasTestPatch) files.push({ path: 'test.diff', content: g.task.test_patch });
  if (g.hasPatch) files.push({ path: 'patch.diff', content: patch.endsWith('\n') ? patch : patch + '\n' });
  if (files.length) await sb.copyIn(files, g.work);
  const renames = renamesInPatch(patch);
  const audited = new Map(
    g.audit === 'off'
      ? []
      : filesInPatch(patch)
          .filter(isAuditedPath)
          .map((f) => [f, renames.get(f) ?? f] as const),
  );
  const script = prepareScript({ work: g.work, marker: g.marker, hasPatch: g.hasPatch, hasTestPatch: g.hasTestPatch, wanted: g.listedFiles, audited });
  const r = await sb.exec(script, 120, { maxOutputBytes: 64 << 20 });
  const prep = parsePrepare(r.stdout, g.marker);
  if (!prep) throw new Error(`preparing the grading run failed (exit ${r.exit}): ${(r.stdout + r.stderr).slice(-500)}`);
  if (g.unittest) {
    // of the candidate files, those the ids name
    const named = new Set(filesOfUnittestIds(g.listed, new Set(prep.testSources.keys())));
    for (const f of [...prep.testSources.keys()]) if (!named.has(f)) prep.testSources.delete(f);
  }
  return prep;
}

/** What the run will have: the paths put back and why, the paths the patch changed that stay, the canaries, the plugin's configuration. */
interface Plan {
  baseFiles: Set<string>;
  restore: Map<string, RestoreCause>;
  toRestore: string[];
  patchedPaths: string[];
  testPatchFiles: string[];
  canaryFiles: CanaryFile[];
  addopts: string;
  config: PluginConfig;
  pth: Map<string, string[]>;
  audit: AuditFinding[];
}

/** Phase 3: restores, the audit of what stays of the patch, canaries (answer-mutants verified once per task) and the plugin's configuration. */
async function plan(g: Grading, prep: Prep): Promise<Plan> {
  const { task } = g;
  const testPatchFiles = g.hasTestPatch ? filesInPatch(task.test_patch) : [];
  const repoFiles = new Set([...prep.baseFiles, ...prep.touched, ...testPatchFiles]);
  const testImports = testTreeImports(prep.testSources, repoFiles);
  const restore = pathsToRestore({
    touched: prep.touched,
    baseFiles: prep.baseFiles,
    packageDirsAfterPatch: new Set([...prep.packageInits].map((p) => p.split('/').slice(0, -1).join('/'))),
    testPatchFiles,
    testIds: g.listed,
    testCmd: task.test_cmd,
    externalModules: prep.names,
    testImports,
    goldFiles: filesInPatch(task.patch),
  });
  const toRestore = [...new Set([...restore.keys(), ...testPatchFiles])];
  const restoredSet = new Set(toRestore);
  const patchedPaths = prep.touched.filter((p) => !restoredSet.has(p));
  g.findings.push(...restoreFindings(restore));
  const audit =
    g.audit === 'off' ? [] : await auditFiles(patchedPaths.filter((p) => prep.after.has(p)).map((p) => ({ path: p, before: prep.before.get(p), after: prep.after.get(p)! })));
  g.findings.push(...audit.map(integrityFindingOfAudit));
  const canaryFiles = g.plugin && g.integrity ? await plannedCanaries(g, prep) : [];
  g.canaries = canaryFiles.flatMap((c) => c.canaries);
  // canaries run however test_cmd selects tests: where it names pytest ids, their ids are added
  const addopts = g.pytest ? [`-p ${g.module}`, ...(/::/.test(task.test_cmd) ? g.canaries.map((c) => shq(c.id)) : [])].join(' ') : '';
  const abs = (p: string) => `/testbed/${p}`;
  const checkedFiles = [...prep.testSources.keys()];
  const pthFiles = g.plugin ? prep.siteDirs.map((d) => `${d}/${g.module}.pth`) : [];
  const config: PluginConfig = {
    fd: RESULTS_FD,
    workdir: g.work,
    remove: pthFiles,
    addopts,
    testbed: '/testbed',
    files: [...new Set([...checkedFiles, ...testImports, ...testPatchFiles.filter((f) => f.endsWith('.py'))])].map(abs),
    testFiles: checkedFiles.map(abs),
    touched: patchedPaths,
    blobs: Object.fromEntries([...prep.baseBlobs].filter(([p]) => p.endsWith('.py') && !restoredSet.has(p) && !patchedPaths.includes(p))),
    checks: g.integrity,
    runner: g.pytest ? 'pytest' : 'unittest',
  };
  const pth = new Map(g.plugin ? prep.siteDirs.map((d) => [d, [g.work, ...(g.unittest ? [startupLine(g.module, g.proc!)] : [])]]) : []);
  return { baseFiles: prep.baseFiles, restore, toRestore, patchedPaths, testPatchFiles, canaryFiles, addopts, config, pth, audit };
}

/** The canary files: per listed test file, a verbatim copy, an inverted copy and the verified answer-mutants of its FAIL_TO_PASS tests. */
async function plannedCanaries(g: Grading, prep: Prep): Promise<CanaryFile[]> {
  const { task } = g;
  // unittest's --failfast stops at the first failure, a must-fail canary's (pytest's -x/--maxfail is lifted by the plugin)
  if (g.unittest && /(^|\s)(-f|--failfast)(?=\s|$)/.test(task.test_cmd)) return [];
  const mutants: VerifiedMutant[] = g.input.mutants === false ? [] : await verifiedMutants(task, g.input.backend, g.input.timeoutS ?? GRADE_TIMEOUT_S);
  const out: CanaryFile[] = [];
  for (const [path, source] of prep.testSources) {
    const mine = mutants.filter((m) => m.path === path);
    if (g.pytest) {
      const c = await canariesFor(path, source, task.PASS_TO_PASS, task.FAIL_TO_PASS, mine);
      if (c) out.push(c);
      continue;
    }
    // unittest ids as file::Class::name; a test test_cmd names by itself is not a source (its canary would not run)
    const asNode = new Map<string, string>();
    for (const id of g.listed) {
      const n = unittestAsNodeId(id, path);
      if (n && !new RegExp(`\\.${n.split('::').at(-1)}\\b`).test(task.test_cmd)) asNode.set(n, id);
    }
    const pick = (ids: readonly string[]) => ids.map((i) => unittestAsNodeId(i, path)).filter((n): n is string => !!n && asNode.has(n));
    const c = await canariesFor(
      path,
      source,
      pick(task.PASS_TO_PASS),
      pick(task.FAIL_TO_PASS),
      mine.filter((m) => asNode.has(m.source)),
      { stripDocstrings: true },
    );
    if (!c) continue;
    c.canaries = c.canaries.map((x) => ({ ...x, id: unittestIdLike(asNode.get(x.source)!, x.source, x.id), source: asNode.get(x.source)! }));
    out.push(c);
  }
  return out;
}

interface Run {
  log: string;
  exit: number;
  exitCode: number | null;
  timedOut: boolean;
}

/** Phase 4: the set-up (restores, test_patch, canaries, the plugin) and test_cmd; a GradeResult when the set-up failed. */
async function runTests(sb: Sandbox, g: Grading, p: Plan): Promise<Run | GradeResult> {
  if (g.plugin) {
    await sb.copyIn(
      [
        { path: `${g.module}.py`, content: PLUGIN_SOURCE.replace('"__SWERL_CONFIG_PATH__"', JSON.stringify(`${g.work}/config.json`)) },
        { path: 'config.json', content: JSON.stringify(p.config) },
        ...p.canaryFiles.map((c, i) => ({ path: `canary/${i}`, content: c.content })),
      ],
      g.work,
    );
  }
  const setup = setupScript({ work: g.work, restore: p.toRestore, hasTestPatch: g.hasTestPatch, canaryPaths: p.canaryFiles.map((c) => c.path), pth: p.pth, module: g.module });
  const tp = await sb.exec(setup, 120);
  const restored = [...p.restore.keys()];
  if (tp.exit !== 0) {
    return resultOf(
      g,
      { reason: 'test_patch_apply_failed', patchApplied: true, channel: 'none', restored },
      tp.stdout + tp.stderr,
      `restoring the tests and applying test_patch failed (exit ${tp.exit})`,
    );
  }
  const cmd = g.plugin ? testRunScript({ testCmd: g.task.test_cmd, addopts: p.addopts, resultsTmp: g.resultsTmp, resultsOut: g.resultsOut, fd: RESULTS_FD }) : g.task.test_cmd;
  const run = await sb.exec(cmd, g.input.timeoutS ?? GRADE_TIMEOUT_S, { maxOutputBytes: 16 << 20 });
  const log = run.stdout + (run.stderr ? `\n${run.stderr}` : '');
  await g.input.onLog?.(log);
  return { log, exit: run.exit, exitCode: run.timedOut ? null : run.exit, timedOut: run.timedOut };
}

const timeoutDetail = (g: Grading) => `test_cmd ran past ${g.input.timeoutS ?? GRADE_TIMEOUT_S} s`;
const PLUGIN_LOADED = '[swerl-grade] results plugin loaded';

/** Phase 5, pytest: the plugin's records, believed only when the run agrees with itself. */
async function pytestVerdict(sb: Sandbox, g: Grading, p: Plan, run: Run): Promise<GradeResult> {
  const pr = readPluginRecords(await readResults(sb, g.resultsOut));
  const o = { patchApplied: true, statuses: pr.statuses, channel: 'pytest-plugin' as const, restored: [...p.restore.keys()], exitCode: run.exitCode };
  // a run past the limit scores 0 (DESIGN §3) whatever it reported so far
  if (run.timedOut) return resultOf(g, { ...o, reason: 'timeout' }, run.log, timeoutDetail(g));
  // the plugin loads before any repository code: without its start record the channel never came up,
  // unless it said it loaded (then the run emptied its records: the agent's doing)
  if (!pr.start && run.log.includes(PLUGIN_LOADED)) return tampered(g, o, run.log, [{ rule: 'results_emptied', text: 'the results were emptied during the run' }]);
  if (!pr.start) throw new GradingError(g.task.instance_id, `the results plugin never started (exit ${run.exit}): ${run.log.slice(-500)}`);
  const contradictions = [
    ...pluginRunContradictions({ run: pr, exitCode: run.exitCode, patchedFiles: new Set(p.patchedPaths.map((x) => `/testbed/${x}`)) }),
    ...integrityContradictions({ run: pr, listed: g.listed, canaries: g.canaries, patched: new Set(p.patchedPaths), log: g.integrity ? parsePytestLog(run.log) : undefined }),
    ...(g.integrity ? exitOneWithoutFailure(pr, run.exitCode) : []),
  ];
  if (contradictions.length) return tampered(g, o, run.log, contradictions);
  if (!pr.finish) return resultOf(g, { ...o, reason: 'tests_failed' }, run.log, `the pytest session never finished (exit ${run.exit})`);
  return resultOf(g, { ...o, reason: 'tests_failed' }, run.log, pr.finish.exitstatus > 1 ? `pytest exit status ${pr.finish.exitstatus}` : undefined);
}

/** Phase 5, unittest and Django's runner with the plugin: the log, contradicted by the plugin's records or not. */
async function unittestVerdict(sb: Sandbox, g: Grading, p: Plan, run: Run, o: Omit<Outcome, 'reason'> & { statuses: Map<string, TestStatus> }): Promise<GradeResult> {
  const pr = readPluginRecords(await readResults(sb, g.resultsOut));
  if (!pr.start && run.log.includes(PLUGIN_LOADED)) return tampered(g, o, run.log, [{ rule: 'results_emptied', text: 'the results were emptied during the run' }]);
  // the test process was not recognised (an unusual test_cmd): the log alone, as before
  if (!pr.start) return resultOf(g, { ...o, reason: 'tests_failed' }, run.log, 'the integrity checks did not load in the test process');
  const repoFiles = new Set([...p.baseFiles, ...p.testPatchFiles]);
  const fileOf = (id: string) => filesOfUnittestIds([id], repoFiles)[0];
  const contradictions = integrityContradictions({ run: pr, listed: g.listed, canaries: g.canaries, patched: new Set(p.patchedPaths), log: o.statuses, unittest: { fileOf } });
  if (contradictions.length) return tampered(g, o, run.log, contradictions);
  return resultOf(g, { ...o, reason: 'tests_failed' }, run.log);
}

/** Phase 5, any runner but pytest: statuses from the log, cross-checked with the exit status (and the plugin's records where it loaded). */
async function logVerdict(sb: Sandbox, g: Grading, p: Plan, run: Run): Promise<GradeResult> {
  if (!run.timedOut && (run.exit === 126 || run.exit === 127)) throw new GradingError(g.task.instance_id, `test_cmd could not start (exit ${run.exit}): ${run.log.slice(-300)}`);
  const statuses = parseTestLog(run.log, g.format);
  const o = { patchApplied: true, statuses, channel: 'log' as const, restored: [...p.restore.keys()], exitCode: run.exitCode };
  if (run.timedOut) return resultOf(g, { ...o, reason: 'timeout' }, run.log, timeoutDetail(g));
  const anyFailed = [...statuses.values()].some((s) => s === 'FAILED' || s === 'ERROR');
  if (run.exit !== 0 && statuses.size > 0 && !anyFailed)
    return tampered(g, o, run.log, [{ rule: 'exit_no_failure', text: `exit status ${run.exit} but the log reports no failure` }]);
  if (!g.unittest) return resultOf(g, { ...o, reason: 'tests_failed' }, run.log);
  return unittestVerdict(sb, g, p, run, o);
}

function tampered(g: Grading, o: Omit<Outcome, 'reason'>, log: string, contradictions: readonly Contradiction[]): GradeResult {
  return resultOf(g, { ...o, reason: 'runner_tampered' }, log, contradictionDetail(contradictions.map((c) => c.text)), contradictions);
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
  const g = gradingOf(input);
  const timer = new PhaseTimer();
  const sb = await timer.time('start', () => startSandbox(g));
  try {
    const r = await gradeIn(sb, g, timer);
    r.timings = timer.record();
    return r;
  } catch (e) {
    if (e instanceof GradingError) throw e;
    throw new GradingError(g.task.instance_id, (e as Error).message);
  } finally {
    await sb.stop().catch(() => undefined);
  }
}

/** The phases after the sandbox started: prepare, plan, run, verdict. */
async function gradeIn(sb: Sandbox, g: Grading, timer: PhaseTimer): Promise<GradeResult> {
  const prep = await timer.time('prepare', () => prepare(sb, g));
  if (!prep.applied) return resultOf(g, { reason: 'patch_apply_failed', patchApplied: false, channel: 'none' }, prep.applyLog, 'git apply (and patch --fuzz=5) refused the patch');
  const p = await timer.time('plan', () => plan(g, prep));
  if (p.audit.length && g.audit === 'zero') {
    const first = p.audit[0]!;
    const detail = `the audit flagged ${p.audit.length} construct(s) the patch adds: ${p.audit.map((f) => `${f.rule} at ${f.file}:${f.line}`).join(', ')} (first: ${first.text})`;
    return resultOf(g, { reason: 'suspicious_patch', patchApplied: true, channel: 'none', restored: [...p.restore.keys()] }, '', contradictionDetail([detail]));
  }
  const run = await timer.time('run', () => runTests(sb, g, p));
  if (!('log' in run)) return run;
  return timer.time('verdict', () => (g.pytest ? pytestVerdict(sb, g, p, run) : logVerdict(sb, g, p, run)));
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
      integrity: [],
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
  /** the gold patch's grading: its reason and detail when it did not resolve (a false negative of the grader, or a broken task) */
  gold: { reason: GradeReason; detail?: string };
  /** answer-mutant canaries verified for the task (0: its FAIL_TO_PASS tests admit none) */
  mutants: number;
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
  const mutants = (after.canaries ?? []).filter((c) => c.mutant).length;
  return {
    instanceId: task.instance_id,
    valid: problems.length === 0,
    problems,
    durationS: (Date.now() - t0) / 1000,
    before: before.tests,
    after: after.tests,
    gold: { reason: after.reason, ...(after.detail && after.reason !== 'passed' ? { detail: after.detail } : {}) },
    mutants,
  };
}
