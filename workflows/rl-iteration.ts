// One RL iteration (DESIGN §1): sampleBatch → syncPolicy → bounded fan-out of rollouts →
// advantages + compact filtering (pure, here) → learnerStep → checkpoint n+1 and metrics.
import {
  ActivityFailure,
  ApplicationFailure,
  getExternalWorkflowHandle,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
  log,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.ts';
import { groupAdvantages, summariseIteration } from '../lib/grpo.ts';
import { phaseSignal, progressQuery, RL_ITERATION_SA, RL_PHASE_SA } from './signals.ts';
import type {
  IterationMetrics,
  IterationPhase,
  IterationProgress,
  RlIterationInput,
  RlIterationResult,
  RolloutInput,
  RolloutSummary,
} from './shapes.ts';
import { TASK_QUEUES } from './shapes.ts';

type Activities = ReturnType<typeof createActivities>;

/** syncPolicy rounds one rollout may ask for when the policy server is unreachable */
const MAX_POLICY_RESYNCS = 3;

export async function rlIteration(input: RlIterationInput): Promise<RlIterationResult> {
  const { runId, n, checkpoint, config } = input;
  const storeUrl = config.store.url;
  const total = config.batch.tasks * config.batch.samples;
  const progress: IterationProgress = { n, phase: 'starting', rolloutsDone: 0, rolloutsTotal: total, rolloutErrors: 0 };
  setHandler(progressQuery, () => progress);
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

  const store = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '5 minutes',
    retry: { maximumAttempts: 10, initialInterval: '1s', maximumInterval: '30s', nonRetryableErrorTypes: ['InvalidConfig'] },
  });
  const learner = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.learner,
    startToCloseTimeout: `${config.learner.timeoutMinutes} minutes`,
    heartbeatTimeout: `${Math.max(30, config.rollout.heartbeatTimeoutSeconds)} seconds`,
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

  const t0 = Date.now();
  await setPhase('sampling');
  const batch = await store.sampleBatch({ runId, n, config });

  await setPhase('syncing');
  const policy = await learner.syncPolicy({ storeUrl, runId, checkpoint, policyBaseUrl: config.policy.baseUrl, model: config.policy.model });

  await setPhase('rollouts');
  const tRollouts = Date.now();
  const inputs: RolloutInput[] = [];
  for (const taskId of batch.taskIds) {
    for (let sample = 0; sample < config.batch.samples; sample++) {
      inputs.push({ storeUrl, runId, n, taskId, sample, checkpoint, policyUrl: policy.policyUrl });
    }
  }
  const summaries: RolloutSummary[] = new Array(inputs.length);
  let policyUrl = policy.policyUrl;
  let resync: Promise<void> | null = null;
  // The policy server went away (its learner worker restarted): one shared syncPolicy, then retry.
  const resyncPolicy = (failedUrl: string): Promise<void> => {
    if (failedUrl !== policyUrl) return Promise.resolve();
    resync ??= learner
      .syncPolicy({ storeUrl, runId, checkpoint, policyBaseUrl: config.policy.baseUrl, model: config.policy.model })
      .then((r) => {
        policyUrl = r.policyUrl;
      })
      .finally(() => {
        resync = null;
      });
    return resync;
  };
  const runRollout = async (inp: RolloutInput): Promise<RolloutSummary> => {
    for (let round = 0; ; round++) {
      const url = policyUrl;
      try {
        return await rollouts.rollout({ ...inp, policyUrl: url });
      } catch (err) {
        const cause = err instanceof ActivityFailure ? err.cause : undefined;
        if (round >= MAX_POLICY_RESYNCS || !(cause instanceof ApplicationFailure) || cause.type !== 'PolicyUnavailable') throw err;
        await resyncPolicy(url);
      }
    }
  };
  let next = 0;
  // A fixed pool of lanes keeps at most maxInflightRollouts activities scheduled at once.
  const lane = async (): Promise<void> => {
    while (next < inputs.length) {
      const i = next++;
      const inp = inputs[i];
      try {
        summaries[i] = await runRollout(inp);
      } catch (err) {
        if (!(err instanceof ActivityFailure)) throw err;
        // retries exhausted: an infrastructure loss, counted and left out of training
        progress.rolloutErrors++;
        summaries[i] = { key: '', taskId: inp.taskId, sample: inp.sample, reward: 0, end: 'error', steps: 0, tokens: 0, responseTokens: 0, seconds: 0 };
      }
      progress.rolloutsDone++;
    }
  };
  await Promise.all(Array.from({ length: Math.min(config.maxInflightRollouts, inputs.length) }, lane));
  const rolloutSeconds = (Date.now() - tRollouts) / 1000;

  await setPhase('learning');
  const advantages = groupAdvantages(summaries, config.algorithm.advantage);
  const items = summaries
    .map((s, i) => ({ key: s.key, advantage: advantages[i], end: s.end }))
    .filter((it) => it.key !== '');
  const tLearner = Date.now();
  const step = await learner.learnerStep({ storeUrl, runId, n, checkpoint, items });
  const learnerSeconds = (Date.now() - tLearner) / 1000;

  const s = summariseIteration(summaries);
  const iterationSeconds = (Date.now() - t0) / 1000;
  const frac = (x: number) => (s.episodes ? x / s.episodes : 0);
  const metrics: IterationMetrics = {
    iteration: n,
    checkpoint: step.checkpoint,
    meanReward: s.meanReward,
    successRate: s.successRate,
    episodes: s.episodes,
    rolloutErrors: progress.rolloutErrors,
    filtered: { max_context: frac(s.filtered.max_context), max_steps: frac(s.filtered.max_steps), timeout: frac(s.filtered.timeout) },
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
    orchestrationSeconds: Math.max(0, iterationSeconds - rolloutSeconds - learnerSeconds),
    iterationSeconds,
  };
  await store.recordMetrics({ storeUrl, runId, metrics });
  await setPhase('done');
  return { checkpoint: step.checkpoint, metrics };
}
