// Every workflow a worker serves (the one place; others append their export line here).
export { trainingRun } from './training-run.ts';
export { rlIteration, rolloutChunk } from './rl-iteration.ts';
export { validateTasks } from './validate-tasks.ts';
export { evaluationRun, evaluationShard } from './evaluation-run.ts';
export { trackingCatchUp } from './run-reporting.ts';
export { selectBestOfK, selectionShard } from './select-best-of-k.ts';
export { oneStepIteration } from './one-step-iteration.ts';
export { rolloutGroup } from './pump.ts';
export { synthesizeTasks } from './synthesize-tasks.ts';
