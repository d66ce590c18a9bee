// Signals, updates, queries and search attributes of the training workflows (one definition each).
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { defineSearchAttributeKey } from '@temporalio/common';
import type { Hyperparameters, HyperparametersUpdate } from '../lib/config.ts';
import type { IterationPhase, IterationProgress, RolloutChunkProgress, TrainingStatus } from '../lib/training/shapes.ts';

export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
/** stop once iteration `iteration` (0-based) is complete; without it, after the current one */
export const stopAfterIterationSignal = defineSignal<[{ iteration?: number }?]>('stopAfterIteration');
/** sent by rlIteration to its parent on each phase change */
export const phaseSignal = defineSignal<[{ n: number; phase: IterationPhase }]>('iterationPhase');
export const updateHyperparametersUpdate = defineUpdate<Hyperparameters, [HyperparametersUpdate]>('updateHyperparameters');
/** sent by a rolloutChunk child to its rlIteration as its rollouts finish */
export const chunkProgressSignal = defineSignal<[RolloutChunkProgress]>('rolloutChunkProgress');
/** sent by an async pump's rolloutGroup child to its run (by workflow id, which survives continue-as-new) once its result is stored */
export const groupDoneSignal = defineSignal<[{ g: number }]>('rolloutGroupDone');
/** rlIteration's rollout progress */
export const progressQuery = defineQuery<IterationProgress>('progress');
export const statusQuery = defineQuery<TrainingStatus>('status');

export const RL_ITERATION_SA = defineSearchAttributeKey('RlIteration', 'INT');
export const RL_MEAN_REWARD_SA = defineSearchAttributeKey('RlMeanReward', 'DOUBLE');
export const RL_PHASE_SA = defineSearchAttributeKey('RlPhase', 'KEYWORD');
