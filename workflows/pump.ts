// An async pump run (DESIGN §10, stage 2): trainingRun keeps up to C rollouts in flight continuously, as group
// child workflows (one task's G samples each) that outlive a continue-as-new (parent close policy ABANDON) and
// report to the run by its workflow id. Groups are admitted by lib/pump.ts (AReaL's rule: no trained token more
// than η versions old); each learner step trains the next batch's B groups once all are complete.
//
// What survives what: a group's result is stored before it reports, so a report lost to a closed or terminated run
// is found in the store by the run that recovers it (a new run with the same run id reads its newest checkpoint and
// the groups stored since, and starts again the groups not stored: one still running answers "already started"
// and reports when done). Rollouts and learner steps are idempotent (a stored trajectory or checkpoint is returned
// as it is), and step k trains exactly the groups of batch k: every trajectory is trained once, none is lost.
import { condition, getExternalWorkflowHandle, log, setHandler, startChild, workflowInfo, type ParentClosePolicy } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { TrainingConfig } from '../lib/config.ts';
import { admit, batchReady, complete, recoveredPump, startVersion, takeBatch, totalGroups, batchOf, type PumpParams, type PumpState } from '../lib/pump.ts';
import { activitiesFor, iterationMetrics, MAX_REPORTED_FAILURES, rollOutTasks, syncPolicyInput } from './rl-iteration.ts';
import { groupDoneSignal } from './signals.ts';
import type { IterationMetrics, IterationPhase, LearnerStepResult, RolloutGroupInput, RolloutGroupResult, TrainingRunResult, TrainingRunState } from '../lib/training/shapes.ts';
import { rolloutGroupWorkflowId, TASK_QUEUES } from '../lib/training/shapes.ts';

/** What the pump needs of its training run (TrainingRun in training-run.ts). */
export interface PumpHost {
  readonly runId: string;
  /** the config now (hyperparameter updates change it) */
  readonly config: TrainingConfig;
  readonly state: TrainingRunState;
  readonly currentPhase: IterationPhase;
  setPhase(p: IterationPhase): void;
  /** a learner step is running (the status query's `running`) */
  setRunning(running: boolean): void;
  /** step n wrote `checkpoint`: the run's state, search attributes and reports */
  afterStep(n: number, checkpoint: number, metrics: IterationMetrics): void;
  stopReached(): boolean;
  allIterationsDone(): boolean;
  continueAsNewDue(stepsInThisRun: number): boolean;
  continueAsNew(): Promise<never>;
  finish(stopped: boolean): Promise<TrainingRunResult>;
}

const ABANDON: ParentClosePolicy = 'ABANDON';

interface NewsMark {
  events: number;
  paused: boolean;
  stopAt: number | null;
  suggested: boolean;
}

export function pumpParams(config: TrainingConfig): PumpParams {
  if (config.async?.mode !== 'pump') throw new Error('not a pump run');
  return {
    groupsPerBatch: config.batch.tasks,
    groupSize: config.batch.samples,
    capacity: config.maxInflightRollouts,
    maxStaleness: config.async.maxStaleness,
    batches: config.iterations,
  };
}

/** The pump's loop: admit, train the next complete batch, wait for news; stop, finish or continue as new between steps. */
export async function pumpRun(run: PumpHost): Promise<TrainingRunResult> {
  const pump = new RolloutPump(run);
  await pump.recoverOrContinue();
  // steps this workflow run took (counted by a closure: not a per-iteration loop binding)
  let steps = 0;
  for (;;) {
    // what the loop has seen, taken before it looks: news arriving while it looks (a step ending while the
    // admissions below are awaited) wakes the wait at the bottom instead of being lost to it
    const seen = pump.mark();
    pump.throwIfStepFailed();
    if (!pump.stepRunning) {
      const stop = run.stopReached();
      const done = run.allIterationsDone();
      const again = (steps > 0 || workflowInfo().continueAsNewSuggested) && run.continueAsNewDue(steps);
      if (stop || done || again) {
        // the syncs and metrics lines behind the last steps first
        await pump.settle();
        pump.throwIfStepFailed();
        return stop || done ? run.finish(stop) : run.continueAsNew();
      }
      if (!run.state.paused && pump.startStepIfReady(() => steps++)) continue;
    }
    if (!run.state.paused) await pump.admitGroups();
    const phase = run.state.paused ? 'paused' : pump.stepRunning ? 'learning' : 'pumping';
    if (run.currentPhase !== phase) run.setPhase(phase);
    await pump.waitForNews(seen);
  }
}

class RolloutPump {
  stepRunning = false;
  private stepError: unknown = null;
  /** bumped by every report, step end, and handled message: what waitForNews waits on */
  private events = 0;
  /** task ids of the batches being admitted (sampleBatch is idempotent: after continue-as-new it is asked again) */
  private readonly taskIds = new Map<number, Promise<string[]>>();
  private lastStepEnd = Date.now();
  /** the syncs and metrics lines of finished steps, one after the other (a failure fails the run like a failed step) */
  private behind: Promise<void> = Promise.resolve();

  constructor(private readonly run: PumpHost) {
    setHandler(groupDoneSignal, ({ g }) => {
      const s = this.run.state;
      if (s.pump && complete(s.pump, this.params, g)) this.events++;
    });
  }

  private get params(): PumpParams {
    return pumpParams(this.run.config);
  }

  private get pump(): PumpState & { policyUrl: string } {
    return this.run.state.pump!;
  }

  /**
   * A run continued as new carries its pump; a new run (a fresh start, or one recovering a terminated run with the same
   * run id) reads the store: its newest checkpoint, the groups stored since. Either way the policy server serves the newest.
   */
  async recoverOrContinue(): Promise<void> {
    const { runId, config, state } = this.run;
    if (state.pump) return;
    const { store, learner } = activitiesFor(config);
    const p = this.params;
    const r = await store.recoverPump({ storeUrl: config.store.url, runId, groupsPerBatch: p.groupsPerBatch, batches: p.batches, maxStaleness: p.maxStaleness });
    if (r.checkpoint > state.checkpoint) {
      state.iteration = r.checkpoint;
      state.checkpoint = r.checkpoint;
    }
    const sync = await learner.syncPolicy(syncPolicyInput({ runId, checkpoint: state.checkpoint, config }));
    state.pump = { ...recoveredPump(p, state.iteration, r.stored), policyUrl: sync.policyUrl };
    // a step whose line the ended run did not write: its stored stats (the step is idempotent) and groups give it
    for (const k of r.missingMetrics) await this.recordStep(k, null);
  }

  /** Starts every group admissible now (in index order; up to a stop request's batch). */
  async admitGroups(): Promise<void> {
    const { state } = this.run;
    const p = this.params;
    const until = state.stopAt === null ? totalGroups(p) : Math.min(totalGroups(p), state.stopAt * p.groupsPerBatch);
    // started together: their start commands go out in one workflow task, not one round trip each
    await Promise.all(admit(this.pump, p, state.checkpoint, until).map((g) => this.startGroup(g)));
  }

  private async startGroup(g: number): Promise<void> {
    const { runId, config, state } = this.run;
    const p = this.params;
    const order = config.async?.mode === 'pump' ? config.async.order : 'admission';
    const n = batchOf(g, p);
    const j = g - n * p.groupsPerBatch;
    const taskIds = await this.tasksOf(n);
    const input: RolloutGroupInput = {
      runId,
      runWorkflowId: workflowInfo().workflowId,
      g,
      n,
      j,
      taskId: taskIds[j]!,
      checkpoint: startVersion(g, p, order, state.checkpoint),
      ...(order === 'streaming' ? { streaming: { newest: n } } : {}),
      policyUrl: this.pump.policyUrl,
      config,
    };
    try {
      await startChild(rolloutGroup, {
        workflowId: rolloutGroupWorkflowId(runId, g),
        taskQueue: TASK_QUEUES.learner,
        args: [input],
        parentClosePolicy: ABANDON,
        staticSummary: `group ${g} of ${runId}: task ${j} of batch ${n}, from checkpoint ${input.checkpoint}`,
      });
    } catch (err) {
      // started by the run before a crash and still running: it reports to this run's workflow id when done
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      log.info('group already running', { g });
    }
  }

  private tasksOf(n: number): Promise<string[]> {
    let ids = this.taskIds.get(n);
    if (!ids) {
      const { runId, config } = this.run;
      ids = activitiesFor(config)
        .store.sampleBatch({ runId, n, config })
        .then((r) => r.taskIds);
      this.taskIds.set(n, ids);
      for (const k of this.taskIds.keys()) if (k < this.run.state.iteration) this.taskIds.delete(k);
    }
    return ids;
  }

  /** Starts the learner step of the next batch when all its groups are complete; whether it did. */
  startStepIfReady(onDone: () => void): boolean {
    const { state } = this.run;
    if (this.stepRunning || !batchReady(this.pump, this.params)) return false;
    // the pump's next batch is the run's next step: both start at the recovered checkpoint and move together
    const k = state.iteration;
    takeBatch(this.pump, this.params);
    this.stepRunning = true;
    this.run.setRunning(true);
    this.learnerStep(k)
      .then(onDone, (err) => {
        this.stepError = err;
      })
      .finally(() => {
        this.stepRunning = false;
        this.run.setRunning(false);
        this.events++;
      });
    return true;
  }

  throwIfStepFailed(): void {
    if (this.stepError !== null) throw this.stepError;
  }

  /**
   * Step k on batch k's groups. Once checkpoint k+1 exists the next step may start and groups be admitted on it; the
   * sync of k+1 (a rollout pinned to it before the sync loads it itself) and the metrics line go on behind, in order.
   */
  private async learnerStep(k: number): Promise<void> {
    const waited = (Date.now() - this.lastStepEnd) / 1000;
    const { step, metrics } = await this.recordStep(k, waited);
    this.lastStepEnd = Date.now();
    this.run.afterStep(k, step.checkpoint, metrics);
  }

  /**
   * Step k on batch k's groups and its metrics line (`waited`: how long the learner waited for the batch; null: a
   * step done before, its line written again). Once checkpoint k+1 exists the next step may start and groups be
   * admitted on it; the sync of k+1 (a rollout pinned to it before the sync loads it itself) and the metrics line go
   * on behind, in order.
   */
  private async recordStep(k: number, waited: number | null): Promise<{ step: LearnerStepResult; metrics: IterationMetrics }> {
    const { runId, config } = this.run;
    const { store, learner } = activitiesFor(config);
    const storeUrl = config.store.url;
    const started = Date.now();
    const batch = await store.collectBatch({ storeUrl, runId, n: k, groupsPerBatch: config.batch.tasks, maxFailures: MAX_REPORTED_FAILURES });
    const t = Date.now();
    const step = await learner.learnerStep({ storeUrl, runId, n: k, checkpoint: k, items: [], itemParts: batch.itemParts });
    const learnerSeconds = waited === null ? step.seconds : (Date.now() - t) / 1000;
    const metrics: IterationMetrics = {
      ...iterationMetrics(
        { runId, n: k, checkpoint: k, config },
        { step: { items: [], itemParts: batch.itemParts }, summary: batch.summary, failures: batch.failures },
        step,
        { n: k, phase: 'learning', rolloutsDone: batch.summary.episodes, rolloutsTotal: config.batch.tasks * config.batch.samples, rolloutErrors: batch.rolloutErrors },
        // rolloutSeconds: how long the learner waited for this batch after its previous step
        { rolloutSeconds: waited ?? 0, learnerSeconds, iterationSeconds: waited === null ? learnerSeconds : waited + (Date.now() - started) / 1000 },
        {},
        undefined,
      ),
      sampledFrom: batch.sampledFrom,
    };
    this.behind = this.behind
      .then(async () => {
        if (waited !== null) {
          const sync = await learner.syncPolicy(syncPolicyInput({ runId, checkpoint: step.checkpoint, config }));
          this.pump.policyUrl = sync.policyUrl;
        }
        await store.recordMetrics({ storeUrl, runId, metrics });
      })
      .catch((err: unknown) => {
        // fails the run at the loop's next look, as a failed step does
        this.stepError ??= err;
        this.events++;
      });
    return { step, metrics };
  }

  /** What goes on behind the steps (syncs, metrics lines) is done; before the run continues as new or ends. */
  async settle(): Promise<void> {
    await this.behind;
  }

  /** What the loop has seen so far (waitForNews waits for something else). */
  mark(): NewsMark {
    const { state } = this.run;
    return { events: this.events, paused: state.paused, stopAt: state.stopAt, suggested: workflowInfo().continueAsNewSuggested };
  }

  /**
   * Until something changed since `seen`: a group reported, the step ended, or the run was paused, resumed, stopped
   * or asked to continue as new.
   */
  async waitForNews(seen: NewsMark): Promise<void> {
    const { state } = this.run;
    // a suggestion already standing is news only once the step ends (the loop continues as new between steps)
    await condition(
      () => this.events !== seen.events || state.paused !== seen.paused || state.stopAt !== seen.stopAt || (!seen.suggested && workflowInfo().continueAsNewSuggested),
    );
  }
}

/**
 * Group g of an async pump run: its G rollouts (streaming ones may move to newer checkpoints between turns), the
 * group's advantages, its result stored, then a report to the run. A run that is gone (terminated, to be
 * recovered) cannot take the report: the stored result is what counts.
 */
export async function rolloutGroup(input: RolloutGroupInput): Promise<RolloutGroupResult> {
  const { runId, g, n, j, taskId, checkpoint, config } = input;
  let errors = 0;
  const r = await rollOutTasks(
    { runId, n, checkpoint, config },
    [taskId],
    config.batch.samples,
    input.policyUrl,
    (ok) => {
      if (!ok) errors++;
    },
    input.streaming ? { streaming: input.streaming } : {},
  );
  const { store } = activitiesFor(config);
  const { key } = await store.storeGroupResult({
    storeUrl: config.store.url,
    runId,
    n,
    j,
    result: { g, items: r.items, summary: r.summary, failures: r.failures.slice(0, MAX_REPORTED_FAILURES), rolloutErrors: errors, checkpoint },
  });
  try {
    await getExternalWorkflowHandle(input.runWorkflowId).signal(groupDoneSignal, { g });
  } catch (err) {
    log.warn('the run did not take the report; its result is stored', { g, error: String(err) });
  }
  return { g, key };
}
