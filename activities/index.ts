// Every activity the workers serve (the one place; others append their export line here).
// Learner activities share one LearnerContext (Learner + policy server) per process.
import { LearnerContext, createLearnerActivities, type LearnerWorkerOptions } from './learner.ts';
import { recordMetrics, sampleBatch, storeLearnerItems } from './dataset.ts';
import { rollout } from './rollout.ts';
import { reportEvaluation, reportRun } from './report.ts';
import { sweActivities } from './swe.ts';
import { evalEpisode, prepareEvaluation, recordEvalError, writeEvaluationReport } from './evaluation.ts';
import { verifierActivities } from './verifiers.ts';
import { collectBatch, recoverPump, storeGroupResult } from './pump.ts';
import { factoryActivities } from './factory/index.ts';

export { LearnerContext, type LearnerWorkerOptions } from './learner.ts';
export { registerEnvironment } from './rollout.ts';

/** Rollout-queue activities: rollouts, dataset, bookkeeping, SWE task validation and grading. */
export function createRolloutActivities() {
  return {
    rollout,
    sampleBatch,
    recordMetrics,
    storeLearnerItems,
    reportRun,
    reportEvaluation,
    ...sweActivities,
    prepareEvaluation,
    evalEpisode,
    recordEvalError,
    writeEvaluationReport,
    ...verifierActivities,
    storeGroupResult,
    recoverPump,
    collectBatch,
    ...factoryActivities,
  };
}

/** All activities; the learner ones bound to `ctx`. */
export function createActivities(ctx: LearnerContext = new LearnerContext()) {
  return { ...createRolloutActivities(), ...createLearnerActivities(ctx) };
}

export type { LearnerWorkerOptions as LearnerOptions };
export * from './swe.ts';
export { createSweEnvironment, sweEpisodeSetup } from './swe-env.ts'; // registers env.kind 'swe' with the rollout activity
