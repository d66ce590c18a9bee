// One RL iteration (DESIGN §1): sampleBatch → syncPolicy → bounded fan-out of rollouts →
// advantages + compact filtering (pure, here) → learnerStep → validation (config.eval) → metrics.
// A batch larger than `rolloutsPerWorkflow` fans out through `rolloutChunk` child workflows of whole
// tasks, so no workflow holds more than that many pending activities or nears the history limit.
import {
  ActivityFailure,
  deprecatePatch,
  executeChild,
  getExternalWorkflowHandle,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
  log,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.ts';
import { ROLLOUTS_PER_WORKFLOW_DEFAULT, tasksPerChildWorkflow, type TrainingConfig } from '../lib/config.ts';
import { groupAdvantages, mergeIterationSummaries, summariseIteration, type IterationSummary } from '../lib/grpo.ts';
import { COMPACT_FILTERED } from '../lib/types.ts';
import { hackRate } from '../lib/swe/integrity.ts';
import { validationEvalConfig, validationEvalId } from '../lib/eval/config.ts';
import { RetryPolicies } from '../lib/failures.ts';
import { lanesPerGroup, mapInLanes } from '../lib/pool.ts';
import { policyResync } from '../lib/policy-resync.ts';
import { evaluationRun } from './evaluation-run.ts';
import { chunkProgressSignal, phaseSignal, progressQuery, RL_ITERATION_SA, RL_PHASE_SA } from './signals.ts';
import type {
  IterationMetrics,
  IterationPhase,
  IterationProgress,
  LearnerItem,
  LearnerStepInput,
  LearnerStepResult,
  RlIterationInput,
  RlIterationResult,
  RolloutChunkInput,
  RolloutChunkProgress,
  RolloutChunkResult,
  RolloutFailure,
  RolloutInput,
  RolloutSummary,
  SyncPolicyResult,
} from '../lib/training/shapes.ts';
import { rolloutChunkWorkflowId, TASK_QUEUES } from '../lib/training/shapes.ts';

type Activities = ReturnType<typeof createActivities>;

/** failures listed in the metrics (the count is exact) */
export const MAX_REPORTED_FAILURES = 20;
/** progress signals a rollout child workflow sends its iteration (each costs both histories a few events) */
const PROGRESS_SIGNALS_PER_CHUNK = 10;
/** Retired version branches (deprecated: no run needs the old paths): rollouts in child workflows, validation, rollout summaries. */
const FAN_OUT_PATCH = 'rl-iteration-child-fan-out';
const VALIDATION_EVAL_PATCH = 'rl-iteration-validation-eval';
const ROLLOUT_SUMMARY_PATCH = 'rollout-activity-summaries';

export async function rlIteration(input: RlIterationInput): Promise<RlIterationResult> {
  for (const p of [FAN_OUT_PATCH, VALIDATION_EVAL_PATCH, ROLLOUT_SUMMARY_PATCH]) deprecatePatch(p);
  const { runId, n, checkpoint, config } = input;
  const storeUrl = config.store.url;
  const it = new IterationProgressView(n, config.batch.tasks * config.batch.samples);
  const { store, learner } = activitiesFor(config);

  const t0 = Date.now();
  await it.setPhase('sampling');
  const batch = await store.sampleBatch({ runId, n, config });

  await it.setPhase('syncing');
  const policy = await learner.syncPolicy(syncPolicyInput(input));

  await it.setPhase('rollouts');
  const tRollouts = Date.now();
  const rollouts = await rollOut(input, batch.taskIds, policy.policyUrl, it.progress);
  const rolloutSeconds = (Date.now() - tRollouts) / 1000;

  await it.setPhase('learning');
  const tLearner = Date.now();
  const step = await learner.learnerStep({ storeUrl, runId, n, checkpoint, ...rollouts.step });
  const learnerSeconds = (Date.now() - tLearner) / 1000;

  const validation = config.eval && step.checkpoint % config.eval.every === 0 ? await validate(input, step.checkpoint, it) : {};
  const metrics = iterationMetrics(input, rollouts, step, it.progress, { rolloutSeconds, learnerSeconds, iterationSeconds: (Date.now() - t0) / 1000 }, validation, policy.sync);
  await store.recordMetrics({ storeUrl, runId, metrics });
  await it.setPhase('done');
  return { checkpoint: step.checkpoint, metrics };
}

export function activitiesFor(config: TrainingConfig) {
  const store = proxyActivities<Activities>({ taskQueue: TASK_QUEUES.rollout, startToCloseTimeout: '5 minutes', retry: RetryPolicies.short() });
  const learner = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.learner,
    startToCloseTimeout: `${config.learner.timeoutMinutes} minutes`,
    // the learner's own bound (configs before it existed followed the rollouts')
    heartbeatTimeout: `${config.learner.heartbeatTimeoutSeconds ?? Math.max(30, config.rollout.heartbeatTimeoutSeconds)} seconds`,
    retry: RetryPolicies.short(),
  });
  const rollouts = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: `${config.rollout.startToCloseMinutes} minutes`,
    heartbeatTimeout: `${config.rollout.heartbeatTimeoutSeconds} seconds`,
    retry: RetryPolicies.rollout(config.rollout.maxAttempts),
  });
  return { store, learner, rollouts };
}

/** syncPolicy's input; only vLLM's weightSync is sent, so the inputs of other runs stay as they were. */
export function syncPolicyInput({ runId, checkpoint, config }: Pick<RlIterationInput, 'runId' | 'checkpoint' | 'config'>) {
  const weightSync = config.policy.baseUrl && config.policy.weightSync === 'vllm' ? { weightSync: 'vllm' as const } : {};
  return { storeUrl: config.store.url, runId, checkpoint, policyBaseUrl: config.policy.baseUrl, model: config.policy.model, ...weightSync };
}

/** The iteration's phase and rollout counts: the progress query, the search attributes and the parent run see them. */
export class IterationProgressView {
  readonly progress: IterationProgress;
  private readonly parent = workflowInfo().parent;

  constructor(
    private readonly n: number,
    total: number,
  ) {
    this.progress = { n, phase: 'starting', rolloutsDone: 0, rolloutsTotal: total, rolloutErrors: 0 };
    setHandler(progressQuery, () => this.progress);
  }

  async setPhase(phase: IterationPhase): Promise<void> {
    this.progress.phase = phase;
    upsertSearchAttributes([
      { key: RL_ITERATION_SA, value: this.n },
      { key: RL_PHASE_SA, value: phase },
    ]);
    if (!this.parent) return;
    try {
      await getExternalWorkflowHandle(this.parent.workflowId).signal(phaseSignal, { n: this.n, phase });
    } catch (err) {
      log.warn('could not signal the parent run', { error: String(err) });
    }
  }
}

/** The iteration's rollouts, run here or fanned out: what the learner step reads, their summary and failures. */
export interface Rollouts {
  step: Pick<LearnerStepInput, 'items' | 'itemParts'>;
  summary: IterationSummary;
  failures: RolloutFailure[];
  /** child workflows the rollouts fanned out through (absent when the iteration ran them itself) */
  rolloutWorkflows?: number;
}

/** Runs the batch's rollouts here, or through child workflows when it is larger than one workflow's share. */
export async function rollOut(input: RlIterationInput, taskIds: string[], policyUrl: string, progress: IterationProgress): Promise<Rollouts> {
  const { config } = input;
  if (progress.rolloutsTotal > (config.rolloutsPerWorkflow ?? ROLLOUTS_PER_WORKFLOW_DEFAULT)) {
    const chunks = await fanOutRollouts(input, taskIds, policyUrl, progress);
    return {
      step: { items: [], itemParts: chunks.map((c) => c.itemsKey) },
      summary: mergeIterationSummaries(chunks.map((c) => c.summary)),
      failures: chunks.flatMap((c) => c.failures),
      rolloutWorkflows: chunks.length,
    };
  }
  const r = await rollOutTasks(input, taskIds, config.maxInflightRollouts, policyUrl, (ok) => {
    progress.rolloutsDone++;
    if (!ok) progress.rolloutErrors++;
  });
  return { step: { items: r.items }, summary: r.summary, failures: r.failures };
}

/**
 * Every sample of `taskIds` with at most `lanes` rollouts in flight, then the group advantages. A rollout
 * whose retries ran out is an infrastructure loss: listed in `failures`, left out of the baselines, the
 * learner's batch and the means.
 */
export async function rollOutTasks(
  input: Pick<RlIterationInput, 'runId' | 'n' | 'checkpoint' | 'config'>,
  taskIds: string[],
  lanes: number,
  firstPolicyUrl: string,
  onDone: (ok: boolean) => void,
  /** an async streaming group's (RolloutInput.streaming); absent elsewhere, so other rollouts' inputs stay as they were */
  extra: Pick<RolloutInput, 'streaming'> = {},
): Promise<{ items: LearnerItem[]; summary: IterationSummary; failures: RolloutFailure[] }> {
  const { runId, n, checkpoint, config } = input;
  const { learner, rollouts } = activitiesFor(config);
  const failures: RolloutFailure[] = [];
  // the policy server went away (its learner worker restarted): one shared syncPolicy, then retry
  const policy = policyResync(firstPolicyUrl, async () => (await learner.syncPolicy(syncPolicyInput(input))).policyUrl);
  const inputs = taskIds.flatMap((taskId) =>
    Array.from({ length: config.batch.samples }, (_, sample): RolloutInput => ({
      storeUrl: config.store.url,
      runId,
      n,
      taskId,
      sample,
      checkpoint,
      policyUrl: firstPolicyUrl,
      ...extra,
    })),
  );
  const summaries = await mapInLanes(inputs, lanes, async (inp): Promise<RolloutSummary> => {
    try {
      const summary = await policy.run((url) => rollouts.rollout.executeWithOptions({ summary: `task ${inp.taskId} · sample ${inp.sample}` }, [{ ...inp, policyUrl: url! }]));
      onDone(true);
      return summary;
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      failures.push({ taskId: inp.taskId, sample: inp.sample, error: failureText(err) });
      onDone(false);
      return { key: '', taskId: inp.taskId, sample: inp.sample, reward: 0, end: 'error', steps: 0, tokens: 0, responseTokens: 0, seconds: 0 };
    }
  });
  const episodes = summaries.filter((x) => x.key !== '');
  const advantages = groupAdvantages(episodes, config.algorithm.advantage);
  return { items: episodes.map((x, i) => ({ key: x.key, advantage: advantages[i]!, end: x.end })), summary: summariseIteration(episodes), failures };
}

/** The last error of a failed activity, short enough for history. */
function failureText(err: ActivityFailure): string {
  const msg = err.cause?.message || err.message || 'unknown failure';
  return msg.length > 500 ? `${msg.slice(0, 497)}...` : msg;
}

/**
 * Whole tasks per child workflow; at most `maxInflightRollouts` rollouts in flight over all children
 * (children beyond that many wait their turn). Children signal their progress, absolute counts.
 */
async function fanOutRollouts(input: RlIterationInput, taskIds: string[], policyUrl: string, progress: IterationProgress): Promise<RolloutChunkResult[]> {
  const { runId, n, checkpoint, config } = input;
  const per = tasksPerChildWorkflow(config.rolloutsPerWorkflow ?? ROLLOUTS_PER_WORKFLOW_DEFAULT, config.batch.samples);
  const groups: string[][] = [];
  for (let i = 0; i < taskIds.length; i += per) groups.push(taskIds.slice(i, i + per));
  const running = Math.min(groups.length, config.maxInflightRollouts);
  const lanes = lanesPerGroup(config.maxInflightRollouts, running);
  const counts = new Map<number, RolloutChunkProgress>();
  const tally = () => {
    progress.rolloutsDone = [...counts.values()].reduce((s, p) => s + p.done, 0);
    progress.rolloutErrors = [...counts.values()].reduce((s, p) => s + p.errors, 0);
  };
  setHandler(chunkProgressSignal, (p) => {
    if ((counts.get(p.chunk)?.done ?? -1) < p.done) counts.set(p.chunk, p);
    tally();
  });
  return mapInLanes(groups, running, async (chunkTasks, chunk) => {
    const chunkInput: RolloutChunkInput = { runId, n, checkpoint, chunk, taskIds: chunkTasks, lanes, policyUrl, config };
    const r = await executeChild(rolloutChunk, {
      workflowId: rolloutChunkWorkflowId(runId, n, chunk),
      taskQueue: TASK_QUEUES.learner,
      args: [chunkInput],
      // its first task schedules up to a thousand activities: on a loaded host that can pass the 10 s default
      workflowTaskTimeout: '60s',
    });
    counts.set(chunk, { chunk, done: r.rollouts, errors: r.rolloutErrors });
    tally();
    return r;
  });
}

/**
 * A child of a fanned-out rlIteration: the rollouts of whole tasks, their group advantages, and the
 * learner items stored for the parent's learnerStep; progress signalled to the parent every tenth.
 */
export async function rolloutChunk(input: RolloutChunkInput): Promise<RolloutChunkResult> {
  deprecatePatch(ROLLOUT_SUMMARY_PATCH);
  const { runId, n, chunk, config } = input;
  const parent = workflowInfo().parent;
  const total = input.taskIds.length * config.batch.samples;
  const every = Math.max(1, Math.ceil(total / PROGRESS_SIGNALS_PER_CHUNK));
  let done = 0;
  let errors = 0;
  const r = await rollOutTasks(input, input.taskIds, input.lanes, input.policyUrl, (ok) => {
    done++;
    if (!ok) errors++;
    if (parent && done % every === 0 && done < total) {
      getExternalWorkflowHandle(parent.workflowId)
        .signal(chunkProgressSignal, { chunk, done, errors })
        .catch((err) => log.warn('could not signal the iteration', { error: String(err) }));
    }
  });
  const stored = await activitiesFor(config).store.storeLearnerItems({ storeUrl: config.store.url, runId, n, part: chunk, items: r.items });
  return { chunk, rollouts: total, rolloutErrors: errors, failures: r.failures.slice(0, MAX_REPORTED_FAILURES), summary: r.summary, itemsKey: stored.key };
}

export type Validation = Pick<IterationMetrics, 'eval' | 'evalSeconds' | 'evalErrors'>;

/** The new checkpoint on the held-out tasks (config.eval), as a child evaluationRun. */
export async function validate(input: RlIterationInput, checkpoint: number, it: IterationProgressView): Promise<Validation> {
  await it.setPhase('evaluating');
  const tEval = Date.now();
  const r = await executeChild(evaluationRun, {
    workflowId: validationEvalId(input.runId, checkpoint),
    taskQueue: TASK_QUEUES.learner,
    args: [validationEvalConfig(input.config, input.runId, checkpoint)],
  });
  const passAtK = Object.fromEntries(r.summary.passAtK.flatMap((x, i) => (x === null ? [] : [[String(i + 1), x]])));
  return { eval: { evalId: r.evalId, pass1: r.summary.pass1, passAtK }, evalSeconds: (Date.now() - tEval) / 1000, evalErrors: r.summary.episodes.errors };
}

/** One metrics line of the iteration (metrics.jsonl, the plots, the tracker). */
export function iterationMetrics(
  input: RlIterationInput,
  r: Rollouts,
  step: LearnerStepResult,
  progress: IterationProgress,
  t: { rolloutSeconds: number; learnerSeconds: number; iterationSeconds: number },
  validation: Validation,
  sync: SyncPolicyResult['sync'],
): IterationMetrics {
  const s = r.summary;
  const frac = (x: number) => (s.episodes ? x / s.episodes : 0);
  return {
    iteration: input.n,
    checkpoint: step.checkpoint,
    meanReward: s.meanReward,
    successRate: s.successRate,
    episodes: s.episodes,
    rolloutErrors: progress.rolloutErrors,
    ...(r.failures.length ? { rolloutFailures: r.failures.slice(0, MAX_REPORTED_FAILURES) } : {}),
    ...(r.rolloutWorkflows !== undefined ? { rolloutWorkflows: r.rolloutWorkflows } : {}),
    filtered: Object.fromEntries(COMPACT_FILTERED.map((k) => [k, frac(s.filtered[k] ?? 0)])) as IterationMetrics['filtered'],
    ends: s.ends,
    zeroAdvantageGroups: s.zeroAdvantageGroups,
    tokens: s.tokens,
    responseTokens: s.responseTokens,
    meanSteps: s.meanSteps,
    loss: step.loss,
    gradNorm: step.gradNorm,
    clipFraction: step.clipFraction,
    skipped: step.skipped,
    learnerTrajectories: step.trajectories,
    lr: step.lr,
    rolloutSeconds: t.rolloutSeconds,
    learnerSeconds: t.learnerSeconds,
    orchestrationSeconds: Math.max(0, t.iterationSeconds - t.rolloutSeconds - t.learnerSeconds - (validation.evalSeconds ?? 0)),
    iterationSeconds: t.iterationSeconds,
    ...(step.mismatch ? { mismatch: step.mismatch } : {}),
    ...(sync
      ? {
          sync: {
            seconds: sync.seconds,
            reloaded: sync.reloaded,
            probeMaxAbsDelta: sync.probe.maxAbsDelta,
            probeMeanAbsDelta: sync.probe.meanAbsDelta,
            probeStatistic: sync.probe.statistic,
            probeTolerance: sync.probe.tolerance,
          },
        }
      : {}),
    ...(s.integrity ? { integrity: { ...s.integrity, hackRate: hackRate(s.integrity) } } : {}),
    ...validation,
  };
}
