// One iteration of an async "one-step" run (DESIGN §10, stage 1): learner step n trains batch n while batch
// n+1's rollouts run on checkpoint n. Batch n was rolled out during the previous iteration, on checkpoint n−1,
// and arrives as store keys (PendingBatch); the first iteration rolls batch 0 out first. Every batch n is
// sampled from checkpoint max(0, n−1), whatever crashed in between, so the run is a function of its config.
import {
  activitiesFor,
  IterationProgressView,
  iterationMetrics,
  MAX_REPORTED_FAILURES,
  rollOut,
  syncPolicyInput,
  validate,
  type Rollouts,
  type Validation,
} from './rl-iteration.ts';
import type { OneStepIterationInput, OneStepIterationResult, PendingBatch, RlIterationInput } from '../lib/training/shapes.ts';

/** The checkpoint a one-step run samples batch n from. */
export function oneStepSamplingCheckpoint(n: number): number {
  return Math.max(0, n - 1);
}

export async function oneStepIteration(input: OneStepIterationInput): Promise<OneStepIterationResult> {
  const { runId, n, checkpoint, config } = input;
  const it = new IterationProgressView(n, config.batch.tasks * config.batch.samples);
  const { store, learner } = activitiesFor(config);
  const t0 = Date.now();

  const batch = input.pending?.n === n ? input.pending : await rollOutBatch({ runId, n, checkpoint: oneStepSamplingCheckpoint(n), config }, it);

  await it.setPhase(input.next ? 'overlapped' : 'learning');
  const tLearner = Date.now();
  let learnerSeconds = 0;
  const learning = learner.learnerStep({ storeUrl: config.store.url, runId, n, checkpoint, items: [], itemParts: batch.itemParts }).then((step) => {
    learnerSeconds = (Date.now() - tLearner) / 1000;
    return step;
  });
  const [step, next] = await Promise.all([learning, input.next ? rollOutBatch({ runId, n: n + 1, checkpoint, config }, it) : null]);

  const validation: Validation = config.eval && step.checkpoint % config.eval.every === 0 ? await validate(input, step.checkpoint, it) : {};
  const trained: Rollouts = {
    step: { items: [], itemParts: batch.itemParts },
    summary: batch.summary,
    failures: batch.failures,
    ...(batch.rolloutWorkflows !== undefined ? { rolloutWorkflows: batch.rolloutWorkflows } : {}),
  };
  const metrics = {
    ...iterationMetrics(
      input,
      trained,
      step,
      { ...it.progress, rolloutErrors: batch.rolloutErrors },
      // the batch's own rollout time (it ran during the step before): the rollouts of one step are no more its wall time
      { rolloutSeconds: batch.rolloutSeconds, learnerSeconds, iterationSeconds: (Date.now() - t0) / 1000 },
      validation,
      undefined,
    ),
    ...(batch.sync ? { sync: batch.sync } : {}),
    sampledFrom: batch.checkpoint,
  };
  await store.recordMetrics({ storeUrl: config.store.url, runId, metrics });
  await it.setPhase('done');
  return { checkpoint: step.checkpoint, metrics, pending: next };
}

/**
 * Batch `n` rolled out on `checkpoint`: its tasks drawn, the policy server synced (our server loads its own copy,
 * so this never waits for a running learner step), the rollouts, its learner items stored.
 */
async function rollOutBatch(input: RlIterationInput, it: IterationProgressView): Promise<PendingBatch> {
  const { runId, n, checkpoint, config } = input;
  const { store, learner } = activitiesFor(config);
  Object.assign(it.progress, { rolloutsDone: 0, rolloutErrors: 0 });
  const sampled = await store.sampleBatch({ runId, n, config });
  const policy = await learner.syncPolicy(syncPolicyInput(input));
  const t = Date.now();
  const r = await rollOut(input, sampled.taskIds, policy.policyUrl, it.progress);
  const rolloutSeconds = (Date.now() - t) / 1000;
  const itemParts = r.step.itemParts ?? [(await store.storeLearnerItems({ storeUrl: config.store.url, runId, n, part: 0, items: r.step.items })).key];
  const s = policy.sync;
  return {
    n,
    checkpoint,
    itemParts,
    summary: r.summary,
    failures: r.failures.slice(0, MAX_REPORTED_FAILURES),
    rolloutErrors: it.progress.rolloutErrors,
    ...(r.rolloutWorkflows !== undefined ? { rolloutWorkflows: r.rolloutWorkflows } : {}),
    rolloutSeconds,
    ...(s
      ? {
          sync: {
            seconds: s.seconds,
            reloaded: s.reloaded,
            probeMaxAbsDelta: s.probe.maxAbsDelta,
            probeMeanAbsDelta: s.probe.meanAbsDelta,
            probeStatistic: s.probe.statistic,
            probeTolerance: s.probe.tolerance,
          },
        }
      : {}),
  };
}
