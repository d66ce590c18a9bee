// The quality of any task's tests (issue 28; lib/swe/quality.ts), measured through the grader itself
// (activities/grade.ts), so a hand-made SWE-bench task and a factory task are measured alike:
//   the task is valid (validateTask: FAIL_TO_PASS fail without the fix, all pass with it) and the gold patch
//   passes a second time; K wrong fixes at the fix's site (lib/factory/alternatives.ts, from the files the gold
//   patch changes, read in a sandbox of the task's image) are graded like any patch, and the share the tests
//   reject is the strength; the FAIL_TO_PASS count, the gold run's wall time and the dedupe key complete it.
import type { SandboxBackend, SandboxLimits } from '../lib/sandbox.ts';
import { filesInPatch, type SweTask } from '../lib/swe/task.ts';
import { judgeTests } from '../lib/swe/grading.ts';
import { QUALITY_VERSION, type TaskQuality } from '../lib/swe/quality.ts';
import { wrongFixes, type ChangedFile } from '../lib/factory/alternatives.ts';
import { dedupeKey, treePatch } from '../lib/factory/patch.ts';
import { hashInts, hashString } from '../lib/seed.ts';
import { shq } from '../lib/shell.ts';
import { ensureTaskImage } from './images.ts';
import { gradePatch, GradingError, validateTask, type ValidationResult } from './grade.ts';

export interface QualityOptions {
  backend: SandboxBackend;
  /** wrong fixes tried */
  k: number;
  seed: number;
  timeoutS?: number;
  limits?: Partial<SandboxLimits>;
}

/** The files the gold patch changes, before and after it, as the task's image has them. */
export async function goldChange(task: SweTask, backend: SandboxBackend, limits?: Partial<SandboxLimits>): Promise<ChangedFile[]> {
  const paths = filesInPatch(task.patch);
  if (paths.length === 0) return [];
  const { image } = await ensureTaskImage(task);
  const sb = await backend.start(image, limits, { 'swerl.purpose': 'quality', 'swerl.task': task.instance_id.slice(0, 63) });
  try {
    await sb.copyIn([{ path: 'gold.diff', content: task.patch.endsWith('\n') ? task.patch : `${task.patch}\n` }], '/tmp/swerl-quality');
    const mark = '@@swerl-file';
    const show = (side: string) => paths.map((p) => `printf '\\n${mark} ${side} %s\\n' ${shq(p)}; cat -- ${shq(p)} 2>/dev/null`).join('\n');
    const r = await sb.exec(['cd /testbed', show('base'), 'git apply --whitespace=nowarn /tmp/swerl-quality/gold.diff || exit 3', show('gold')].join('\n'), 120, {
      maxOutputBytes: 64 << 20,
    });
    if (r.exit === 3) throw new Error(`the gold patch does not apply to the image of ${task.instance_id}: ${r.stderr.slice(-300)}`);
    if (r.exit !== 0) throw new GradingError(task.instance_id, `reading the files of the gold patch failed (exit ${r.exit}): ${r.stderr.slice(-300)}`);
    const text = new Map<string, string>();
    const parts = `\n${r.stdout}`.split(`\n${mark} `).slice(1);
    for (const part of parts) {
      const nl = part.indexOf('\n');
      text.set(part.slice(0, nl), part.slice(nl + 1));
    }
    return paths.map((path) => ({ path, base: text.get(`base ${path}`) ?? '', gold: text.get(`gold ${path}`) ?? '' }));
  } finally {
    await sb.stop().catch(() => undefined);
  }
}

/** Validates the task and measures its quality (see the file's head). */
export async function measureTaskQuality(task: SweTask, o: QualityOptions): Promise<{ validation: ValidationResult; quality: TaskQuality }> {
  const base = { task, backend: o.backend, ...(o.timeoutS ? { timeoutS: o.timeoutS } : {}), ...(o.limits ? { limits: o.limits } : {}) };
  const validation = await validateTask(base);
  const gold2 = await gradePatch({ ...base, patch: task.patch });
  const key = dedupeKey(task.repo, task.patch);
  const change = await goldChange(task, o.backend, o.limits);
  const fixes = await wrongFixes(change, o.k, hashInts(o.seed, hashString(key)));
  const baseFiles = Object.fromEntries(change.map((f) => [f.path, f.base]));
  const accepted: string[] = [];
  for (const w of fixes) {
    const g = await gradePatch({ ...base, patch: treePatch(baseFiles, w.files) });
    if (g.resolved) accepted.push(w.what);
  }
  const goldRuns = [judgeTests(validation.after).resolved && validation.problems.every((p) => !p.startsWith('with the gold patch')), gold2.resolved];
  return {
    validation,
    quality: {
      version: QUALITY_VERSION,
      gold: { runs: 2, passed: goldRuns.filter(Boolean).length },
      strength: { tried: fixes.length, rejected: fixes.length - accepted.length, score: fixes.length ? (fixes.length - accepted.length) / fixes.length : null, accepted },
      failToPass: task.FAIL_TO_PASS.length,
      passToPass: task.PASS_TO_PASS.length,
      testSeconds: Math.round(gold2.durationS * 100) / 100,
      dedupeKey: key,
    },
  };
}
