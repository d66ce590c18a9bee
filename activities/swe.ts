// Temporal activities for SWE tasks (rollout queue): list, build images, validate, grade.
// Inputs are references (tasks file + instance id), never the task records themselves.
import { Context } from '@temporalio/activity';
import { stat } from 'node:fs/promises';
import { formatLoadError, loadTasks, type LoadedTasks, type SweTask } from '../lib/swe/task.ts';
import { gradePatch, validateTask, type GradeResult } from './grade.ts';
import { buildImages, type BuildEvent } from './images.ts';
import { createSandboxBackend } from './sandbox/index.ts';
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
async function heartbeating<T>(what: string, p: Promise<T>): Promise<T> {
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
}

export async function validateSweTask(input: { tasksFile: string; instanceId: string; timeoutS?: number }): Promise<TaskValidation> {
  const task = await taskOf(input.tasksFile, input.instanceId);
  const backend = await createSandboxBackend();
  const r = await heartbeating(`validating ${input.instanceId}`, validateTask({ task, backend, ...(input.timeoutS ? { timeoutS: input.timeoutS } : {}) }));
  return { instanceId: r.instanceId, valid: r.valid, problems: r.problems, durationS: r.durationS, mutants: r.mutants };
}

export async function gradeSwePatch(input: { tasksFile: string; instanceId: string; patch: string; timeoutS?: number }): Promise<GradeResult> {
  const task = await taskOf(input.tasksFile, input.instanceId);
  const backend = await createSandboxBackend();
  return heartbeating(`grading ${input.instanceId}`, gradePatch({ task, patch: input.patch, backend, ...(input.timeoutS ? { timeoutS: input.timeoutS } : {}) }));
}

/** For the rollout worker: `...sweActivities` into its activity map. */
export const sweActivities = { listSweTasks, buildSweImages, validateSweTask, gradeSwePatch };
