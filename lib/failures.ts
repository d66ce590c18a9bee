// Failure types and retry policies, each named once (workflow-safe: no I/O). An activity fails with a
// FailureType; a workflow's retry policy names the types it must not retry. A type spelled as a plain
// string would silently turn a non-retryable error into ten retries; spelled through FailureType, a
// misspelling is a type error.
import { ActivityFailure, ApplicationFailure, ChildWorkflowFailure, type RetryPolicy } from '@temporalio/common';

export const FailureType = {
  /** a config (training, evaluation, Best@K) that does not validate, or names what does not exist */
  InvalidConfig: 'InvalidConfig',
  /** a task that is not in its tasks file, or an episode that is not stored */
  InvalidTask: 'InvalidTask',
  /** a workflow input other than a config (validateTasks) */
  InvalidInput: 'InvalidInput',
  /** an updateHyperparameters update that does not validate (rejected; the run goes on) */
  InvalidHyperparameters: 'InvalidHyperparameters',
  /** the policy server is gone (its learner worker restarted): answered by a new syncPolicy, not a retry in place */
  PolicyUnavailable: 'PolicyUnavailable',
  /** the policy server refused the request (a 4xx): retrying sends the same request */
  PolicyRejected: 'PolicyRejected',
  /** the server, after a weight sync, does not compute what the checkpoint computes (the sync probe), or serves a tied head it cannot reload */
  PolicyMismatch: 'PolicyMismatch',
  /** the worker running the activity died; its restarted successor fails it so it runs again at once */
  WorkerDied: 'WorkerDied',
  /** the experiment tracker has not taken everything yet (retried until it has) */
  TrackingUndelivered: 'TrackingUndelivered',
} as const;
export type FailureType = (typeof FailureType)[keyof typeof FailureType];

/** Failure types that say the input is wrong: another attempt cannot help. */
export const INVALID_INPUT: readonly FailureType[] = [FailureType.InvalidConfig, FailureType.InvalidTask, FailureType.InvalidInput];

/** A failure no retry policy retries. */
export function nonRetryable(type: FailureType, message: string): ApplicationFailure {
  return ApplicationFailure.create({ type, nonRetryable: true, message });
}

/** A failure retried unless the caller's policy lists its type. */
export function retryable(type: FailureType, message: string): ApplicationFailure {
  return ApplicationFailure.create({ type, message });
}

/** Whether `err` (an activity's or child workflow's failure, as a workflow sees it, or the failure itself) has type `type`. */
export function isFailureType(err: unknown, type: FailureType): boolean {
  const cause = err instanceof ActivityFailure || err instanceof ChildWorkflowFailure ? err.cause : err;
  return cause instanceof ApplicationFailure && cause.type === type;
}

const policy = (maximumAttempts: number, initialInterval: string, maximumInterval: string, nonRetryable: readonly FailureType[]): RetryPolicy => ({
  maximumAttempts,
  initialInterval,
  maximumInterval,
  ...(nonRetryable.length ? { nonRetryableErrorTypes: [...nonRetryable] } : {}),
});

/** The retry policies of every activity the workflows schedule. */
export const RetryPolicies = {
  /** Short activities (store, bookkeeping, policy sync, learner step): 1 s doubling to 30 s, `attempts` tries. */
  short: (attempts = 10, nonRetryableTypes: readonly FailureType[] = INVALID_INPUT): RetryPolicy => policy(attempts, '1s', '30s', nonRetryableTypes),
  /** Work in sandboxes or against a model server (task validation, evaluation episodes, verifiers): 2 s doubling to 30 s. */
  sandboxed: (attempts: number, nonRetryableTypes: readonly FailureType[] = INVALID_INPUT): RetryPolicy => policy(attempts, '2s', '30s', nonRetryableTypes),
  /** Training rollouts: 1 s doubling to 20 s; an unreachable policy server is answered by a resync, not retried in place. */
  rollout: (attempts: number): RetryPolicy => policy(attempts, '1s', '20s', [...INVALID_INPUT, FailureType.PolicyUnavailable]),
  /** Plots and tracking beside a run: three tries (the caller logs a failure; it never fails the run). */
  report: { maximumAttempts: 3, initialInterval: '2s' } satisfies RetryPolicy,
  /**
   * Delivery to a tracker that may be down for days: unbounded, backing off to every minute (bound it with a
   * schedule-to-close timeout). A minute, not five: one request a minute costs nothing, and a tracker that comes back
   * has the run within a minute (test/temporal/mlflow.test.ts waited up to 5 minutes for the next attempt under load).
   */
  untilDelivered: { initialInterval: '5s', backoffCoefficient: 2, maximumInterval: '1 minute' } satisfies RetryPolicy,
};

/** The message of the innermost cause of `e` (an activity's failure wraps its error's): what a report should show. */
export function innermostMessage(e: unknown): string {
  let x: unknown = e;
  for (let d = 0; d < 20 && x instanceof Error && x.cause instanceof Error; d++) x = x.cause;
  return x instanceof Error ? x.message : String(x);
}
