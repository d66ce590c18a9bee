// validateTasks (DESIGN §1): for each task, tests with only test_patch (FAIL_TO_PASS must fail)
// and with the gold patch (all must pass); reports broken tasks. Bounded parallelism.
import { proxyActivities } from '@temporalio/workflow';
import type * as swe from '../activities/swe.ts';
import { FailureType, innermostMessage, nonRetryable, RetryPolicies } from '../lib/failures.ts';
import { mapInLanes } from '../lib/pool.ts';

export interface ValidateTasksInput {
  tasksFile: string;
  /** only these tasks (default: every task in the file) */
  instanceIds?: string[];
  /** validations at once (each uses two sandboxes) */
  concurrency?: number;
  timeoutS?: number;
  /** also measure each task's quality (gold twice, strength from k wrong fixes: lib/swe/quality.ts) */
  quality?: { k: number; seed: number };
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
  retry: RetryPolicies.short(3),
});

const { validateSweTask } = proxyActivities<typeof swe>({
  taskQueue: 'rollout',
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '1 minute',
  retry: RetryPolicies.sandboxed(3),
});

export async function validateTasks(input: ValidateTasksInput): Promise<ValidateTasksResult> {
  if (!input || typeof input.tasksFile !== 'string' || input.tasksFile === '') {
    throw nonRetryable(FailureType.InvalidInput, `tasksFile must be a non-empty path, got ${JSON.stringify(input?.tasksFile)}`);
  }
  const concurrency = input.concurrency ?? 2;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) {
    throw nonRetryable(FailureType.InvalidInput, `concurrency must be an integer in 1..64, got ${input.concurrency}`);
  }
  const { ids, loadErrors } = await listSweTasks({ tasksFile: input.tasksFile });
  let todo = ids;
  if (input.instanceIds) {
    const missing = input.instanceIds.filter((i) => !ids.includes(i));
    if (missing.length) throw nonRetryable(FailureType.InvalidInput, `instanceIds not in ${input.tasksFile}: ${missing.join(', ')}`);
    todo = input.instanceIds;
  }
  const results = await mapInLanes(todo, concurrency, async (instanceId): Promise<swe.TaskValidation> => {
    try {
      return await validateSweTask({
        tasksFile: input.tasksFile,
        instanceId,
        ...(input.timeoutS ? { timeoutS: input.timeoutS } : {}),
        ...(input.quality ? { quality: input.quality } : {}),
      });
    } catch (e) {
      return { instanceId, valid: false, problems: [`validation failed: ${innermostMessage(e)}`], durationS: 0 };
    }
  });
  const valid = results.filter((r) => r.valid).length;
  return { results, valid, invalid: results.length - valid, loadErrors };
}
