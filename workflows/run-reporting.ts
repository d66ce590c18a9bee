// What a training run shows while it goes on: its current details in the Temporal UI (short markdown),
// and after each iteration its plots redrawn in the store and its experiment tracker brought up to date
// by the reportRun activity, off the iteration's path: one report at a time, awaited only before the
// next one, a continue-as-new or the end. A tracker that is still down at the end is caught up by the
// abandoned child trackingCatchUp, so the run itself never waits for it.
import { ParentClosePolicy, log, proxyActivities, startChild } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { createActivities } from '../activities/index.ts';
import type { TrackingConfig, TrainingConfig } from '../lib/config.ts';
import type { IterationMetrics, IterationPhase, ReportRunInput, ReportRunResult, TrainingRunState } from '../lib/training/shapes.ts';
import { TASK_QUEUES } from '../lib/training/shapes.ts';
import { RetryPolicies } from '../lib/failures.ts';

type Activities = ReturnType<typeof createActivities>;

export function trackingCatchUpWorkflowId(runId: string): string {
  return `${runId}-tracking`;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

/** Evaluation scores carried in an iteration's metrics (when an evaluation ran), as `name value` pairs. */
function evalScores(m: IterationMetrics | null): [string, number][] {
  const ev = (m as (IterationMetrics & { eval?: unknown }) | null)?.eval;
  const out: [string, number][] = [];
  const walk = (v: unknown, name: string) => {
    if (typeof v === 'number' && Number.isFinite(v)) out.push([name, v]);
    else if (v && typeof v === 'object' && !Array.isArray(v)) for (const [k, x] of Object.entries(v)) walk(x, name ? `${name}.${k}` : k);
  };
  walk(ev, '');
  return out;
}

/** The run's current details for the Temporal UI (markdown, a few short lines). */
export function runDetails(o: { runId: string; state: TrainingRunState; config: TrainingConfig; phase: IterationPhase; running: boolean }): string {
  const { state, config, phase } = o;
  const m = state.lastMetrics;
  const now = o.running ? ` · iteration ${state.iteration} \`${phase}\`` : ` · \`${phase}\``;
  const pausing = state.paused && phase !== 'paused' ? ' · pausing after this iteration' : '';
  const lines = [`**${o.runId}** · **${state.iteration}** of ${config.iterations} iterations done${now}${pausing}`];
  if (m) {
    const filtered = Object.values(m.filtered).reduce((a, b) => a + (b ?? 0), 0);
    lines.push(
      `iteration ${m.iteration}: reward **${m.meanReward.toFixed(3)}** · success **${pct(m.successRate)}** · filtered ${pct(filtered)} · ` +
        `${m.iterationSeconds.toFixed(1)} s (rollouts ${m.rolloutSeconds.toFixed(1)} s, learner ${m.learnerSeconds.toFixed(1)} s)`,
    );
    const mm = m.mismatch;
    if (mm) {
      // sampler–learner mismatch (DESIGN §9): ~1e-7 on our own server, larger on another engine or dtype
      lines.push(
        `mismatch |Δ log p| mean ${mm.meanAbsDelta.toExponential(2)} · max ${mm.maxAbsDelta.toExponential(2)} · KL k3 ${mm.k3.toExponential(2)}` +
          (mm.corrected !== undefined ? ` · corrected ${pct(mm.corrected)} of tokens` : '') +
          (m.sync
            ? ` · sync ${m.sync.seconds.toFixed(2)} s, probe ${m.sync.probeStatistic === 'mean' ? `mean ${m.sync.probeMeanAbsDelta?.toExponential(1)}` : m.sync.probeMaxAbsDelta.toExponential(1)}`
            : ''),
      );
    }
    const i = m.integrity;
    if (i) {
      const kinds = Object.entries(i.counts).filter(([k]) => !k.includes('/'));
      lines.push(`integrity: hack rate **${pct(i.hackRate)}** (${i.hacks} of ${i.episodes} graded)${kinds.length ? ` · ${kinds.map(([k, v]) => `${k} ${v}`).join(' · ')}` : ''}`);
    }
  } else lines.push('no iteration finished yet');
  if (state.pausedFor) lines.push(`**paused by the run**: ${state.pausedFor}`);
  const ev = state.lastEval;
  if (ev) lines.push(`last eval (iteration ${ev.iteration}): ${ev.scores.map(([k, v]) => `${k} **${v.toFixed(3)}**`).join(' · ')}`);
  lines.push(`checkpoint ${state.checkpoint}`);
  return lines.join('\n\n');
}

/** Remembers the newest evaluation scores in the run's small state. */
export function noteEvaluation(state: TrainingRunState, m: IterationMetrics): void {
  const scores = evalScores(m).slice(0, 4);
  if (scores.length) state.lastEval = { iteration: m.iteration, scores };
}

export interface RunReporter {
  /** starts the report of iteration n (does not wait for it) */
  afterIteration(n: number): void;
  /** the report in flight, if any, has finished */
  settle(): Promise<void>;
  /** the final report (closes the tracker's run); hands what is undelivered to trackingCatchUp */
  finish(status: NonNullable<ReportRunInput['final']>['status']): Promise<void>;
}

export function runReporter(runId: string, config: () => TrainingConfig): RunReporter {
  const acts = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '5 minutes',
    // it heartbeats between steps: a report lost with its worker is retried within seconds
    heartbeatTimeout: '30 seconds',
    retry: RetryPolicies.report,
  });
  let last: Promise<ReportRunResult | null> = Promise.resolve(null);
  const report = (summary: string, extra: Partial<ReportRunInput> = {}): Promise<ReportRunResult | null> => {
    const c = config();
    const input: ReportRunInput = { storeUrl: c.store.url, runId, tracking: c.tracking, ...extra };
    last = last
      .then(() => acts.reportRun.executeWithOptions({ summary }, [input]))
      .catch((err) => {
        // plots and tracking are never worth failing a training run for
        log.warn('reportRun failed', { runId, error: String(err) });
        return null;
      });
    return last;
  };
  return {
    afterIteration(n) {
      void report(`plots + tracking after iteration ${n}`);
    },
    async settle() {
      await last;
    },
    async finish(status) {
      const r = await report(`final report (${status})`, { final: { status } });
      const c = config();
      if (!c.tracking.mlflow || (r && (r.tracking?.pending ?? 0) === 0)) return;
      try {
        await startChild(trackingCatchUp, {
          workflowId: trackingCatchUpWorkflowId(runId),
          taskQueue: TASK_QUEUES.learner,
          parentClosePolicy: ParentClosePolicy.ABANDON,
          args: [{ storeUrl: c.store.url, runId, tracking: c.tracking, final: { status } }],
          staticSummary: `delivers run ${runId}'s remaining metrics to MLflow once it is reachable`,
        });
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
    },
  };
}

/** An evaluation to track as its own MLflow run (evaluationRun with config.tracking). */
export interface TrackEvaluationInput {
  storeUrl: string;
  evalId: string;
  tracking: TrackingConfig;
}

/**
 * The evaluation's MLflow run, created, filled and closed after its report is written; what the tracker
 * could not take now goes to an abandoned trackingCatchUp child, so the evaluation ends at once.
 */
export async function trackEvaluation(input: TrackEvaluationInput): Promise<void> {
  const acts = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '5 minutes',
    heartbeatTimeout: '30 seconds',
    retry: RetryPolicies.report,
  });
  let pending = 1;
  try {
    pending = (await acts.reportEvaluation.executeWithOptions({ summary: `MLflow run of evaluation ${input.evalId}` }, [input]))?.pending ?? 0;
  } catch (err) {
    log.warn('reportEvaluation failed', { evalId: input.evalId, error: String(err) });
  }
  if (pending === 0) return;
  try {
    await startChild(trackingCatchUp, {
      workflowId: trackingCatchUpWorkflowId(input.evalId),
      taskQueue: TASK_QUEUES.learner,
      parentClosePolicy: ParentClosePolicy.ABANDON,
      args: [input],
      staticSummary: `delivers evaluation ${input.evalId} to MLflow once it is reachable`,
    });
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
}

/** Retries a run's (or an evaluation's) report until the tracker has everything (backing off to every minute, for up to a week). */
export async function trackingCatchUp(input: ReportRunInput | TrackEvaluationInput): Promise<ReportRunResult | ReportRunResult['tracking']> {
  const acts = proxyActivities<Activities>({
    taskQueue: TASK_QUEUES.rollout,
    startToCloseTimeout: '5 minutes',
    heartbeatTimeout: '30 seconds',
    scheduleToCloseTimeout: '7 days',
    retry: RetryPolicies.untilDelivered,
  });
  if ('evalId' in input) return acts.reportEvaluation.executeWithOptions({ summary: `deliver evaluation ${input.evalId} to MLflow` }, [{ ...input, requireDelivered: true }]);
  return acts.reportRun.executeWithOptions({ summary: `deliver run ${input.runId} to MLflow` }, [{ ...input, requireDelivered: true }]);
}
