// The evaluation (DESIGN §1 evaluationRun, §8): N runs per task of a checkpoint, a model directory or any
// OpenAI-compatible server. Validates its config, fixes the plan, syncs our policy server when it serves
// the model, fans the (task, run) episodes out over child shards (so no history nears the event limit),
// then writes the report. Each episode is an idempotent stored activity result; an episode that could
// not happen is retried and, when its retries run out, recorded as an error, never as a model failure.
import {
  ActivityFailure,
  executeChild,
  getExternalWorkflowHandle,
  patched,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
  log,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.ts';
import { validateEvalConfig } from '../lib/eval/config.ts';
import { EVAL_DONE_SA, EVAL_PASS1_SA, evaluationStatusQuery, shardProgressSignal } from './evaluation-signals.ts';
import type { EvalItem, EvaluationRunResult, EvaluationShardInput, EvaluationStatus, ShardProgress, ShardResult } from './evaluation-shapes.ts';
import { TASK_QUEUES, type SyncPolicyInput } from './shapes.ts';
import { trackEvaluation } from './run-reporting.ts';
import { FailureType, INVALID_INPUT, nonRetryable, RetryPolicies } from '../lib/failures.ts';
import { lanesPerGroup, mapInLanes } from '../lib/pool.ts';
import { policyResync } from '../lib/policy-resync.ts';

type Activities = ReturnType<typeof createActivities>;

/** least workflow time between two progress signals of a shard, and between two search-attribute upserts */
const PROGRESS_EVERY_MS = 2000;
/** evaluations with config.tracking become MLflow runs (issue 13) */
const EVALUATION_TRACKING_PATCH = 'evaluation-mlflow-tracking';

/** Child ids derive from the evaluation id (an input), so a replayed history names the same children. */
export function shardWorkflowId(evalId: string, shard: number): string {
  return `${evalId}-shard-${shard}`;
}

/** The message of a failure and its causes, for the error record. */
function reasonOf(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let depth = 0; e && depth < 5; depth++) {
    const f = e as { message?: string; type?: string; cause?: unknown };
    if (f.message) parts.push(f.type ? `${f.type}: ${f.message}` : f.message);
    e = f.cause;
  }
  return parts.join(' <- ') || String(err);
}

export async function evaluationRun(rawConfig: unknown): Promise<EvaluationRunResult> {
  const v = validateEvalConfig(rawConfig);
  if (!v.ok) throw nonRetryable(FailureType.InvalidConfig, `invalid evaluation config: ${v.errors.join('; ')}`);
  const self = workflowInfo().workflowId;
  const evalId = v.config.evalId ?? self;
  const config = { ...v.config, evalId };
  const storeUrl = config.store.url;
  const status: EvaluationStatus = { evalId, phase: 'preparing', total: 0, done: 0, resolved: 0, errors: 0, pass1SoFar: null, shards: 0, summary: null };
  const shardCounts = new Map<number, ShardProgress>();
  let lastUpsert = -Infinity;
  const publish = (force: boolean) => {
    const counts = [...shardCounts.values()];
    status.done = counts.reduce((s, c) => s + c.done, 0);
    status.resolved = counts.reduce((s, c) => s + c.resolved, 0);
    status.errors = counts.reduce((s, c) => s + c.errors, 0);
    const scored = status.done - status.errors;
    status.pass1SoFar = scored > 0 ? status.resolved / scored : null;
    if (force || Date.now() - lastUpsert >= PROGRESS_EVERY_MS) {
      lastUpsert = Date.now();
      upsertSearchAttributes([
        { key: EVAL_DONE_SA, value: status.done },
        ...(status.pass1SoFar !== null ? [{ key: EVAL_PASS1_SA, value: status.pass1SoFar }] : []),
      ]);
    }
  };
  setHandler(evaluationStatusQuery, () => status);
  setHandler(shardProgressSignal, (p) => {
    const prev = shardCounts.get(p.shard);
    if (prev && prev.done >= p.done) return;
    shardCounts.set(p.shard, p);
    publish(false);
  });
  upsertSearchAttributes([{ key: EVAL_DONE_SA, value: 0 }]);

  const store = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '30 minutes',
    retry: RetryPolicies.short(),
  });
  const plan = await store.prepareEvaluation({ evalId, config });
  status.total = plan.taskIds.length * plan.runs;

  let policyUrl: string | undefined;
  let sync: SyncPolicyInput | undefined;
  const m = config.model;
  if (!('baseUrl' in m)) {
    status.phase = 'syncing';
    const learner = proxyActivities<Activities>({
      taskQueue: TASK_QUEUES.learner,
      startToCloseTimeout: '30 minutes',
      heartbeatTimeout: '2 minutes',
      retry: RetryPolicies.short(),
    });
    sync = 'run' in m
      ? { storeUrl, runId: m.run, checkpoint: plan.checkpoint!, model: 'policy' }
      : { storeUrl, runId: `eval-${evalId}`, checkpoint: -1, model: 'policy', modelDir: m.path };
    policyUrl = (await learner.syncPolicy(sync)).policyUrl;
  }

  status.phase = 'episodes';
  const items: EvalItem[] = [];
  for (let run = 0; run < plan.runs; run++) for (const taskId of plan.taskIds) items.push({ taskId, run });
  const shards: EvalItem[][] = [];
  for (let i = 0; i < items.length; i += config.shardSize) shards.push(items.slice(i, i + config.shardSize));
  status.shards = shards.length;
  const concurrentShards = Math.min(shards.length, config.concurrency);
  const lanes = lanesPerGroup(config.concurrency, concurrentShards);
  const episodeMinutes = config.episodeTimeoutMinutes + config.gradeTimeoutSeconds / 60 + 10;
  await mapInLanes(shards, Math.max(1, concurrentShards), async (items, i) => {
    const input: EvaluationShardInput = {
      evalId,
      storeUrl,
      shard: i,
      items,
      lanes,
      ...(policyUrl ? { policyUrl } : {}),
      ...(sync ? { sync } : {}),
      maxAttempts: config.maxAttempts,
      heartbeatTimeoutSeconds: config.heartbeatTimeoutSeconds,
      episodeMinutes,
    };
    const r: ShardResult = await executeChild(evaluationShard, { workflowId: shardWorkflowId(evalId, i), taskQueue: TASK_QUEUES.learner, args: [input] });
    shardCounts.set(i, r);
    publish(false);
  });

  status.phase = 'reporting';
  const summary = await store.writeEvaluationReport({ storeUrl, evalId });
  // config.tracking: the evaluation as an MLflow run (histories from before it have no tracking)
  if (config.tracking.mlflow && patched(EVALUATION_TRACKING_PATCH)) await trackEvaluation({ storeUrl, evalId, tracking: config.tracking });
  status.summary = summary;
  status.phase = 'done';
  upsertSearchAttributes([
    { key: EVAL_DONE_SA, value: status.done },
    { key: EVAL_PASS1_SA, value: summary.pass1 },
  ]);
  return { evalId, summary };
}

/** A slice of an evaluation's episodes with `lanes` in flight; reports absolute counts to its parent. */
export async function evaluationShard(input: EvaluationShardInput): Promise<ShardResult> {
  const parent = workflowInfo().parent;
  const progress: ShardProgress = { shard: input.shard, done: 0, resolved: 0, errors: 0 };
  let lastSignal = -Infinity;
  const report = async (force: boolean) => {
    if (!parent || (!force && Date.now() - lastSignal < PROGRESS_EVERY_MS)) return;
    lastSignal = Date.now();
    try {
      await getExternalWorkflowHandle(parent.workflowId).signal(shardProgressSignal, { ...progress });
    } catch (err) {
      log.warn('could not signal the evaluation', { error: String(err) });
    }
  };
  const episodes = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: `${Math.ceil(input.episodeMinutes)} minutes`,
    heartbeatTimeout: `${input.heartbeatTimeoutSeconds} seconds`,
    retry: RetryPolicies.sandboxed(input.maxAttempts, [...INVALID_INPUT, FailureType.PolicyUnavailable, FailureType.PolicyRejected]),
  });
  const bookkeeping = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '5 minutes',
    retry: RetryPolicies.short(20),
  });
  const learner = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.learner,
    startToCloseTimeout: '30 minutes',
    heartbeatTimeout: '2 minutes',
    retry: RetryPolicies.short(),
  });

  // our policy server went away (its learner worker restarted): one shared syncPolicy, then retry
  const sync = input.sync;
  const policy = policyResync(input.policyUrl, sync && (async () => (await learner.syncPolicy(sync)).policyUrl));
  const runEpisode = (it: EvalItem) =>
    policy.run((url) => episodes.evalEpisode({ storeUrl: input.storeUrl, evalId: input.evalId, taskId: it.taskId, run: it.run, ...(url ? { policyUrl: url } : {}) }));

  await mapInLanes(input.items, input.lanes, async (it) => {
    try {
      const s = await runEpisode(it);
      if (s.resolved) progress.resolved++;
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      // the episode could not happen and its retries ran out: an error with its reason, not a model result
      progress.errors++;
      await bookkeeping.recordEvalError({ storeUrl: input.storeUrl, evalId: input.evalId, taskId: it.taskId, run: it.run, reason: reasonOf(err.cause ?? err) });
    }
    progress.done++;
    await report(false);
  });
  await report(true);
  return { ...progress };
}
