// Inputs and outputs of the evaluation workflows that cross history (ids, counts, small summaries).
import type { EvalMetrics } from './metrics.ts';
import type { SyncPolicyInput } from '../training/shapes.ts';
import type { IntegrityCounts } from '../swe/integrity.ts';

export interface EvalItem {
  taskId: string;
  run: number;
}

export interface EvaluationShardInput {
  evalId: string;
  storeUrl: string;
  shard: number;
  items: EvalItem[];
  /** episodes in flight at once in this shard */
  lanes: number;
  /** our policy server (run and path models); re-synced through `sync` when it goes away */
  policyUrl?: string;
  sync?: SyncPolicyInput;
  maxAttempts: number;
  heartbeatTimeoutSeconds: number;
  /** start-to-close of one episode: the episode limit plus grading and slack */
  episodeMinutes: number;
}

export interface ShardProgress {
  shard: number;
  done: number;
  resolved: number;
  errors: number;
}

export type ShardResult = ShardProgress;

export type EvaluationPhase = 'preparing' | 'syncing' | 'episodes' | 'reporting' | 'done';

export interface EvaluationStatus {
  evalId: string;
  phase: EvaluationPhase;
  total: number;
  done: number;
  resolved: number;
  errors: number;
  /** resolved / finished episodes so far */
  pass1SoFar: number | null;
  shards: number;
  summary: EvalReportSummary | null;
}

export interface EvaluationRunResult {
  evalId: string;
  summary: EvalReportSummary;
}

export type SelectionPhase = 'preparing' | 'verifying' | 'selecting' | 'done';

export interface SelectionStatus {
  evalId: string;
  selectionId: string;
  phase: SelectionPhase;
  total: number;
  done: number;
  errors: number;
}

/** The small summary of a finished evaluation that crosses workflow history. */
export interface EvalReportSummary {
  evalId: string;
  modelName: string;
  tasks: number;
  runs: number;
  pass1: number;
  pass1Completed: number | null;
  pass1CI: { low: number; high: number; level: number } | null;
  passAtK: (number | null)[];
  passAtKCompleted: (number | null)[];
  episodes: EvalMetrics['episodes'];
  /** the first errors (all are in the report) */
  errors: { taskId: string; run: number; reason: string }[];
  /** store prefix of the report files */
  reportKey: string;
  /** the grader's integrity verdicts on the graded episodes (lib/swe/integrity.ts) */
  integrity?: IntegrityCounts & { hackRate: number };
  /** pass@1 on the tasks with strong tests, beside pass1 on all (when the tasks carry a measured strength) */
  strong?: { minStrength: number; tasks: number; pass1: number };
}
