// Best@K selection (DESIGN §8) over a finished evaluation, without rolling out again: per candidate the
// execution-free verifier's score and, in fresh containers, its regression and reproduction scores; per
// task the regression baseline and the generated reproduction tests. Every verifier result is a stored,
// idempotent activity result. Tasks go through child shards so no history nears the event limit; the
// report activity computes the selections and Best@K curves from the stored results.
import { executeChild, proxyActivities, setHandler, workflowInfo } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.ts';
import { validateBestOfKConfig } from '../lib/eval/config.ts';
import { selectionStatusQuery } from './evaluation-signals.ts';
import type { SelectionStatus } from '../lib/eval/shapes.ts';
import { TASK_QUEUES } from '../lib/training/shapes.ts';
import { FailureType, nonRetryable, RetryPolicies } from '../lib/failures.ts';
import { lanesPerGroup, mapInLanes } from '../lib/pool.ts';

type Activities = ReturnType<typeof createActivities>;

/** Activities per shard (each task needs up to 2 + 2K): keeps a shard's history far below the event limit. */
const ACTIVITIES_PER_SHARD = 1000;

export interface SelectionShardInput {
  storeUrl: string;
  evalId: string;
  selectionId: string;
  tasks: { taskId: string; runs: number[] }[];
  lanes: number;
  executionFree: boolean;
  executionBased: boolean;
  reproduction: boolean;
  maxAttempts: number;
}

export interface SelectionResult {
  evalId: string;
  selectionId: string;
  k: number;
  curves: Record<string, (number | null)[]>;
  resolvedAtK: Record<string, number>;
  reportKey: string;
}

export async function selectBestOfK(rawConfig: unknown): Promise<SelectionResult> {
  const v = validateBestOfKConfig(rawConfig);
  if (!v.ok) throw nonRetryable(FailureType.InvalidConfig, `invalid Best@K config: ${v.errors.join('; ')}`);
  const config = v.config;
  const self = workflowInfo().workflowId;
  const selectionId = config.selectionId ?? self;
  const status: SelectionStatus = { evalId: config.evalId, selectionId, phase: 'preparing', total: 0, done: 0, errors: 0 };
  setHandler(selectionStatusQuery, () => status);
  const store = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '30 minutes',
    retry: RetryPolicies.short(),
  });
  const plan = await store.prepareSelection({ selectionId, config });
  const ef = !!config.executionFree;
  const eb = !!config.executionBased;
  const repro = !!config.executionBased?.reproduction;
  const perTask = (t: { runs: number[] }) => (eb ? 2 : 0) + t.runs.length * ((ef ? 1 : 0) + (eb ? 1 : 0));
  status.total = plan.candidates.reduce((s, t) => s + perTask(t), 0);
  status.phase = 'verifying';

  const shards: SelectionShardInput['tasks'][] = [];
  let cur: SelectionShardInput['tasks'] = [];
  let load = 0;
  for (const t of plan.candidates.filter((x) => x.runs.length)) {
    if (cur.length && load + perTask(t) > ACTIVITIES_PER_SHARD) {
      shards.push(cur);
      [cur, load] = [[], 0];
    }
    cur.push(t);
    load += perTask(t);
  }
  if (cur.length) shards.push(cur);
  const concurrentShards = Math.max(1, Math.min(shards.length, config.concurrency));
  const lanes = lanesPerGroup(config.concurrency, concurrentShards);
  await mapInLanes(shards, concurrentShards, async (tasks, i) => {
    const r = await executeChild(selectionShard, {
      workflowId: `${config.evalId}-${selectionId}-shard-${i}`,
      taskQueue: TASK_QUEUES.learner,
      args: [
        {
          storeUrl: config.store.url,
          evalId: config.evalId,
          selectionId,
          tasks,
          lanes,
          executionFree: ef,
          executionBased: eb,
          reproduction: repro,
          maxAttempts: config.maxAttempts,
        },
      ],
    });
    status.done += r.done;
    status.errors += r.errors;
  });
  status.phase = 'selecting';
  const report = await store.writeSelectionReport({ storeUrl: config.store.url, evalId: config.evalId, selectionId });
  status.phase = 'done';
  return report;
}

/** The verifier activities of a slice of tasks, `lanes` tasks at a time. A result whose retries ran out is left out (the candidate has no score). */
export async function selectionShard(input: SelectionShardInput): Promise<{ done: number; errors: number }> {
  const verify = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '60 minutes',
    heartbeatTimeout: '2 minutes',
    retry: RetryPolicies.sandboxed(input.maxAttempts),
  });
  const ref = (taskId: string) => ({ storeUrl: input.storeUrl, evalId: input.evalId, selectionId: input.selectionId, taskId });
  let done = 0;
  let errors = 0;
  const counted = async <T>(p: Promise<T>): Promise<T | null> => {
    try {
      return await p;
    } catch {
      errors++;
      return null;
    } finally {
      done++;
    }
  };
  const oneTask = async (t: { taskId: string; runs: number[] }) => {
    const efs = input.executionFree ? t.runs.map((run) => counted(verify.executionFreeScore({ ...ref(t.taskId), run }))) : [];
    if (input.executionBased) {
      const [base, tests] = await Promise.all([counted(verify.regressionBaseline(ref(t.taskId))), counted(verify.generateReproductionTests(ref(t.taskId)))]);
      if (base !== null && tests !== null) await Promise.all(t.runs.map((run) => counted(verify.executeCandidate({ ...ref(t.taskId), run }))));
    }
    await Promise.all(efs);
  };
  await mapInLanes(input.tasks, input.lanes, oneTask);
  return { done, errors };
}
