// The training run (DESIGN §1): validates its config, makes checkpoint 0, then runs one child
// rlIteration per workflow run and continues-as-new with its small state.
import {
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  executeChild,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.ts';
import {
  applyHyperparameters,
  hyperparametersOf,
  validateConfig,
  validateHyperparametersUpdate,
  type TrainingConfig,
} from '../lib/config.ts';
import { rlIteration } from './rl-iteration.ts';
import {
  pauseSignal,
  phaseSignal,
  resumeSignal,
  RL_ITERATION_SA,
  RL_MEAN_REWARD_SA,
  RL_PHASE_SA,
  statusQuery,
  stopAfterIterationSignal,
  updateHyperparametersUpdate,
} from './signals.ts';
import type { IterationPhase, TrainingRunResult, TrainingRunState } from './shapes.ts';
import { iterationWorkflowId, TASK_QUEUES } from './shapes.ts';

type Activities = ReturnType<typeof createActivities>;

const RECENT = 50;

export async function trainingRun(rawConfig: unknown, previous?: TrainingRunState): Promise<TrainingRunResult> {
  const v = validateConfig(rawConfig);
  if (!v.ok) {
    throw ApplicationFailure.create({ type: 'InvalidConfig', nonRetryable: true, message: `invalid training config: ${v.errors.join('; ')}` });
  }
  const runId = v.config.runId ?? workflowInfo().workflowId;
  let config: TrainingConfig = { ...v.config, runId };
  const state: TrainingRunState = previous ?? { iteration: 0, checkpoint: -1, lastMetrics: null, recent: [], paused: false, stopAt: null };
  let phase: IterationPhase = 'starting';
  let running = false;

  const setPhase = (p: IterationPhase): void => {
    phase = p;
    upsertSearchAttributes([{ key: RL_PHASE_SA, value: p }]);
  };

  setHandler(pauseSignal, () => {
    state.paused = true;
  });
  setHandler(resumeSignal, () => {
    state.paused = false;
  });
  setHandler(stopAfterIterationSignal, (arg) => {
    const at = arg?.iteration !== undefined ? arg.iteration + 1 : running ? state.iteration + 1 : state.iteration;
    state.stopAt = state.stopAt === null ? at : Math.min(state.stopAt, at);
  });
  setHandler(phaseSignal, ({ n, phase: p }) => {
    if (running && n === state.iteration) setPhase(p);
  });
  setHandler(
    updateHyperparametersUpdate,
    (update) => {
      config = applyHyperparameters(config, validateHyperparametersUpdate(update).ok ? update : {});
      return hyperparametersOf(config);
    },
    {
      validator: (update) => {
        const r = validateHyperparametersUpdate(update);
        if (!r.ok) {
          throw ApplicationFailure.create({ type: 'InvalidHyperparameters', nonRetryable: true, message: `invalid hyperparameters: ${r.errors.join('; ')}` });
        }
      },
    },
  );
  setHandler(statusQuery, () => ({
    runId,
    iteration: state.iteration,
    iterations: config.iterations,
    running,
    phase,
    checkpoint: state.checkpoint,
    iterationWorkflowId: running ? iterationWorkflowId(runId, state.iteration) : null,
    counts: {
      iterationsDone: state.iteration,
      iterationsTotal: config.iterations,
      rolloutsPerIteration: config.batch.tasks * config.batch.samples,
    },
    lastMetrics: state.lastMetrics,
    recent: state.recent,
    paused: state.paused,
    stopAt: state.stopAt,
    hyperparameters: hyperparametersOf(config),
  }));

  const finish = async (stopped: boolean): Promise<TrainingRunResult> => {
    setPhase('finished');
    await condition(allHandlersFinished);
    return { runId, iterations: state.iteration, checkpoint: state.checkpoint, stopped, lastMetrics: state.lastMetrics, recent: state.recent };
  };
  const stopRequested = () => state.stopAt !== null && state.iteration >= state.stopAt;

  if (state.checkpoint < 0) {
    const learner = proxyActivities<Activities>({
      taskQueue: TASK_QUEUES.learner,
      startToCloseTimeout: '30 minutes',
      retry: { maximumAttempts: 5, nonRetryableErrorTypes: ['InvalidConfig'] },
    });
    const init = await learner.initCheckpoint({ storeUrl: config.store.url, runId, model: config.model });
    state.checkpoint = init.checkpoint;
  }
  upsertSearchAttributes([{ key: RL_ITERATION_SA, value: state.iteration }]);

  if (state.iteration >= config.iterations) return finish(false);
  if (stopRequested()) return finish(true);
  if (state.paused) {
    setPhase('paused');
    await condition(() => !state.paused || stopRequested() || workflowInfo().continueAsNewSuggested);
    if (stopRequested()) return finish(true);
    if (state.paused) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof trainingRun>(config, state);
    }
  }

  running = true;
  const n = state.iteration;
  setPhase('starting');
  const result = await executeChild(rlIteration, {
    workflowId: iterationWorkflowId(runId, n),
    taskQueue: TASK_QUEUES.learner,
    args: [{ runId, n, checkpoint: state.checkpoint, config }],
  });
  running = false;
  state.iteration = n + 1;
  state.checkpoint = result.checkpoint;
  state.lastMetrics = result.metrics;
  state.recent = [...state.recent, { iteration: n, meanReward: result.metrics.meanReward, successRate: result.metrics.successRate }].slice(-RECENT);
  upsertSearchAttributes([
    { key: RL_ITERATION_SA, value: state.iteration },
    { key: RL_MEAN_REWARD_SA, value: result.metrics.meanReward },
  ]);
  setPhase('done');

  if (stopRequested()) return finish(true);
  if (state.iteration >= config.iterations) return finish(false);
  await condition(allHandlersFinished);
  return continueAsNew<typeof trainingRun>(config, state);
}
