// One RL iteration (DESIGN §1): sampleBatch → syncPolicy → bounded fan-out of rollouts →
// advantages + compact filtering (pure, here) → learnerStep → checkpoint n+1 and metrics.
// A batch larger than `rolloutsPerWorkflow` fans out through `rolloutChunk` child workflows of whole
// tasks, so no workflow holds more than that many pending activities or nears the history limit.
import {
  ActivityFailure,
  ApplicationFailure,
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
import { ROLLOUTS_PER_WORKFLOW_DEFAULT, tasksPerChildWorkflow, type TrainingConfig } from '../lib/config.ts';
import { groupAdvantages, mergeIterationSummaries, summariseIteration, type IterationSummary } from '../lib/grpo.ts';
import { COMPACT_FILTERED } from '../lib/types.ts';
import { validationEvalConfig, validationEvalId } from '../lib/eval/config.ts';
import { evaluationRun } from './evaluation-run.ts';
import { chunkProgressSignal, phaseSignal, progressQuery, RL_ITERATION_SA, RL_PHASE_SA } from './signals.ts';
import type {
  IterationMetrics,
  IterationPhase,
  IterationProgress,
  LearnerStepResult,
  RlIterationInput,
  RlIterationResult,
  RolloutChunkInput,
  RolloutChunkProgress,
  RolloutChunkResult,
  RolloutFailure,
  RolloutInput,
  RolloutSummary,
} from './shapes.ts';
import { rolloutChunkWorkflowId, TASK_QUEUES } from './shapes.ts';

type Activities = ReturnType<typeof createActivities>;

/** syncPolicy rounds one rollout may ask for when the policy server is unreachable */
const MAX_POLICY_RESYNCS = 3;
/** failures listed in the metrics (the count is exact) */
const MAX_REPORTED_FAILURES = 20;
/** progress signals a rollout child workflow sends its iteration (each costs both histories a few events) */
const PROGRESS_SIGNALS_PER_CHUNK = 10;
const FAN_OUT_PATCH = 'rl-iteration-child-fan-out';
/** rollout activities carry a summary naming their task and sample (the UI's timeline shows it) */
const ROLLOUT_SUMMARY_PATCH = 'rollout-activity-summaries';
/** validation evaluations (config.eval); older histories have none */
const VALIDATION_EVAL_PATCH = 'rl-iteration-validation-eval';

function activitiesFor(config: TrainingConfig) {
  const store = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '5 minutes',
    retry: { maximumAttempts: 10, initialInterval: '1s', maximumInterval: '30s', nonRetryableErrorTypes: ['InvalidConfig'] },
  });
  const learner = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.learner,
    startToCloseTimeout: `${config.learner.timeoutMinutes} minutes`,
    // the learner's own bound (configs before it existed followed the rollouts')
    heartbeatTimeout: `${config.learner.heartbeatTimeoutSeconds ?? Math.max(30, config.rollout.heartbeatTimeoutSeconds)} seconds`,
    retry: { maximumAttempts: 10, initialInterval: '1s', maximumInterval: '30s', nonRetryableErrorTypes: ['InvalidConfig'] },
  });
  const rollouts = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: `${config.rollout.startToCloseMinutes} minutes`,
    heartbeatTimeout: `${config.rollout.heartbeatTimeoutSeconds} seconds`,
    retry: {
      maximumAttempts: config.rollout.maxAttempts,
      initialInterval: '1s',
      maximumInterval: '20s',
      nonRetryableErrorTypes: ['InvalidConfig', 'PolicyUnavailable'],
    },
  });
  return { store, learner, rollouts };
}

interface RolloutContext {
  config: TrainingConfig;
  runId: string;
  n: number;
  checkpoint: number;
  learner: ReturnType<typeof activitiesFor>['learner'];
  rollouts: ReturnType<typeof activitiesFor>['rollouts'];
}

/** The last error of a failed activity, short enough for history. */
/** syncPolicy's weightSync: only vLLM's is sent, so the inputs of other runs (and of recorded histories) stay as they were. */
function weightSyncOf(config: TrainingConfig): { weightSync?: 'vllm' } {
  return config.policy.baseUrl && config.policy.weightSync === 'vllm' ? { weightSync: 'vllm' } : {};
}

function failureText(err: ActivityFailure): string {
  const msg = err.cause?.message || err.message || 'unknown failure';
  return msg.length > 500 ? `${msg.slice(0, 497)}...` : msg;
}

/**
 * Runs `inputs` with at most `lanes` rollout activities scheduled at once. A rollout whose retries ran
 * out is an infrastructure loss: its summary has key '' (left out of training) and its error is kept.
 */
async function runRollouts(
  ctx: RolloutContext,
  inputs: RolloutInput[],
  lanes: number,
  firstPolicyUrl: string,
  onDone: (ok: boolean) => void,
): Promise<{ summaries: RolloutSummary[]; failures: RolloutFailure[] }> {
  const { config, runId, checkpoint, learner, rollouts } = ctx;
  const storeUrl = config.store.url;
  const summaries: RolloutSummary[] = new Array(inputs.length);
  const failures: RolloutFailure[] = [];
  let policyUrl = firstPolicyUrl;
  let resync: Promise<void> | null = null;
  // The policy server went away (its learner worker restarted): one shared syncPolicy, then retry.
  const resyncPolicy = (failedUrl: string): Promise<void> => {
    if (failedUrl !== policyUrl) return Promise.resolve();
    resync ??= learner
      .syncPolicy({ storeUrl, runId, checkpoint, policyBaseUrl: config.policy.baseUrl, model: config.policy.model, ...weightSyncOf(config) })
      .then((r) => {
        policyUrl = r.policyUrl;
      })
      .finally(() => {
        resync = null;
      });
    return resync;
  };
  const named = inputs.length > 0 && patched(ROLLOUT_SUMMARY_PATCH);
  const runRollout = async (inp: RolloutInput): Promise<RolloutSummary> => {
    for (let round = 0; ; round++) {
      const url = policyUrl;
      try {
        const args: [RolloutInput] = [{ ...inp, policyUrl: url }];
        if (named) return await rollouts.rollout.executeWithOptions({ summary: `task ${inp.taskId} · sample ${inp.sample}` }, args);
        return await rollouts.rollout(...args);
      } catch (err) {
        const cause = err instanceof ActivityFailure ? err.cause : undefined;
        if (round >= MAX_POLICY_RESYNCS || !(cause instanceof ApplicationFailure) || cause.type !== 'PolicyUnavailable') throw err;
        await resyncPolicy(url);
      }
    }
  };
  let next = 0;
  // A fixed pool of lanes keeps at most `lanes` activities scheduled at once.
  const lane = async (): Promise<void> => {
    while (next < inputs.length) {
      const i = next++;
      const inp = inputs[i];
      let ok = true;
      try {
        summaries[i] = await runRollout(inp);
      } catch (err) {
        if (!(err instanceof ActivityFailure)) throw err;
        ok = false;
        failures.push({ taskId: inp.taskId, sample: inp.sample, error: failureText(err) });
        summaries[i] = { key: '', taskId: inp.taskId, sample: inp.sample, reward: 0, end: 'error', steps: 0, tokens: 0, responseTokens: 0, seconds: 0 };
      }
      onDone(ok);
    }
  };
  await Promise.all(Array.from({ length: Math.min(lanes, inputs.length) }, lane));
  return { summaries, failures };
}

/**
 * Whole tasks per child workflow; at most `maxInflightRollouts` rollouts in flight over all children
 * (children beyond that many wait their turn).
 */
async function fanOutRollouts(input: RlIterationInput, taskIds: string[], policyUrl: string, progress: IterationProgress): Promise<RolloutChunkResult[]> {
  const { runId, n, checkpoint, config } = input;
  const per = tasksPerChildWorkflow(config.rolloutsPerWorkflow ?? ROLLOUTS_PER_WORKFLOW_DEFAULT, config.batch.samples);
  const groups: string[][] = [];
  for (let i = 0; i < taskIds.length; i += per) groups.push(taskIds.slice(i, i + per));
  const running = Math.min(groups.length, config.maxInflightRollouts);
  const lanes = Math.max(1, Math.floor(config.maxInflightRollouts / running));
  const done = new Map<number, RolloutChunkProgress>();
  const tally = () => {
    let d = 0;
    let e = 0;
    for (const p of done.values()) {
      d += p.done;
      e += p.errors;
    }
    progress.rolloutsDone = d;
    progress.rolloutErrors = e;
  };
  setHandler(chunkProgressSignal, (p) => {
    if ((done.get(p.chunk)?.done ?? -1) < p.done) done.set(p.chunk, p);
    tally();
  });
  const results: RolloutChunkResult[] = new Array(groups.length);
  let next = 0;
  const slot = async (): Promise<void> => {
    while (next < groups.length) {
      const chunk = next++;
      const chunkInput: RolloutChunkInput = { runId, n, checkpoint, chunk, taskIds: groups[chunk], lanes, policyUrl, config };
      const r = await executeChild(rolloutChunk, {
        workflowId: rolloutChunkWorkflowId(runId, n, chunk),
        taskQueue: TASK_QUEUES.learner,
        args: [chunkInput],
        // its first task schedules up to a thousand activities: on a loaded host that can pass the 10 s default
        workflowTaskTimeout: '60s',
      });
      results[chunk] = r;
      done.set(chunk, { chunk, done: r.rollouts, errors: r.rolloutErrors });
      tally();
    }
  };
  await Promise.all(Array.from({ length: running }, slot));
  return results;
}

/**
 * A child of a fanned-out rlIteration: the rollouts of whole tasks, their group advantages, and the
 * learner items stored for the parent's learnerStep; progress signalled to the parent every tenth.
 */
export async function rolloutChunk(input: RolloutChunkInput): Promise<RolloutChunkResult> {
  const { runId, n, checkpoint, chunk, config } = input;
  const storeUrl = config.store.url;
  const { store, learner, rollouts } = activitiesFor(config);
  const inputs: RolloutInput[] = [];
  for (const taskId of input.taskIds) {
    for (let sample = 0; sample < config.batch.samples; sample++) inputs.push({ storeUrl, runId, n, taskId, sample, checkpoint, policyUrl: input.policyUrl });
  }
  const parent = workflowInfo().parent;
  const every = Math.max(1, Math.ceil(inputs.length / PROGRESS_SIGNALS_PER_CHUNK));
  let done = 0;
  let errors = 0;
  const r = await runRollouts({ config, runId, n, checkpoint, learner, rollouts }, inputs, input.lanes, input.policyUrl, (ok) => {
    done++;
    if (!ok) errors++;
    if (parent && done % every === 0 && done < inputs.length) {
      getExternalWorkflowHandle(parent.workflowId)
        .signal(chunkProgressSignal, { chunk, done, errors })
        .catch((err) => log.warn('could not signal the iteration', { error: String(err) }));
    }
  });
  const episodes = r.summaries.filter((x) => x.key !== '');
  const advantages = groupAdvantages(episodes, config.algorithm.advantage);
  const items = episodes.map((x, i) => ({ key: x.key, advantage: advantages[i], end: x.end }));
  const stored = await store.storeLearnerItems({ storeUrl, runId, n, part: chunk, items });
  return {
    chunk,
    rollouts: inputs.length,
    rolloutErrors: errors,
    failures: r.failures.slice(0, MAX_REPORTED_FAILURES),
    summary: summariseIteration(episodes),
    itemsKey: stored.key,
  };
}

export async function rlIteration(input: RlIterationInput): Promise<RlIterationResult> {
  const { runId, n, checkpoint, config } = input;
  const storeUrl = config.store.url;
  const total = config.batch.tasks * config.batch.samples;
  const progress: IterationProgress = { n, phase: 'starting', rolloutsDone: 0, rolloutsTotal: total, rolloutErrors: 0 };
  setHandler(progressQuery, () => progress);
  const failures: RolloutFailure[] = [];
  const parent = workflowInfo().parent;

  const setPhase = async (phase: IterationPhase): Promise<void> => {
    progress.phase = phase;
    upsertSearchAttributes([
      { key: RL_ITERATION_SA, value: n },
      { key: RL_PHASE_SA, value: phase },
    ]);
    if (parent) {
      try {
        await getExternalWorkflowHandle(parent.workflowId).signal(phaseSignal, { n, phase });
      } catch (err) {
        log.warn('could not signal the parent run', { error: String(err) });
      }
    }
  };

  const { store, learner, rollouts } = activitiesFor(config);

  const t0 = Date.now();
  await setPhase('sampling');
  const batch = await store.sampleBatch({ runId, n, config });

  await setPhase('syncing');
  const policy = await learner.syncPolicy({ storeUrl, runId, checkpoint, policyBaseUrl: config.policy.baseUrl, model: config.policy.model, ...weightSyncOf(config) });

  await setPhase('rollouts');
  const tRollouts = Date.now();
  const perWorkflow = config.rolloutsPerWorkflow ?? ROLLOUTS_PER_WORKFLOW_DEFAULT;
  // beyond one workflow's share the rollouts fan out through child workflows (patched: older histories ran all here)
  const fanOut = total > perWorkflow && patched(FAN_OUT_PATCH);
  let summaries: RolloutSummary[] = [];
  let chunks: RolloutChunkResult[] = [];
  if (!fanOut) {
    const inputs: RolloutInput[] = [];
    for (const taskId of batch.taskIds) {
      for (let sample = 0; sample < config.batch.samples; sample++) {
        inputs.push({ storeUrl, runId, n, taskId, sample, checkpoint, policyUrl: policy.policyUrl });
      }
    }
    const r = await runRollouts({ config, runId, n, checkpoint, learner, rollouts }, inputs, config.maxInflightRollouts, policy.policyUrl, (ok) => {
      progress.rolloutsDone++;
      if (!ok) progress.rolloutErrors++;
    });
    summaries = r.summaries;
    failures.push(...r.failures);
  } else {
    chunks = await fanOutRollouts(input, batch.taskIds, policy.policyUrl, progress);
    for (const c of chunks) failures.push(...c.failures);
  }
  const rolloutSeconds = (Date.now() - tRollouts) / 1000;

  await setPhase('learning');
  const tLearner = Date.now();
  let step: LearnerStepResult;
  let s: IterationSummary;
  if (!fanOut) {
    // rollouts whose retries ran out are not episodes: out of the baselines, the batch and the means
    const episodes = summaries.filter((x) => x.key !== '');
    const advantages = groupAdvantages(episodes, config.algorithm.advantage);
    const items = episodes.map((x, i) => ({ key: x.key, advantage: advantages[i], end: x.end }));
    step = await learner.learnerStep({ storeUrl, runId, n, checkpoint, items });
    s = summariseIteration(episodes);
  } else {
    step = await learner.learnerStep({ storeUrl, runId, n, checkpoint, items: [], itemParts: chunks.map((c) => c.itemsKey) });
    s = mergeIterationSummaries(chunks.map((c) => c.summary));
  }
  const learnerSeconds = (Date.now() - tLearner) / 1000;

  // validation (config.eval): the new checkpoint on held-out tasks as a child evaluationRun, into these metrics
  let validation: Pick<IterationMetrics, 'eval' | 'evalSeconds' | 'evalErrors'> = {};
  if (config.eval && step.checkpoint % config.eval.every === 0 && patched(VALIDATION_EVAL_PATCH)) {
    await setPhase('evaluating');
    const tEval = Date.now();
    const r = await executeChild(evaluationRun, {
      workflowId: validationEvalId(runId, step.checkpoint),
      taskQueue: TASK_QUEUES.learner,
      args: [validationEvalConfig(config, runId, step.checkpoint)],
    });
    const passAtK = Object.fromEntries(r.summary.passAtK.flatMap((x, i) => (x === null ? [] : [[String(i + 1), x]])));
    validation = { eval: { evalId: r.evalId, pass1: r.summary.pass1, passAtK }, evalSeconds: (Date.now() - tEval) / 1000, evalErrors: r.summary.episodes.errors };
  }

  const iterationSeconds = (Date.now() - t0) / 1000;
  const frac = (x: number) => (s.episodes ? x / s.episodes : 0);
  const metrics: IterationMetrics = {
    iteration: n,
    checkpoint: step.checkpoint,
    meanReward: s.meanReward,
    successRate: s.successRate,
    episodes: s.episodes,
    rolloutErrors: progress.rolloutErrors,
    ...(failures.length ? { rolloutFailures: failures.slice(0, MAX_REPORTED_FAILURES) } : {}),
    ...(fanOut ? { rolloutWorkflows: chunks.length } : {}),
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
    rolloutSeconds,
    learnerSeconds,
    orchestrationSeconds: Math.max(0, iterationSeconds - rolloutSeconds - learnerSeconds - (validation.evalSeconds ?? 0)),
    iterationSeconds,
    ...validation,
  };
  await store.recordMetrics({ storeUrl, runId, metrics });
  await setPhase('done');
  return { checkpoint: step.checkpoint, metrics };
}
