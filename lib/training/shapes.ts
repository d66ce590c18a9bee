// Inputs and outputs that cross workflow history between the training workflows and their activities.
// Small shapes only: ids, keys, numbers (DESIGN §2).
import type { CompactFilteredEnd, EndReason, RolloutSummary } from '../types.ts';
import type { Hyperparameters, TrainingConfig } from '../config.ts';
import type { IterationSummary, MismatchStats, StepStats } from '../grpo.ts';
import type { PumpState } from '../pump.ts';

export type { RolloutSummary };

export interface SampleBatchInput {
  runId: string;
  n: number;
  config: TrainingConfig;
}
export interface SampleBatchResult {
  taskIds: string[];
  configKey: string;
}

export interface InitCheckpointInput {
  storeUrl: string;
  runId: string;
  model: TrainingConfig['model'];
}
export interface InitCheckpointResult {
  checkpoint: number;
  key: string;
  created: boolean;
}

export interface SyncPolicyInput {
  storeUrl: string;
  runId: string;
  checkpoint: number;
  policyBaseUrl?: string;
  model: string;
  /** how policyBaseUrl reloads weights from disk (absent: "sglang") */
  weightSync?: 'sglang' | 'vllm';
  /** serve this Hugging Face model directory instead of the run's checkpoint (evaluation of a model outside any run) */
  modelDir?: string;
}
export interface SyncPolicyResult {
  policyUrl: string;
  checkpoint: number;
  /** an external server: whether it reloaded, how long that took, and the probe that verified it (DESIGN §9) */
  sync?: { reloaded: boolean; seconds: number; probe: { tokens: number; meanAbsDelta: number; maxAbsDelta: number; tolerance: number; statistic: 'max' | 'mean'; dtype: string } };
}

/** A rollout is scheduled with ids only; its config lives in the store at keys.iterationConfig(runId, n). */
export interface RolloutInput {
  storeUrl: string;
  runId: string;
  n: number;
  taskId: string;
  sample: number;
  checkpoint: number;
  policyUrl: string;
  /**
   * An async streaming episode (DESIGN §10): it starts on `checkpoint` and, between turns, moves to the newest
   * complete checkpoint of the run up to `newest`, recording the version of every token.
   */
  streaming?: { newest: number };
}

export interface LearnerItem {
  key: string;
  advantage: number;
  end: EndReason;
}
/**
 * `items` inline, or (a fanned-out iteration) `itemParts`: store keys of LearnerItem[] written by
 * `storeLearnerItems`, so no payload grows with the batch.
 */
export interface LearnerStepInput {
  storeUrl: string;
  runId: string;
  n: number;
  checkpoint: number;
  items: LearnerItem[];
  itemParts?: string[];
}
export interface StoreLearnerItemsInput {
  storeUrl: string;
  runId: string;
  n: number;
  part: number;
  items: LearnerItem[];
}

/** A rollout whose attempts all failed (infrastructure): left out of training, reported with its last error. */
export interface RolloutFailure {
  taskId: string;
  sample: number;
  error: string;
}

/** One child workflow of a fanned-out iteration: whole tasks, so group advantages are computed there. */
export interface RolloutChunkInput {
  runId: string;
  n: number;
  checkpoint: number;
  chunk: number;
  taskIds: string[];
  /** rollouts of this chunk in flight at once */
  lanes: number;
  policyUrl: string;
  config: TrainingConfig;
}
export interface RolloutChunkResult {
  chunk: number;
  rollouts: number;
  rolloutErrors: number;
  /** the first failures (bounded) */
  failures: RolloutFailure[];
  summary: IterationSummary;
  /** store key of this chunk's LearnerItem[] */
  itemsKey: string;
}
export interface RolloutChunkProgress {
  chunk: number;
  done: number;
  errors: number;
}
export interface LearnerStepResult extends StepStats {
  checkpoint: number;
  /** trajectories the learner read from the store for this step */
  trajectories: number;
  /** sequences packed into the batch (non-zero advantage) */
  sequences: number;
  lr: number;
  /** true when checkpoint n+1 already existed and its stored stats were returned */
  reused: boolean;
  /** the learner's log-probs of the sampled tokens vs the behaviour log-probs (absent: nothing sampled, or an older step) */
  mismatch?: MismatchStats;
}

/** `overlapped`: a one-step iteration's learner step and the next batch's rollouts at once; `pumping`: a pump run's steady state */
export type IterationPhase = 'starting' | 'sampling' | 'syncing' | 'rollouts' | 'learning' | 'overlapped' | 'pumping' | 'evaluating' | 'done' | 'paused' | 'finished';

export interface IterationMetrics {
  iteration: number;
  checkpoint: number;
  meanReward: number;
  successRate: number;
  episodes: number;
  rolloutErrors: number;
  /** the first rollouts whose retries ran out, with their last error (absent when none) */
  rolloutFailures?: RolloutFailure[];
  /** child workflows the rollouts fanned out through (absent when the iteration ran them itself) */
  rolloutWorkflows?: number;
  /** fraction of episodes compact-filtered, per reason */
  filtered: Partial<Record<CompactFilteredEnd, number>>;
  ends: Partial<Record<EndReason, number>>;
  zeroAdvantageGroups: number;
  tokens: number;
  responseTokens: number;
  meanSteps: number;
  loss: number;
  gradNorm: number;
  clipFraction: number;
  skipped: boolean;
  learnerTrajectories: number;
  lr: number;
  /** wall-clock split of the iteration (workflow time) */
  rolloutSeconds: number;
  learnerSeconds: number;
  orchestrationSeconds: number;
  iterationSeconds: number;
  /** sampler–learner mismatch of this iteration's sampled tokens (mismatch/* in MLflow; DESIGN §9); staleness in an async run */
  mismatch?: MismatchStats;
  /** an asynchronous run (DESIGN §10): the oldest checkpoint that sampled the batch this step trained */
  sampledFrom?: number;
  /** the weight sync to an external server before the rollouts: its time and the probe's |Δ log p| */
  sync?: {
    seconds: number;
    reloaded: boolean;
    probeMaxAbsDelta: number;
    /** absent in records from before half-precision probes bounded the mean */
    probeMeanAbsDelta?: number;
    /** which |Δ| probeTolerance bounds (absent: max) */
    probeStatistic?: 'max' | 'mean';
    probeTolerance: number;
  };
  /**
   * the grader's integrity verdicts on the episodes the tests graded (absent when none was): the hack rate (episodes
   * caught hacking over graded ones), and graded episodes per kind and per `kind/rule` (lib/swe/integrity.ts)
   */
  integrity?: { episodes: number; hacks: number; hackRate: number; counts: Record<string, number> };
  /** validation (config.eval) of this iteration's checkpoint: pass@1 and pass@k on the held-out tasks */
  eval?: { evalId: string; pass1: number; passAtK: Record<string, number> };
  evalSeconds?: number;
  /** validation episodes that could not happen (not scored) */
  evalErrors?: number;
}

export interface RlIterationInput {
  runId: string;
  n: number;
  checkpoint: number;
  config: TrainingConfig;
}
export interface RlIterationResult {
  checkpoint: number;
  metrics: IterationMetrics;
}

/**
 * A batch rolled out and not trained yet (async "one-step"): what its learner step and metrics need, its items as
 * store keys, so the run's state stays small through continue-as-new.
 */
export interface PendingBatch {
  /** the batch (iteration) index */
  n: number;
  /** the checkpoint that sampled it */
  checkpoint: number;
  /** store keys of its LearnerItem[] */
  itemParts: string[];
  summary: IterationSummary;
  /** the first failures (bounded) */
  failures: RolloutFailure[];
  rolloutErrors: number;
  rolloutWorkflows?: number;
  rolloutSeconds: number;
  sync?: IterationMetrics['sync'];
}
/** Iteration n of an async "one-step" run: step n trains `pending` (batch n) while batch n+1 rolls out on checkpoint n (when `next`). */
export interface OneStepIterationInput extends RlIterationInput {
  pending: PendingBatch | null;
  next: boolean;
}
export interface OneStepIterationResult extends RlIterationResult {
  /** batch n+1, rolled out during the step (null when not asked for) */
  pending: PendingBatch | null;
}

export interface IterationProgress {
  n: number;
  phase: IterationPhase;
  rolloutsDone: number;
  rolloutsTotal: number;
  rolloutErrors: number;
}

export interface TrainingRunState {
  /** iterations completed so far (= index of the next one) */
  iteration: number;
  checkpoint: number;
  lastMetrics: IterationMetrics | null;
  /** mean reward and success rate of recent iterations (bounded) */
  recent: { iteration: number; meanReward: number; successRate: number }[];
  paused: boolean;
  /** why the run paused itself (integrity.pauseAbove), until resumed */
  pausedFor?: string | null;
  /** stop once this many iterations are complete */
  stopAt: number | null;
  /** the newest evaluation scores seen in an iteration's metrics (for the run's current details) */
  lastEval?: { iteration: number; scores: [string, number][] } | null;
  /** async "one-step": the next batch, rolled out on the previous checkpoint, not trained yet */
  pending?: PendingBatch | null;
  /** async "pump": the groups admitted and complete (lib/pump.ts); the policy server URL the groups use */
  pump?: PumpState & { policyUrl: string };
}

export interface TrainingStatus {
  runId: string;
  iteration: number;
  iterations: number;
  running: boolean;
  phase: IterationPhase;
  checkpoint: number;
  iterationWorkflowId: string | null;
  counts: { iterationsDone: number; iterationsTotal: number; rolloutsPerIteration: number };
  lastMetrics: IterationMetrics | null;
  recent: TrainingRunState['recent'];
  paused: boolean;
  stopAt: number | null;
  hyperparameters: Hyperparameters;
  /** an async pump run: groups admitted and running, complete and waiting for their step, and the next to admit */
  pump?: { inFlight: number; done: number; next: number };
}

export interface TrainingRunResult {
  runId: string;
  iterations: number;
  checkpoint: number;
  stopped: boolean;
  lastMetrics: IterationMetrics | null;
  recent: TrainingRunState['recent'];
}

/** After an iteration (and at the end): redraw the run's plots in the store and bring the tracker up to date. */
export interface ReportRunInput {
  storeUrl: string;
  runId: string;
  tracking: TrainingConfig['tracking'];
  /** the run is over: close its tracker run with this status */
  final?: { status: 'FINISHED' | 'KILLED' | 'FAILED' };
  /** fail (to be retried) while anything is still undelivered */
  requireDelivered?: boolean;
}
export interface ReportRunResult {
  iterations: number;
  /** store keys of the rendered plots */
  plots: string[];
  /** null without a tracker; `pending` counts what could not be delivered yet */
  tracking: { mlflowRunId: string | null; sent: number; pending: number; error?: string } | null;
}

export const TASK_QUEUES = { rollout: 'rollout', learner: 'learner' } as const;

export function iterationWorkflowId(runId: string, n: number): string {
  return `${runId}-iter-${n}`;
}

/** An async pump's group g (task g mod B of batch ⌊g/B⌋): a child workflow that outlives continue-as-new. */
export interface RolloutGroupInput {
  runId: string;
  /** the training run's workflow id, which the group reports to (it survives continue-as-new) */
  runWorkflowId: string;
  g: number;
  /** batch */
  n: number;
  /** task index in the batch */
  j: number;
  taskId: string;
  /** the version its episodes start on */
  checkpoint: number;
  /** streaming: episodes may move to newer checkpoints up to this one between turns */
  streaming?: { newest: number };
  policyUrl: string;
  config: TrainingConfig;
}
export interface RolloutGroupResult {
  g: number;
  key: string;
}

export function rolloutGroupWorkflowId(runId: string, g: number): string {
  return `${runId}-group-${g}`;
}

export function rolloutChunkWorkflowId(runId: string, n: number, chunk: number): string {
  return `${iterationWorkflowId(runId, n)}-rollouts-${chunk}`;
}
