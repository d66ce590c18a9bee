// Reward (DESIGN §3, DeepSWE): in a fresh container of the task image apply the patch, restore the
// test files and apply test_patch on top, run test_cmd with a 5-minute limit, parse the log;
// reward 1 iff every FAIL_TO_PASS and PASS_TO_PASS test passed.
import type { Sandbox, SandboxBackend, SandboxLimits } from '../lib/sandbox.ts';
import { filesInPatch, type SweTask } from '../lib/swe/task.ts';
import { parseTestLog, type TestStatus } from '../lib/swe/testlog.ts';
import { ensureTaskImage } from './images.ts';
import { SandboxDeadError, shq } from './sandbox/common.ts';

export const GRADE_TIMEOUT_S = 300;
const LOG_TAIL_CHARS = 4000;
const WORK = '/tmp/swerl-grade';

export type GradeReason =
  | 'passed'
  | 'tests_failed'
  | 'empty_patch'
  | 'patch_apply_failed'
  | 'test_patch_apply_failed'
  | 'timeout'
  | 'sandbox_died';

export type GradedStatus = TestStatus | 'MISSING';

/** A type alias (not an interface) so callers may view it as a plain record. */
export type GradeResult = {
  reward: 0 | 1;
  reason: GradeReason;
  /** FAIL_TO_PASS and PASS_TO_PASS ids → status in the log ('MISSING' when the log does not name it) */
  tests: Record<string, GradedStatus>;
  durationS: number;
  /** end of the test log (or of git apply's complaint) */
  logTail: string;
  image: string;
  detail?: string;
};

export interface GradeInput {
  task: SweTask;
  /** the agent's patch (`git diff` against the task's base) */
  patch: string;
  backend: SandboxBackend;
  timeoutS?: number;
  limits?: Partial<SandboxLimits>;
}

/** Runs the task's tests in a fresh sandbox with `patch` (may be empty) + test_patch. */
export async function runTaskTests(input: GradeInput): Promise<GradeResult> {
  const { task, patch, backend } = input;
  const timeoutS = input.timeoutS ?? GRADE_TIMEOUT_S;
  const t0 = Date.now();
  const image = (await ensureTaskImage(task)).image;
  const result = (reason: GradeReason, tests: Record<string, GradedStatus>, log: string, detail?: string): GradeResult => {
    const ids = [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS];
    const allPass = reason === 'tests_failed' && ids.every((id) => tests[id] === 'PASSED');
    const r: GradeResult = {
      reward: allPass ? 1 : 0,
      reason: allPass ? 'passed' : reason,
      tests,
      durationS: (Date.now() - t0) / 1000,
      logTail: log.slice(-LOG_TAIL_CHARS),
      image,
    };
    if (detail) r.detail = detail;
    return r;
  };
  const sb: Sandbox = await backend.start(image, input.limits, { 'swerl.purpose': 'grade', 'swerl.task': task.instance_id.slice(0, 63) });
  try {
    const files = [{ path: 'test.diff', content: task.test_patch }];
    const hasPatch = patch.trim() !== '';
    if (hasPatch) files.push({ path: 'patch.diff', content: patch.endsWith('\n') ? patch : patch + '\n' });
    await sb.copyIn(files, WORK);
    if (hasPatch) {
      const a = await sb.exec(`git apply --whitespace=nowarn ${WORK}/patch.diff`, 60);
      if (a.exit !== 0) return result('patch_apply_failed', {}, a.stdout + a.stderr, `git apply exit ${a.exit}`);
    }
    // An agent may have edited the tests: put every file test_patch touches back to the base commit
    // (or remove it when the base lacks it), then apply test_patch on top.
    const restore = filesInPatch(task.test_patch)
      .map((f) => `if git cat-file -e HEAD:${shq(f)} 2>/dev/null; then git checkout -q HEAD -- ${shq(f)}; else rm -rf -- ${shq(f)}; fi`)
      .join('\n');
    const tp = await sb.exec(`set -e\n${restore}\ngit apply --whitespace=nowarn ${WORK}/test.diff`, 60);
    if (tp.exit !== 0) return result('test_patch_apply_failed', {}, tp.stdout + tp.stderr, `git apply test_patch exit ${tp.exit}`);
    const run = await sb.exec(task.test_cmd, timeoutS, { maxOutputBytes: 16 << 20 });
    const log = run.stdout + (run.stderr ? `\n${run.stderr}` : '');
    const parsed = parseTestLog(log);
    const tests: Record<string, GradedStatus> = {};
    for (const id of [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS]) tests[id] = parsed.get(id) ?? 'MISSING';
    if (run.timedOut) return result('timeout', tests, log, `test_cmd ran past ${timeoutS} s`);
    return result('tests_failed', tests, log);
  } catch (e) {
    if (e instanceof SandboxDeadError) return result('sandbox_died', {}, '', e.message);
    throw e;
  } finally {
    await sb.stop().catch(() => undefined);
  }
}

/** DeepSWE's binary reward for the agent's patch. An empty patch scores 0 without running tests. */
export async function gradePatch(input: GradeInput): Promise<GradeResult> {
  if (input.patch.trim() === '') {
    const image = await ensureTaskImage(input.task).then((e) => e.image);
    return { reward: 0, reason: 'empty_patch', tests: {}, durationS: 0, logTail: '', image };
  }
  return runTaskTests(input);
}

export interface ValidationResult {
  instanceId: string;
  valid: boolean;
  problems: string[];
  durationS: number;
  /** statuses without the fix (test_patch only) and with the gold patch */
  before: Record<string, GradedStatus>;
  after: Record<string, GradedStatus>;
}

/** A task is valid when, with test_patch alone, every FAIL_TO_PASS fails and every PASS_TO_PASS passes, and with the gold patch all pass. */
export async function validateTask(input: { task: SweTask; backend: SandboxBackend; timeoutS?: number }): Promise<ValidationResult> {
  const { task } = input;
  const t0 = Date.now();
  const [before, after] = await Promise.all([
    runTaskTests({ ...input, patch: '' }),
    runTaskTests({ ...input, patch: task.patch }),
  ]);
  const problems: string[] = [];
  if (!task.FAIL_TO_PASS.length) problems.push('FAIL_TO_PASS is empty');
  for (const [label, r] of [
    ['without the fix', before],
    ['with the gold patch', after],
  ] as const) {
    if (r.reason !== 'tests_failed' && r.reason !== 'passed') problems.push(`${label}: ${r.reason}${r.detail ? ` (${r.detail})` : ''}`);
  }
  if (before.reason === 'tests_failed' || before.reason === 'passed') {
    for (const id of task.FAIL_TO_PASS) if (before.tests[id] === 'PASSED') problems.push(`FAIL_TO_PASS ${id} passes without the fix`);
    for (const id of task.PASS_TO_PASS) if (before.tests[id] !== 'PASSED') problems.push(`PASS_TO_PASS ${id} is ${before.tests[id]} without the fix`);
  }
  if (after.reason === 'tests_failed' || after.reason === 'passed') {
    for (const id of [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS]) {
      if (after.tests[id] !== 'PASSED') problems.push(`${id} is ${after.tests[id]} with the gold patch`);
    }
  }
  return {
    instanceId: task.instance_id,
    valid: problems.length === 0,
    problems,
    durationS: (Date.now() - t0) / 1000,
    before: before.tests,
    after: after.tests,
  };
}
