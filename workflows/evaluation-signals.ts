// Queries, signals and search attributes of the evaluation workflows (one definition each).
import { defineQuery, defineSignal } from '@temporalio/workflow';
import { defineSearchAttributeKey } from '@temporalio/common';
import type { EvaluationStatus, SelectionStatus, ShardProgress } from '../lib/eval/shapes.ts';

export const evaluationStatusQuery = defineQuery<EvaluationStatus>('status');
export const selectionStatusQuery = defineQuery<SelectionStatus>('status');
/** sent by each evaluationShard to its evaluationRun: absolute counts, so a repeated signal changes nothing */
export const shardProgressSignal = defineSignal<[ShardProgress]>('shardProgress');

/** pass@1 so far (resolved / finished episodes), then the final pass@1 against the dataset */
export const EVAL_PASS1_SA = defineSearchAttributeKey('EvalPass1', 'DOUBLE');
/** episodes finished (resolved, unresolved or error) */
export const EVAL_DONE_SA = defineSearchAttributeKey('EvalDone', 'INT');
/** pass@1 of the newest validation evaluation of a training run */
export const RL_EVAL_PASS1_SA = defineSearchAttributeKey('RlEvalPass1', 'DOUBLE');
