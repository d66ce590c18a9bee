// The official SWE-bench harness's own readers (swebench's get_predictions_from_file, make_run_report) run on a
// directory we wrote (scripts/checks/swebench_outputs.py), and the check that they count what we counted.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The run summary make_run_report writes for the predictions and reports under `dir` (`work`: its scratch directory). */
export function harnessRunSummary(dir: string, tasksFile: string, runId: string, work: string): Record<string, unknown> {
  const py = execFileSync('bash', [join(ROOT, 'scripts/ensure-python.sh'), 'swebench'], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .at(-1)!;
  const out = execFileSync(py, [join(ROOT, 'scripts/checks/swebench_outputs.py'), dir, tasksFile, runId, work], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, unknown>;
}

/** The counts and id lists of the run summary, as the harness names them. */
const SUMMARY_KEYS = [
  'total_instances',
  'submitted_instances',
  'completed_instances',
  'resolved_instances',
  'unresolved_instances',
  'empty_patch_instances',
  'error_instances',
  'completed_ids',
  'resolved_ids',
  'unresolved_ids',
  'empty_patch_ids',
  'error_ids',
  'incomplete_ids',
] as const;

/** Our run summary and the harness's agree on every count and id list. */
export function assertSummariesAgree(ours: Record<string, unknown>, theirs: Record<string, unknown>, label: string): void {
  for (const k of SUMMARY_KEYS) assert.deepEqual(ours[k], theirs[k], `${label}: ${k}`);
}
