// SWE-bench harness-shaped reports (pure): one `report.json` per instance, as swebench's
// `get_eval_report` writes it, and the run summary its `make_run_report` writes (schema_version 2),
// so tools that read the official harness's output read ours. `swerl grade` and evaluationRun
// write both through these functions, so the same patches give byte-identical reports.
import { GRADER_VERSION, judgeTests, type GradeResult } from './grading.ts';
import type { Prediction } from './predictions.ts';

export interface TestsStatus {
  FAIL_TO_PASS: { success: string[]; failure: string[] };
  PASS_TO_PASS: { success: string[]; failure: string[] };
  FAIL_TO_FAIL: { success: string[]; failure: string[] };
  PASS_TO_FAIL: { success: string[]; failure: string[] };
}

export interface InstanceReport {
  patch_is_None: boolean;
  patch_exists: boolean;
  patch_successfully_applied: boolean;
  resolved: boolean;
  /** always false here: a grading that could not run throws and gets no report (it is in the summary's error_ids) */
  infra_failure: boolean;
  /** absent when no tests ran (no patch, empty patch) */
  tests_status?: TestsStatus;
  /** ours, beside the harness's keys: which grader gave the verdict and why */
  grader_version?: string;
  reason?: string;
}

/**
 * `{[instance_id]: InstanceReport}` for a prediction and its grade. `grade` is undefined only when the
 * patch is None or empty (nothing was run: the harness's flags plus our grader_version and reason).
 * F2F/P2F stay empty: our tasks carry no such lists.
 */
export function instanceReport(prediction: Pick<Prediction, 'instance_id' | 'model_patch'>, grade?: GradeResult): Record<string, InstanceReport> {
  const id = prediction.instance_id;
  const patch = prediction.model_patch;
  const r: InstanceReport = {
    patch_is_None: patch === null,
    patch_exists: patch !== null && patch.trim() !== '',
    patch_successfully_applied: false,
    resolved: false,
    infra_failure: false,
  };
  if (grade && !r.patch_exists) return { [id]: { ...r, grader_version: grade.graderVersion, reason: grade.reason } };
  // an empty patch is scored 0 by the grader's rules without a run: its verdict carries the version too
  if (!grade) return { [id]: r.patch_exists ? r : { ...r, grader_version: GRADER_VERSION, reason: 'empty_patch' } };
  if (grade.instanceId !== id) throw new Error(`instanceReport: grade is for ${JSON.stringify(grade.instanceId)}, prediction for ${JSON.stringify(id)}`);
  r.patch_successfully_applied = grade.patchApplied;
  r.resolved = grade.resolved;
  if (grade.patchApplied) {
    const v = judgeTests(grade.tests);
    r.tests_status = {
      FAIL_TO_PASS: v.FAIL_TO_PASS,
      PASS_TO_PASS: v.PASS_TO_PASS,
      FAIL_TO_FAIL: { success: [], failure: [] },
      PASS_TO_FAIL: { success: [], failure: [] },
    };
  }
  r.grader_version = grade.graderVersion;
  r.reason = grade.reason;
  return { [id]: r };
}

export interface RunSummary {
  total_instances: number;
  submitted_instances: number;
  completed_instances: number;
  resolved_instances: number;
  unresolved_instances: number;
  empty_patch_instances: number;
  error_instances: number;
  completed_ids: string[];
  incomplete_ids: string[];
  empty_patch_ids: string[];
  submitted_ids: string[];
  resolved_ids: string[];
  unresolved_ids: string[];
  error_ids: string[];
  /** instance id → why its grading could not run (ours) */
  error_reasons: Record<string, string>;
  grader_version: string;
  schema_version: 2;
}

/**
 * The run summary (`make_run_report`'s counts and id lists). `datasetIds`: every task of the tasks file;
 * `reports`: instance reports written; `errors`: instance id → why grading could not run (no report).
 * As the harness: a None or empty patch is `empty_patch`, not completed; a task without a prediction is incomplete.
 */
export function runSummary(input: {
  datasetIds: readonly string[];
  predictions: readonly Pick<Prediction, 'instance_id' | 'model_patch'>[];
  reports: ReadonlyMap<string, InstanceReport>;
  errors: ReadonlyMap<string, string>;
  graderVersion: string;
}): RunSummary {
  const byId = new Map(input.predictions.map((p) => [p.instance_id, p]));
  const sets = { completed: [] as string[], incomplete: [] as string[], empty: [] as string[], resolved: [] as string[], unresolved: [] as string[], error: [] as string[] };
  for (const id of input.datasetIds) {
    const p = byId.get(id);
    if (!p) {
      sets.incomplete.push(id);
      continue;
    }
    if (p.model_patch === null || p.model_patch.trim() === '') {
      sets.empty.push(id);
      continue;
    }
    const r = input.reports.get(id);
    if (!r) {
      sets.error.push(id);
      continue;
    }
    sets.completed.push(id);
    (r.resolved ? sets.resolved : sets.unresolved).push(id);
  }
  const sorted = (a: string[]) => [...a].sort();
  const errorReasons: Record<string, string> = {};
  for (const id of sorted(sets.error)) errorReasons[id] = input.errors.get(id) ?? 'no report';
  return {
    total_instances: input.datasetIds.length,
    submitted_instances: input.predictions.length,
    completed_instances: sets.completed.length,
    resolved_instances: sets.resolved.length,
    unresolved_instances: sets.unresolved.length,
    empty_patch_instances: sets.empty.length,
    error_instances: sets.error.length,
    completed_ids: sorted(sets.completed),
    incomplete_ids: sorted(sets.incomplete),
    empty_patch_ids: sorted(sets.empty),
    submitted_ids: sorted(input.predictions.map((p) => p.instance_id)),
    resolved_ids: sorted(sets.resolved),
    unresolved_ids: sorted(sets.unresolved),
    error_ids: sorted(sets.error),
    error_reasons: errorReasons,
    grader_version: input.graderVersion,
    schema_version: 2,
  };
}

/** The text of a report file: JSON with 4-space indent and a final newline, as the harness prints it. */
export function reportJson(value: unknown): string {
  return JSON.stringify(value, null, 4) + '\n';
}

/** Directory names as the harness makes them: `model_name_or_path` with '/' → '__'. */
export function modelDirName(modelNameOrPath: string): string {
  return modelNameOrPath.replace(/\//g, '__');
}
