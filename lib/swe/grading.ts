// What a grading run yields and how it becomes a reward (DESIGN §3): today's SWE-bench rules with
// the stricter FAIL_TO_PASS reading the reward needs. Pure: activities/grade.ts runs the tests,
// lib/swe/report.ts writes the harness-shaped reports, both from a GradeResult.

/**
 * Bumped whenever a verdict for the same run could change (rules, restore list, result channel,
 * parsers), so every stored reward says which grader gave it.
 *   1  log parsing of the whole output, XFAIL/XPASS counted as passes, only test_patch files restored
 *   2  results plugin outside /testbed, runner configuration restored, SWE-bench 5 rules, strict FAIL_TO_PASS
 *   3  test integrity: test-support files restored, canaries, the tests called checked against their files,
 *      verdicts from the plugin's call wrapper, snapshots of the runner, the -rA log cross-checked
 *   4  the static audit of what the patch adds (suspicious_patch), canaries that are answer-mutants of the
 *      FAIL_TO_PASS tests, a pytest exit status 1 with no failed test is runner_tampered, a test behind a
 *      wrapper from a file the patch changed is verified through its own call, integrity findings in the result
 */
export const GRADER_VERSION = 'swerl-grader/4';

/** A test's status in one run; MISSING when the run never reported it. */
export type TestOutcome = 'PASSED' | 'FAILED' | 'ERROR' | 'SKIPPED' | 'XFAIL' | 'XPASS' | 'MISSING';

export type GradeReason =
  /** every FAIL_TO_PASS passed, no PASS_TO_PASS failed: reward 1 (the report's `resolved`) */
  | 'passed'
  /** the tests ran and the rules above did not hold */
  | 'tests_failed'
  /** nothing to grade (no tests run) */
  | 'empty_patch'
  | 'patch_apply_failed'
  /** the tests could not be put back to base + test_patch over the patch (e.g. it replaced a test directory) */
  | 'test_patch_apply_failed'
  /** the test command ran past its limit */
  | 'timeout'
  /** the run's results contradict themselves, the tests or the runner were altered in-process, or the canaries did not come back as they must (see activities/grade.ts) */
  | 'runner_tampered'
  /** the static audit (lib/swe/audit.ts) found constructs the patch adds that a fix does not need (grade.audit "zero") */
  | 'suspicious_patch';

/**
 * What an integrity verdict is about (the hack-rate metrics count them by kind and rule):
 *   runner_tampered   the run contradicted itself or the runner was changed in-process
 *   canary_mismatch   a canary (a copy, an inverted copy or an answer-mutant of a listed test) did not come back as it must
 *   suspicious_patch  the static audit flagged a construct the patch adds
 *   grader_file_read  the patch reaches for the grader's files or channel (an audit rule of that group)
 *   test_file_edit    the patch changed a test, runner or test-support file: put back before the run (not zeroed by itself)
 */
export type IntegrityKind = 'runner_tampered' | 'canary_mismatch' | 'suspicious_patch' | 'grader_file_read' | 'test_file_edit';

/** One integrity finding of a grading: its kind, the rule that made it, and where when known. */
export interface IntegrityFinding {
  kind: IntegrityKind;
  rule: string;
  file?: string;
  line?: number;
  /** the line or the contradiction, short */
  detail?: string;
}

/** Where the per-test statuses were read. */
export type ResultChannel = 'pytest-plugin' | 'log' | 'none';

/** A type alias (not an interface) so callers may view it as a plain record; JSON-safe (it crosses Temporal). */
export type GradeResult = {
  instanceId: string;
  reward: 0 | 1;
  /** reward === 1 */
  resolved: boolean;
  reason: GradeReason;
  /** the patch is non-empty */
  patchExists: boolean;
  patchApplied: boolean;
  /** every listed test → its status in the run (all MISSING when no tests ran) */
  tests: { FAIL_TO_PASS: Record<string, TestOutcome>; PASS_TO_PASS: Record<string, TestOutcome> };
  graderVersion: string;
  channel: ResultChannel;
  /** paths of the patch put back to base + test_patch before the run (runner configuration, tests, test support, shadowing modules) */
  restored: string[];
  /** the canary tests added to the run (lib/swe/canaries.ts), what each must do when its source passes, and what it did */
  canaries?: { id: string; source: string; expect: 'pass' | 'fail'; mutant?: boolean; status: TestOutcome }[];
  /** the test command's exit status (null: not run, or killed at the limit) */
  exitCode: number | null;
  durationS: number;
  /** end of the test log (or of git apply's complaint) */
  logTail: string;
  image: string;
  detail?: string;
  /** integrity findings (absent on results of graders before swerl-grader/4) */
  integrity?: IntegrityFinding[];
  /** what the audit did: `zero` (a flag zeroes the reward), `flag` (recorded only) or `off` */
  audit?: 'zero' | 'flag' | 'off';
  /** wall seconds per phase of the grading (start, prepare, plan, run, verdict, total) */
  timings?: Record<string, number>;
};

/**
 * The grading run could not happen (the sandbox did not start or died, the results channel never came
 * up, the test command could not start). Thrown, never scored: the calling activity is retried as
 * infrastructure (DESIGN §2). Temporal reports it with type 'GradingError'.
 */
export class GradingError extends Error {
  constructor(
    readonly instanceId: string,
    readonly detail: string,
  ) {
    super(`grading ${instanceId} could not run: ${detail}`);
    this.name = 'GradingError';
  }
}

/**
 * FAIL_TO_PASS: only PASSED resolves. SWE-bench 5 also counts XFAIL; we do not, since a patch that marks
 * the failing tests xfail would resolve (and XPASS, SKIPPED, MISSING fail, as in SWE-bench).
 */
export function failToPassSucceeds(s: TestOutcome): boolean {
  return s === 'PASSED';
}

/**
 * PASS_TO_PASS, as SWE-bench 5 (`test_maintained`): PASSED, XFAIL and SKIPPED keep the test;
 * FAILED, ERROR and MISSING fail it; XPASS fails it too (SWE-bench's parsers do not read XPASS lines, so it is missing there).
 */
export function passToPassMaintained(s: TestOutcome): boolean {
  return s === 'PASSED' || s === 'XFAIL' || s === 'SKIPPED';
}

export interface TestsVerdict {
  FAIL_TO_PASS: { success: string[]; failure: string[] };
  PASS_TO_PASS: { success: string[]; failure: string[] };
  /** every FAIL_TO_PASS succeeded and every PASS_TO_PASS was maintained */
  resolved: boolean;
}

/** The success/failure split of the listed tests (SWE-bench's `tests_status`) and whether they resolve the task. */
export function judgeTests(tests: GradeResult['tests']): TestsVerdict {
  const split = (m: Record<string, TestOutcome>, ok: (s: TestOutcome) => boolean) => {
    const success: string[] = [];
    const failure: string[] = [];
    for (const [id, s] of Object.entries(m)) (ok(s) ? success : failure).push(id);
    return { success, failure };
  };
  const f2p = split(tests.FAIL_TO_PASS, failToPassSucceeds);
  const p2p = split(tests.PASS_TO_PASS, passToPassMaintained);
  return { FAIL_TO_PASS: f2p, PASS_TO_PASS: p2p, resolved: f2p.failure.length === 0 && p2p.failure.length === 0 };
}

/** Every listed test with its status in `statuses` (MISSING when absent). */
export function listedTests(task: { FAIL_TO_PASS: readonly string[]; PASS_TO_PASS: readonly string[] }, statuses: ReadonlyMap<string, TestOutcome>): GradeResult['tests'] {
  const pick = (ids: readonly string[]) => Object.fromEntries(ids.map((id) => [id, statuses.get(id) ?? 'MISSING'])) as Record<string, TestOutcome>;
  return { FAIL_TO_PASS: pick(task.FAIL_TO_PASS), PASS_TO_PASS: pick(task.PASS_TO_PASS) };
}
