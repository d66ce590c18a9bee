// The training run (DESIGN §1): validates its config, makes checkpoint 0, then runs child rlIterations
// in a loop and continues-as-new with its small state every `continueAsNewEvery` iterations or when
// Temporal suggests it (one row in the UI for long); histories recorded before that ran one per run.
import {
  CancellationScope,
  ContinueAsNew,
  allHandlersFinished,
  condition,
  continueAsNew,
  executeChild,
  isCancellation,
  patched,
  proxyActivities,
  setCurrentDetails,
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
import { RL_EVAL_PASS1_SA } from './evaluation-signals.ts';
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
import { noteEvaluation, PROGRESS_VIEW_PATCH, runDetails, runReporter } from './run-reporting.ts';
import { FailureType, nonRetryable, RetryPolicies } from '../lib/failures.ts';

type Activities = ReturnType<typeof createActivities>;

const RECENT = 50;

export async function trainingRun(rawConfig: unknown, previous?: TrainingRunState): Promise<TrainingRunResult> {
  const v = validateConfig(rawConfig);
  if (!v.ok) {
    throw nonRetryable(FailureType.InvalidConfig, `invalid training config: ${v.errors.join('; ')}`);
  }
  const runId = v.config.runId ?? workflowInfo().workflowId;
  let config: TrainingConfig = { ...v.config, runId };
  const state: TrainingRunState = previous ?? { iteration: 0, checkpoint: -1, lastMetrics: null, recent: [], paused: false, stopAt: null };
  let phase: IterationPhase = 'starting';
  let running = false;
  // runs recorded before this patch ran one iteration per workflow run and reported nothing
  const progressView = patched(PROGRESS_VIEW_PATCH);
  const reporter = progressView ? runReporter(runId, () => config) : null;
  const showDetails = () => setCurrentDetails(runDetails({ runId, state, config, phase, running }));

  const setPhase = (p: IterationPhase): void => {
    phase = p;
    upsertSearchAttributes([{ key: RL_PHASE_SA, value: p }]);
    showDetails();
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
          throw nonRetryable(FailureType.InvalidHyperparameters, `invalid hyperparameters: ${r.errors.join('; ')}`);
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
    await reporter?.finish('FINISHED');
    await condition(allHandlersFinished);
    return { runId, iterations: state.iteration, checkpoint: state.checkpoint, stopped, lastMetrics: state.lastMetrics, recent: state.recent };
  };
  const stopRequested = () => state.stopAt !== null && state.iteration >= state.stopAt;

  if (state.checkpoint < 0) {
    const learner = proxyActivities<Activities>({
      taskQueue: TASK_QUEUES.learner,
      startToCloseTimeout: '30 minutes',
      retry: RetryPolicies.short(5),
    });
    const init = await learner.initCheckpoint({ storeUrl: config.store.url, runId, model: config.model });
    state.checkpoint = init.checkpoint;
  }
  upsertSearchAttributes([{ key: RL_ITERATION_SA, value: state.iteration }]);
  showDetails();

  const continueAsNewNow = async (): Promise<never> => {
    await reporter?.settle();
    await condition(allHandlersFinished);
    return continueAsNew<typeof trainingRun>(config, state);
  };

  try {
    for (let inThisRun = 0; ; ) {
      if (state.iteration >= config.iterations) return await finish(false);
      if (stopRequested()) return await finish(true);
      if (state.paused) {
        setPhase('paused');
        await condition(() => !state.paused || stopRequested() || workflowInfo().continueAsNewSuggested);
        if (stopRequested()) return await finish(true);
        if (state.paused) return await continueAsNewNow();
      }

      running = true;
      const n = state.iteration;
      setPhase('starting');
      const result = await executeChild(rlIteration, {
        workflowId: iterationWorkflowId(runId, n),
        taskQueue: TASK_QUEUES.learner,
        args: [{ runId, n, checkpoint: state.checkpoint, config }],
        ...(progressView ? { staticSummary: `iteration ${n} of ${runId} (checkpoint ${state.checkpoint} → ${state.checkpoint + 1})` } : {}),
      });
      running = false;
      state.iteration = n + 1;
      state.checkpoint = result.checkpoint;
      state.lastMetrics = result.metrics;
      state.recent = [...state.recent, { iteration: n, meanReward: result.metrics.meanReward, successRate: result.metrics.successRate }].slice(-RECENT);
      noteEvaluation(state, result.metrics);
      upsertSearchAttributes([
        { key: RL_ITERATION_SA, value: state.iteration },
        { key: RL_MEAN_REWARD_SA, value: result.metrics.meanReward },
        ...(result.metrics.eval ? [{ key: RL_EVAL_PASS1_SA, value: result.metrics.eval.pass1 }] : []),
      ]);
      reporter?.afterIteration(n);
      setPhase('done');
      inThisRun++;

      if (stopRequested()) return await finish(true);
      if (state.iteration >= config.iterations) return await finish(false);
      if (!progressView || inThisRun >= config.continueAsNewEvery || workflowInfo().continueAsNewSuggested) return await continueAsNewNow();
    }
  } catch (err) {
    // the run failed or was cancelled: close its tracker run so, then end as before
    if (reporter && !(err instanceof ContinueAsNew)) {
      const status = isCancellation(err) ? 'KILLED' : 'FAILED';
      await CancellationScope.nonCancellable(() => reporter.finish(status));
    }
    throw err;
  }
}
