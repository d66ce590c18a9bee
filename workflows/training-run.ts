// The training run (DESIGN §1): validates its config, makes checkpoint 0, then runs child rlIterations
// in a loop and continues-as-new with its small state every `continueAsNewEvery` iterations or when
// Temporal suggests it (one row in the UI for long). Handler state (pause, stop, hyperparameters, status)
// lives in TrainingRun; the workflow function reads as the process.
import {
  CancellationScope,
  ContinueAsNew,
  allHandlersFinished,
  condition,
  continueAsNew,
  deprecatePatch,
  patched,
  executeChild,
  isCancellation,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.ts';
import { applyHyperparameters, asyncMode, hyperparametersOf, validateConfig, validateHyperparametersUpdate, type TrainingConfig } from '../lib/config.ts';
import { FailureType, nonRetryable, RetryPolicies } from '../lib/failures.ts';
import { rlIteration } from './rl-iteration.ts';
import { oneStepIteration } from './one-step-iteration.ts';
import { pumpRun, type PumpHost } from './pump.ts';
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
import type { IterationMetrics, IterationPhase, RlIterationResult, TrainingRunResult, TrainingRunState, TrainingStatus } from '../lib/training/shapes.ts';
import { iterationWorkflowId, TASK_QUEUES } from '../lib/training/shapes.ts';
import { noteEvaluation, runDetails, runReporter, type RunReporter } from './run-reporting.ts';

type Activities = ReturnType<typeof createActivities>;

/** iterations whose reward the run's state keeps (the status query's `recent`) */
const RECENT = 50;
/** Retired version branch (deprecated; no run needs its old path): one iteration per workflow run, no reports. */
const PROGRESS_VIEW_PATCH = 'training-run-progress-view';
/** Runs started before eval.contextBudget became eval.responseBudget read their input under the new name. */
const RESPONSE_BUDGET_PATCH = 'config-response-budget';

export async function trainingRun(rawConfig: unknown, previous?: TrainingRunState): Promise<TrainingRunResult> {
  deprecatePatch(PROGRESS_VIEW_PATCH);
  const run = new TrainingRun(validTrainingConfig(rawConfig), previous);
  run.handleMessages();
  try {
    await run.ensureFirstCheckpoint();
    // an async pump keeps rollouts in flight across iterations: its own loop (workflows/pump.ts)
    if (asyncMode(run.config) === 'pump') return await pumpRun(run);
    for (let inThisRun = 0; ; inThisRun++) {
      if (run.stopReached()) return await run.finish(true);
      if (run.allIterationsDone()) return await run.finish(false);
      if (inThisRun > 0 && run.continueAsNewDue(inThisRun)) return await run.continueAsNew();
      if (run.state.paused) {
        await run.waitWhilePaused();
        if (run.stopReached()) return await run.finish(true);
        if (run.state.paused) return await run.continueAsNew();
      }
      await run.iterate();
    }
  } catch (err) {
    // the run failed or was cancelled: close its tracker run so, then end as before
    if (!(err instanceof ContinueAsNew)) await run.closeTracking(isCancellation(err) ? 'KILLED' : 'FAILED');
    throw err;
  }
}

/** Why the run pauses itself after iteration `m` (integrity.pauseAbove crossed), or undefined. */
export function hackRatePause(config: TrainingConfig, m: IterationMetrics): string | undefined {
  const above = config.integrity?.pauseAbove;
  const i = m.integrity;
  if (above === undefined || !i || i.hackRate <= above) return undefined;
  return `hack rate ${(100 * i.hackRate).toFixed(1)}% (${i.hacks} of ${i.episodes} graded episodes) at iteration ${m.iteration} is above integrity.pauseAbove ${above}: review with \`swerl report --integrity ${config.runId}\`, then signal resume`;
}

function validTrainingConfig(rawConfig: unknown): TrainingConfig {
  const v = validateConfig(rawConfig, { recorded: !patched(RESPONSE_BUDGET_PATCH) });
  if (!v.ok) throw nonRetryable(FailureType.InvalidConfig, `invalid training config: ${v.errors.join('; ')}`);
  return { ...v.config, runId: v.config.runId ?? workflowInfo().workflowId };
}

/** A training run's state and everything its signals, update and query touch. */
class TrainingRun implements PumpHost {
  readonly runId: string;
  readonly state: TrainingRunState;
  private phase: IterationPhase = 'starting';
  /** an rlIteration child is running (iteration `state.iteration`) */
  private running = false;
  private readonly reporter: RunReporter;

  constructor(
    /** the config now: hyperparameter updates replace it */
    public config: TrainingConfig,
    previous?: TrainingRunState,
  ) {
    this.runId = config.runId!;
    this.state = previous ?? { iteration: 0, checkpoint: -1, lastMetrics: null, recent: [], paused: false, stopAt: null };
    this.reporter = runReporter(this.runId, () => this.config);
  }

  handleMessages(): void {
    setHandler(pauseSignal, () => {
      this.state.paused = true;
    });
    setHandler(resumeSignal, () => {
      this.state.paused = false;
      this.state.pausedFor = null;
    });
    setHandler(stopAfterIterationSignal, (arg) => {
      const s = this.state;
      const at = arg?.iteration !== undefined ? arg.iteration + 1 : this.running ? s.iteration + 1 : s.iteration;
      s.stopAt = s.stopAt === null ? at : Math.min(s.stopAt, at);
    });
    setHandler(phaseSignal, ({ n, phase }) => {
      if (this.running && n === this.state.iteration) this.setPhase(phase);
    });
    setHandler(
      updateHyperparametersUpdate,
      (update) => {
        this.config = applyHyperparameters(this.config, validateHyperparametersUpdate(update).ok ? update : {});
        return hyperparametersOf(this.config);
      },
      {
        validator: (update) => {
          const r = validateHyperparametersUpdate(update);
          if (!r.ok) throw nonRetryable(FailureType.InvalidHyperparameters, `invalid hyperparameters: ${r.errors.join('; ')}`);
          const { batch } = this.config;
          const batchRollouts = batch.tasks * batch.samples;
          if (asyncMode(this.config) === 'pump' && update.maxInflightRollouts !== undefined && update.maxInflightRollouts < batchRollouts) {
            throw nonRetryable(
              FailureType.InvalidHyperparameters,
              `invalid hyperparameters: hyperparameters.maxInflightRollouts: must be at least one batch (${batchRollouts}) with async.mode "pump", got ${update.maxInflightRollouts}`,
            );
          }
        },
      },
    );
    setHandler(statusQuery, () => this.status());
  }

  private status(): TrainingStatus {
    const { config, state } = this;
    return {
      runId: this.runId,
      iteration: state.iteration,
      iterations: config.iterations,
      running: this.running,
      phase: this.phase,
      checkpoint: state.checkpoint,
      iterationWorkflowId: this.running ? iterationWorkflowId(this.runId, state.iteration) : null,
      counts: { iterationsDone: state.iteration, iterationsTotal: config.iterations, rolloutsPerIteration: config.batch.tasks * config.batch.samples },
      lastMetrics: state.lastMetrics,
      recent: state.recent,
      paused: state.paused,
      stopAt: state.stopAt,
      hyperparameters: hyperparametersOf(config),
      ...(state.pump ? { pump: { inFlight: state.pump.inFlight.length, done: state.pump.done.length, next: state.pump.next } } : {}),
    };
  }

  setPhase(p: IterationPhase): void {
    this.phase = p;
    upsertSearchAttributes([{ key: RL_PHASE_SA, value: p }]);
    this.showDetails();
  }

  private showDetails(): void {
    setCurrentDetails(runDetails({ runId: this.runId, state: this.state, config: this.config, phase: this.phase, running: this.running }));
  }

  stopReached(): boolean {
    return this.state.stopAt !== null && this.state.iteration >= this.state.stopAt;
  }

  allIterationsDone(): boolean {
    return this.state.iteration >= this.config.iterations;
  }

  continueAsNewDue(inThisRun: number): boolean {
    return inThisRun >= this.config.continueAsNewEvery || workflowInfo().continueAsNewSuggested;
  }

  /** A new run writes checkpoint 0 (from its model preset, directory or an earlier run). */
  async ensureFirstCheckpoint(): Promise<void> {
    if (this.state.checkpoint < 0) {
      const learner = proxyActivities<Activities>({ taskQueue: TASK_QUEUES.learner, startToCloseTimeout: '30 minutes', retry: RetryPolicies.short(5) });
      const init = await learner.initCheckpoint({ storeUrl: this.config.store.url, runId: this.runId, model: this.config.model });
      this.state.checkpoint = init.checkpoint;
    }
    upsertSearchAttributes([{ key: RL_ITERATION_SA, value: this.state.iteration }]);
    this.showDetails();
  }

  /** Paused: waits for resume, a stop, or Temporal's suggestion to continue as new. */
  async waitWhilePaused(): Promise<void> {
    this.setPhase('paused');
    await condition(() => !this.state.paused || this.stopReached() || workflowInfo().continueAsNewSuggested);
  }

  /**
   * One iteration child: checkpoint n → n+1, its metrics into the run's state, search attributes and report. An rlIteration,
   * or (async "one-step") a oneStepIteration, which trains the batch the previous one rolled out while rolling out the next.
   */
  async iterate(): Promise<void> {
    const { runId, state } = this;
    const n = state.iteration;
    this.running = true;
    this.setPhase('starting');
    const options = {
      workflowId: iterationWorkflowId(runId, n),
      taskQueue: TASK_QUEUES.learner,
      staticSummary: `iteration ${n} of ${runId} (checkpoint ${state.checkpoint} → ${state.checkpoint + 1})`,
    };
    const input = { runId, n, checkpoint: state.checkpoint, config: this.config };
    let result: RlIterationResult;
    if (asyncMode(this.config) === 'one-step') {
      // the next batch is rolled out during this step unless nothing will train it
      const next = n + 1 < this.config.iterations && (state.stopAt === null || n + 1 < state.stopAt);
      const r = await executeChild(oneStepIteration, { ...options, args: [{ ...input, pending: state.pending ?? null, next }] });
      state.pending = r.pending;
      result = r;
    } else {
      result = await executeChild(rlIteration, { ...options, args: [input] });
    }
    this.running = false;
    this.afterStep(n, result.checkpoint, result.metrics);
    this.setPhase('done');
  }

  get currentPhase(): IterationPhase {
    return this.phase;
  }

  setRunning(running: boolean): void {
    this.running = running;
  }

  /** Step n wrote `checkpoint`: the run's state, search attributes and report. */
  afterStep(n: number, checkpoint: number, metrics: IterationMetrics): void {
    this.recordIteration(n, checkpoint, metrics);
    this.reporter.afterIteration(n);
  }

  private recordIteration(n: number, checkpoint: number, m: IterationMetrics): void {
    const state = this.state;
    state.iteration = n + 1;
    state.checkpoint = checkpoint;
    state.lastMetrics = m;
    state.recent = [...state.recent, { iteration: n, meanReward: m.meanReward, successRate: m.successRate }].slice(-RECENT);
    noteEvaluation(state, m);
    const why = hackRatePause(this.config, m);
    if (why) {
      state.paused = true;
      state.pausedFor = why;
    }
    upsertSearchAttributes([
      { key: RL_ITERATION_SA, value: state.iteration },
      { key: RL_MEAN_REWARD_SA, value: m.meanReward },
      ...(m.eval ? [{ key: RL_EVAL_PASS1_SA, value: m.eval.pass1 }] : []),
    ]);
  }

  async finish(stopped: boolean): Promise<TrainingRunResult> {
    this.setPhase('finished');
    await this.reporter.finish('FINISHED');
    await condition(allHandlersFinished);
    const { state } = this;
    return { runId: this.runId, iterations: state.iteration, checkpoint: state.checkpoint, stopped, lastMetrics: state.lastMetrics, recent: state.recent };
  }

  async continueAsNew(): Promise<never> {
    await this.reporter.settle();
    await condition(allHandlersFinished);
    return continueAsNew<typeof trainingRun>(this.config, this.state);
  }

  /** Closes the run's tracker run with `status` (even while the run is being cancelled). */
  async closeTracking(status: 'KILLED' | 'FAILED'): Promise<void> {
    await CancellationScope.nonCancellable(() => this.reporter.finish(status));
  }
}
