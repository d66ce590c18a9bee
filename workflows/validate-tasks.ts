// validateTasks (DESIGN §1): for each task, tests with only test_patch (FAIL_TO_PASS must fail)
// and with the gold patch (all must pass); reports broken tasks. Bounded parallelism.
import { ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type * as swe from '../activities/swe.ts';

export interface ValidateTasksInput {
  tasksFile: string;
  /** only these tasks (default: every task in the file) */
  instanceIds?: string[];
  /** validations at once (each uses two sandboxes) */
  concurrency?: number;
  timeoutS?: number;
}

export interface ValidateTasksResult {
  results: swe.TaskValidation[];
  valid: number;
  invalid: number;
  /** records of the tasks file that did not load (line and field) */
  loadErrors: string[];
}

const { listSweTasks } = proxyActivities<typeof swe>({
  taskQueue: 'rollout',
  startToCloseTimeout: '2 minutes',
  retry: { maximumAttempts: 3, nonRetryableErrorTypes: ['InvalidTask'] },
});

const { validateSweTask } = proxyActivities<typeof swe>({
  taskQueue: 'rollout',
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3, initialInterval: '2s', maximumInterval: '30s', nonRetryableErrorTypes: ['InvalidTask'] },
});

export async function validateTasks(input: ValidateTasksInput): Promise<ValidateTasksResult> {
  if (!input || typeof input.tasksFile !== 'string' || input.tasksFile === '') {
    throw ApplicationFailure.nonRetryable(`tasksFile must be a non-empty path, got ${JSON.stringify(input?.tasksFile)}`, 'InvalidInput');
  }
  const concurrency = input.concurrency ?? 2;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) {
    throw ApplicationFailure.nonRetryable(`concurrency must be an integer in 1..64, got ${input.concurrency}`, 'InvalidInput');
  }
  const { ids, loadErrors } = await listSweTasks({ tasksFile: input.tasksFile });
  let todo = ids;
  if (input.instanceIds) {
    const missing = input.instanceIds.filter((i) => !ids.includes(i));
    if (missing.length) throw ApplicationFailure.nonRetryable(`instanceIds not in ${input.tasksFile}: ${missing.join(', ')}`, 'InvalidInput');
    todo = input.instanceIds;
  }
  const results: swe.TaskValidation[] = new Array(todo.length);
  let next = 0;
  const lane = async () => {
    while (next < todo.length) {
      const i = next++;
      const instanceId = todo[i]!;
      try {
        results[i] = await validateSweTask({ tasksFile: input.tasksFile, instanceId, ...(input.timeoutS ? { timeoutS: input.timeoutS } : {}) });
      } catch (e) {
        results[i] = { instanceId, valid: false, problems: [`validation failed: ${(e as Error).message}`], durationS: 0 };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, Math.max(todo.length, 1)) }, lane));
  const valid = results.filter((r) => r.valid).length;
  return { results, valid, invalid: results.length - valid, loadErrors };
}
