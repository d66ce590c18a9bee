// The task factory's activities (rollout queue; workflows/synthesize-tasks.ts schedules them).
import { synthBaseline, synthCandidates, synthPrepareRepo } from './repo.ts';
import { synthCombine, synthValidateChunk } from './validate.ts';
import { synthWrite } from './output.ts';

export const factoryActivities = { synthPrepareRepo, synthBaseline, synthCandidates, synthValidateChunk, synthCombine, synthWrite };
