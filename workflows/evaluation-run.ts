// The evaluation (DESIGN §1 evaluationRun, §8): N runs per task of a checkpoint, a model directory or any
// OpenAI-compatible server. Validates its config, fixes the plan, syncs our policy server when it serves
// the model, fans the (task, run) episodes out over child shards (so no history nears the event limit),
// then writes the report. Each episode is an idempotent stored activity result; an episode that could
// not happen is retried and, when its retries run out, recorded as an error, never as a model failure.
import {
  ActivityFailure,
  deprecatePatch,
  patched,
  executeChild,
  getExternalWorkflowHandle,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
  log,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.ts';
import { validateEvalConfig, type EvalConfig } from '../lib/eval/config.ts';
import { FailureType, INVALID_INPUT, nonRetryable, RetryPolicies } from '../lib/failures.ts';
import { lanesPerGroup, mapInLanes } from '../lib/pool.ts';
import { policyResync } from '../lib/policy-resync.ts';
import { EVAL_DONE_SA, EVAL_PASS1_SA, evaluationStatusQuery, shardProgressSignal } from './evaluation-signals.ts';
import type { EvalItem, EvalReportSummary, EvaluationRunResult, EvaluationShardInput, EvaluationStatus, ShardProgress, ShardResult } from '../lib/eval/shapes.ts';
import { TASK_QUEUES, type SyncPolicyInput } from '../lib/training/shapes.ts';
import { trackEvaluation } from './run-reporting.ts';

type Activities = ReturnType<typeof createActivities>;

/** least workflow time between two progress signals of a shard, and between two search-attribute upserts */
const PROGRESS_EVERY_MS = 2000;
/** Retired version branch (deprecated: no evaluation needs its old path): evaluations with config.tracking become MLflow runs. */
const EVALUATION_TRACKING_PATCH = 'evaluation-mlflow-tracking';
/** Evaluations started before contextBudget became responseBudget (recorded histories) read their input under the new name. */
const RESPONSE_BUDGET_PATCH = 'config-response-budget';

/** Child ids derive from the evaluation id (an input), so a replayed history names the same children. */
export function shardWorkflowId(evalId: string, shard: number): string {
  return `${evalId}-shard-${shard}`;
}

export async function evaluationRun(rawConfig: unknown): Promise<EvaluationRunResult> {
  deprecatePatch(EVALUATION_TRACKING_PATCH);
  const config = validEvalConfig(rawConfig);
  const { evalId } = config;
  const storeUrl = config.store.url;
  const progress = new EvaluationProgress(evalId);
  const store = proxyActivities<Activities>({ taskQueue: TASK_QUEUES.rollout, startToCloseTimeout: '30 minutes', retry: RetryPolicies.short() });

  const plan = await store.prepareEvaluation({ evalId, config });
  progress.status.total = plan.taskIds.length * plan.runs;
  const policy = await servePolicy(config, plan.checkpoint, progress);

  progress.status.phase = 'episodes';
  const items = Array.from({ length: plan.runs }, (_, run) => plan.taskIds.map((taskId): EvalItem => ({ taskId, run }))).flat();
  await runShards(config, items, policy, progress);

  progress.status.phase = 'reporting';
  const summary = await store.writeEvaluationReport({ storeUrl, evalId });
  // config.tracking: the evaluation as an MLflow run of its own
  if (config.tracking.mlflow) await trackEvaluation({ storeUrl, evalId, tracking: config.tracking });
  progress.finished(summary);
  return { evalId, summary };
}

function validEvalConfig(rawConfig: unknown): EvalConfig & { evalId: string } {
  const v = validateEvalConfig(rawConfig, { recorded: !patched(RESPONSE_BUDGET_PATCH) });
  if (!v.ok) throw nonRetryable(FailureType.InvalidConfig, `invalid evaluation config: ${v.errors.join('; ')}`);
  return { ...v.config, evalId: v.config.evalId ?? workflowInfo().workflowId };
}

/** The evaluation's status query and search attributes, from the shards' absolute counts. */
class EvaluationProgress {
  readonly status: EvaluationStatus;
  private readonly shards = new Map<number, ShardProgress>();
  private lastUpsert = -Infinity;

  constructor(evalId: string) {
    this.status = { evalId, phase: 'preparing', total: 0, done: 0, resolved: 0, errors: 0, pass1SoFar: null, shards: 0, summary: null };
    setHandler(evaluationStatusQuery, () => this.status);
    setHandler(shardProgressSignal, (p) => {
      const prev = this.shards.get(p.shard);
      if (prev && prev.done >= p.done) return;
      this.shardCounts(p);
    });
    upsertSearchAttributes([{ key: EVAL_DONE_SA, value: 0 }]);
  }

  /** A shard's counts so far (a signal) or at its end (its result). */
  shardCounts(p: ShardProgress): void {
    this.shards.set(p.shard, p);
    const counts = [...this.shards.values()];
    const s = this.status;
    s.done = counts.reduce((a, c) => a + c.done, 0);
    s.resolved = counts.reduce((a, c) => a + c.resolved, 0);
    s.errors = counts.reduce((a, c) => a + c.errors, 0);
    const scored = s.done - s.errors;
    s.pass1SoFar = scored > 0 ? s.resolved / scored : null;
    if (Date.now() - this.lastUpsert >= PROGRESS_EVERY_MS) {
      this.lastUpsert = Date.now();
      upsertSearchAttributes([{ key: EVAL_DONE_SA, value: s.done }, ...(s.pass1SoFar !== null ? [{ key: EVAL_PASS1_SA, value: s.pass1SoFar }] : [])]);
    }
  }

  finished(summary: EvalReportSummary): void {
    this.status.summary = summary;
    this.status.phase = 'done';
    upsertSearchAttributes([
      { key: EVAL_DONE_SA, value: this.status.done },
      { key: EVAL_PASS1_SA, value: summary.pass1 },
    ]);
  }
}

/** Our policy server and how to sync it again, when it serves the model (a run's checkpoint or a directory); none for an external server. */
async function servePolicy(
  config: EvalConfig & { evalId: string },
  checkpoint: number | null,
  progress: EvaluationProgress,
): Promise<Pick<EvaluationShardInput, 'policyUrl' | 'sync'>> {
  const m = config.model;
  if ('baseUrl' in m) return {};
  progress.status.phase = 'syncing';
  const storeUrl = config.store.url;
  const sync: SyncPolicyInput =
    'run' in m
      ? { storeUrl, runId: m.run, checkpoint: checkpoint!, model: 'policy' }
      : { storeUrl, runId: `eval-${config.evalId}`, checkpoint: -1, model: 'policy', modelDir: m.path };
  const { policyUrl } = await learnerActivities().syncPolicy(sync);
  return { policyUrl, sync };
}

function learnerActivities() {
  return proxyActivities<Activities>({ taskQueue: TASK_QUEUES.learner, startToCloseTimeout: '30 minutes', heartbeatTimeout: '2 minutes', retry: RetryPolicies.short() });
}

/** The episodes in child shards of at most `shardSize`, `concurrency` episodes in flight over all of them. */
async function runShards(
  config: EvalConfig & { evalId: string },
  items: EvalItem[],
  policy: Pick<EvaluationShardInput, 'policyUrl' | 'sync'>,
  progress: EvaluationProgress,
): Promise<void> {
  const shards: EvalItem[][] = [];
  for (let i = 0; i < items.length; i += config.shardSize) shards.push(items.slice(i, i + config.shardSize));
  progress.status.shards = shards.length;
  const concurrentShards = Math.min(shards.length, config.concurrency);
  const lanes = lanesPerGroup(config.concurrency, concurrentShards);
  const episodeMinutes = config.episodeTimeoutMinutes + config.gradeTimeoutSeconds / 60 + 10;
  await mapInLanes(shards, Math.max(1, concurrentShards), async (shardItems, shard) => {
    const input: EvaluationShardInput = {
      evalId: config.evalId,
      storeUrl: config.store.url,
      shard,
      items: shardItems,
      lanes,
      ...(policy.policyUrl ? { policyUrl: policy.policyUrl } : {}),
      ...(policy.sync ? { sync: policy.sync } : {}),
      maxAttempts: config.maxAttempts,
      heartbeatTimeoutSeconds: config.heartbeatTimeoutSeconds,
      episodeMinutes,
    };
    const r: ShardResult = await executeChild(evaluationShard, { workflowId: shardWorkflowId(config.evalId, shard), taskQueue: TASK_QUEUES.learner, args: [input] });
    progress.shardCounts(r);
  });
}

/** A slice of an evaluation's episodes with `lanes` in flight; reports absolute counts to its parent. */
export async function evaluationShard(input: EvaluationShardInput): Promise<ShardResult> {
  const progress: ShardProgress = { shard: input.shard, done: 0, resolved: 0, errors: 0 };
  const report = shardReporter(progress);
  const episodes = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: `${Math.ceil(input.episodeMinutes)} minutes`,
    heartbeatTimeout: `${input.heartbeatTimeoutSeconds} seconds`,
    retry: RetryPolicies.sandboxed(input.maxAttempts, [...INVALID_INPUT, FailureType.PolicyUnavailable, FailureType.PolicyRejected]),
  });
  const bookkeeping = proxyActivities<Activities>({ taskQueue: TASK_QUEUES.rollout, startToCloseTimeout: '5 minutes', retry: RetryPolicies.short(20) });
  // our policy server went away (its learner worker restarted): one shared syncPolicy, then retry
  const sync = input.sync;
  const policy = policyResync(input.policyUrl, sync && (async () => (await learnerActivities().syncPolicy(sync)).policyUrl));
  const ref = { storeUrl: input.storeUrl, evalId: input.evalId };

  await mapInLanes(input.items, input.lanes, async (it) => {
    try {
      const s = await policy.run((url) => episodes.evalEpisode({ ...ref, taskId: it.taskId, run: it.run, ...(url ? { policyUrl: url } : {}) }));
      if (s.resolved) progress.resolved++;
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      // the episode could not happen and its retries ran out: an error with its reason, not a model result
      progress.errors++;
      await bookkeeping.recordEvalError({ ...ref, taskId: it.taskId, run: it.run, reason: reasonOf(err.cause ?? err) });
    }
    progress.done++;
    await report(false);
  });
  await report(true);
  return { ...progress };
}

/** Signals the shard's counts to its parent, at most every PROGRESS_EVERY_MS unless forced. */
function shardReporter(progress: ShardProgress): (force: boolean) => Promise<void> {
  const parent = workflowInfo().parent;
  let lastSignal = -Infinity;
  return async (force) => {
    if (!parent || (!force && Date.now() - lastSignal < PROGRESS_EVERY_MS)) return;
    lastSignal = Date.now();
    try {
      await getExternalWorkflowHandle(parent.workflowId).signal(shardProgressSignal, { ...progress });
    } catch (err) {
      log.warn('could not signal the evaluation', { error: String(err) });
    }
  };
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
