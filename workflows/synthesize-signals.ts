// The query and search attributes of the task factory's workflow (one definition each).
import { defineQuery, defineSignal } from '@temporalio/workflow';
import { defineSearchAttributeKey } from '@temporalio/common';
import type { SynthStatus } from '../lib/factory/shapes.ts';

export const synthStatusQuery = defineQuery<SynthStatus>('status');
/** stop taking new candidates: the chunks in flight end, then the tasks validated so far are written (a time budget) */
export const synthFinishSignal = defineSignal('finish');
/** tasks validated so far (all tiers, before the final selection) */
export const SYNTH_VALIDATED_SA = defineSearchAttributeKey('SynthValidated', 'INT');
/** preparing, baseline, candidates, validating, combining, writing, done */
export const SYNTH_PHASE_SA = defineSearchAttributeKey('SynthPhase', 'KEYWORD');
