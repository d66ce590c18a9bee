// Temporal activities for SWE tasks (rollout queue): list, build images, validate, grade.
// Inputs are references (tasks file + instance id), never the task records themselves.
import { Context } from '@temporalio/activity';
import { readFile, stat } from 'node:fs/promises';
import { filterReason, parseQualityLines, recordQuality, type TaskFilter, type TaskQuality } from '../lib/swe/quality.ts';
import { formatLoadError, loadTasks, type LoadedTasks, type SweTask } from '../lib/swe/task.ts';
import { gradePatch, validateTask, type GradeResult } from './grade.ts';
import { buildImages, type BuildEvent } from './images.ts';
import { createSandboxBackend } from './sandbox/index.ts';
import { measureTaskQuality } from './task-quality.ts';
import { FailureType, nonRetryable } from '../lib/failures.ts';

const loaded = new Map<string, { mtimeMs: number; tasks: LoadedTasks }>();

async function tasksOf(tasksFile: string): Promise<LoadedTasks> {
  let mtimeMs: number;
  try {
    mtimeMs = (await stat(tasksFile)).mtimeMs;
  } catch {
    throw nonRetryable(FailureType.InvalidTask, `tasksFile ${JSON.stringify(tasksFile)} does not exist`);
  }
  const c = loaded.get(tasksFile);
  if (c && c.mtimeMs === mtimeMs) return c.tasks;
  const tasks = await loadTasks(tasksFile);
  loaded.set(tasksFile, { mtimeMs, tasks });
  return tasks;
}

async function taskOf(tasksFile: string, instanceId: string): Promise<SweTask> {
  const { tasks } = await tasksOf(tasksFile);
  const t = tasks.find((x) => x.instance_id === instanceId);
  if (!t) throw nonRetryable(FailureType.InvalidTask, `instanceId ${JSON.stringify(instanceId)} is not a valid task in ${tasksFile}`);
  return t;
}

/** Heartbeats every 10 s while `p` runs, when called as an activity. */
export async function heartbeating<T>(what: string, p: Promise<T>): Promise<T> {
  let ctx: Context | undefined;
  try {
    ctx = Context.current();
  } catch {
    return p;
  }
  const t = setInterval(() => ctx!.heartbeat(what), 10_000);
  try {
    return await p;
  } finally {
    clearInterval(t);
  }
}

export async function listSweTasks(input: { tasksFile: string }): Promise<{ ids: string[]; loadErrors: string[] }> {
  const { tasks, errors } = await tasksOf(input.tasksFile);
  return { ids: tasks.map((t) => t.instance_id), loadErrors: errors.map(formatLoadError) };
}

/** The ids of the tasks that pass `filter` (env.taskFilter), and how many each reason left out. */
export async function filteredSweTaskIds(input: { tasksFile: string; filter: TaskFilter }): Promise<{ ids: string[]; loadErrors: string[]; excluded: Record<string, number> }> {
  const { tasks, errors } = await tasksOf(input.tasksFile);
  let side: Map<string, TaskQuality> | undefined;
  if (input.filter.qualityFile) {
    try {
      side = parseQualityLines(await readFile(input.filter.qualityFile, 'utf8'), input.filter.qualityFile);
    } catch (e) {
      throw nonRetryable(FailureType.InvalidConfig, `config.env.taskFilter.qualityFile: ${(e as Error).message}`);
    }
  }
  const ids: string[] = [];
  const excluded: Record<string, number> = {};
  for (const t of tasks) {
    const why = filterReason(t, input.filter, side?.get(t.instance_id) ?? recordQuality(t));
    if (why === undefined) ids.push(t.instance_id);
    else {
      const kind = why.replace(/[\d.]+/g, 'N');
      excluded[kind] = (excluded[kind] ?? 0) + 1;
    }
  }
  return { ids, loadErrors: errors.map(formatLoadError), excluded };
}

export async function buildSweImages(input: { tasksFile: string; concurrency?: number }): Promise<BuildEvent[]> {
  const { tasks } = await tasksOf(input.tasksFile);
  return heartbeating('building images', buildImages(tasks, input.concurrency === undefined ? {} : { concurrency: input.concurrency }));
}

export interface TaskValidation {
  instanceId: string;
  valid: boolean;
  problems: string[];
  durationS: number;
  /** answer-mutant canaries verified for the task (0: its FAIL_TO_PASS tests admit none; absent: not known) */
  mutants?: number;
  /** with `quality`: the measured quality of the task's tests (lib/swe/quality.ts) */
  quality?: TaskQuality;
}

export async function validateSweTask(input: { tasksFile: string; instanceId: string; timeoutS?: number; quality?: { k: number; seed: number } }): Promise<TaskValidation> {
  const task = await taskOf(input.tasksFile, input.instanceId);
  const backend = await createSandboxBackend();
  const timeout = input.timeoutS ? { timeoutS: input.timeoutS } : {};
  if (input.quality) {
    const t0 = Date.now();
    const m = await heartbeating(`measuring ${input.instanceId}`, measureTaskQuality(task, { backend, ...input.quality, ...timeout }));
    return {
      instanceId: task.instance_id,
      valid: m.validation.valid,
      problems: m.validation.problems,
      durationS: (Date.now() - t0) / 1000,
      mutants: m.validation.mutants,
      quality: m.quality,
    };
  }
  const r = await heartbeating(`validating ${input.instanceId}`, validateTask({ task, backend, ...timeout }));
  return { instanceId: r.instanceId, valid: r.valid, problems: r.problems, durationS: r.durationS, mutants: r.mutants };
}

export async function gradeSwePatch(input: { tasksFile: string; instanceId: string; patch: string; timeoutS?: number }): Promise<GradeResult> {
  const task = await taskOf(input.tasksFile, input.instanceId);
  const backend = await createSandboxBackend();
  return heartbeating(`grading ${input.instanceId}`, gradePatch({ task, patch: input.patch, backend, ...(input.timeoutS ? { timeoutS: input.timeoutS } : {}) }));
}

/** For the rollout worker: `...sweActivities` into its activity map. */
export const sweActivities = { listSweTasks, buildSweImages, validateSweTask, gradeSwePatch };
