// After each iteration: the run's curves redrawn into its store directory, and its experiment-tracker
// run brought up to date from metrics.jsonl (the store is the source of truth; what was delivered is
// remembered in runs/<id>/tracking/mlflow.json). A tracking server that is down or failing never fails
// the activity: what is undelivered is reported as pending and sent on a later call.
import { ApplicationFailure, heartbeat } from '@temporalio/activity';
import { parseMetricsJsonl, renderChart, rewardChart } from '../lib/plot.ts';
import { keys, openStore, type ArtifactStore } from '../lib/store.ts';
import type { TrainingConfig } from '../lib/config.ts';
import type { ReportRunInput, ReportRunResult } from '../workflows/shapes.ts';
import {
  LOG_BATCH_LIMITS,
  MLFLOW_RUN_ID_TAG,
  MlflowClient,
  MlflowError,
  configParams,
  mlflowKey,
  numericLeaves,
  type MlflowMetric,
} from './mlflow.ts';

/** Heartbeats when called from an activity (so a killed worker's report is retried in seconds); a no-op elsewhere (swerl report). */
function beat(what: string): void {
  try {
    heartbeat(what);
  } catch {
    // not inside an activity
  }
}

/** One line of runs/<id>/metrics.jsonl (IterationMetrics plus `runId` and `time`). */
export type MetricsLine = Record<string, unknown> & { iteration: number; time?: number };

/** The run's metrics lines, one per iteration (the first written wins), in iteration order. */
export async function readMetricsLines(store: ArtifactStore, runId: string): Promise<MetricsLine[]> {
  const text = (await store.get(keys.metrics(runId)))?.toString('utf8') ?? '';
  const byIter = new Map<number, MetricsLine>();
  for (const l of text.split('\n')) {
    if (!l.trim()) continue;
    const m = JSON.parse(l) as MetricsLine;
    if (typeof m.iteration === 'number' && !byIter.has(m.iteration)) byIter.set(m.iteration, m);
  }
  return [...byIter.values()].sort((a, b) => a.iteration - b.iteration);
}

export const PLOT_FILES = ['reward.svg', 'reward.png', 'reward.vl.json'] as const;

/** Draws the reward (and evaluation) curves of the run into runs/<id>/plots/. Returns their keys. */
export async function renderRunPlots(store: ArtifactStore, runId: string, lines: MetricsLine[]): Promise<string[]> {
  const points = parseMetricsJsonl(lines.map((l) => JSON.stringify(l)).join('\n'));
  const chart = await renderChart(rewardChart(points, `Reward per iteration (${runId})`));
  const out: Record<(typeof PLOT_FILES)[number], string | Buffer> = {
    'reward.svg': chart.svg,
    'reward.png': chart.png,
    'reward.vl.json': JSON.stringify(chart.spec),
  };
  const written: string[] = [];
  for (const f of PLOT_FILES) {
    await store.put(keys.plot(runId, f), out[f]);
    written.push(keys.plot(runId, f));
  }
  return written;
}

/** What has been delivered to MLflow for one run. */
export interface MlflowState {
  uri: string;
  experiment: string;
  experimentId?: string;
  mlflowRunId?: string;
  artifactUri?: string;
  paramsLogged?: boolean;
  /** metrics lines (in iteration order) delivered */
  sentLines: number;
  /** metrics lines there were when the artifacts were last uploaded */
  artifactsOf?: number;
  /** the status the MLflow run was closed with */
  closed?: string;
  /** the newest request MLflow refused (skipped, never retried) */
  lastError?: string;
  /** why the last delivery stopped short (server down or failing); cleared once one goes through */
  unreachable?: string;
}

type MlflowConfig = NonNullable<TrainingConfig['tracking']['mlflow']>;

/** The config the run started with: the snapshot of its earliest iteration in the store. */
async function firstIterationConfig(store: ArtifactStore, runId: string): Promise<unknown> {
  const iters = (await store.children(keys.run(runId)))
    .map((n) => /^iter-(\d+)$/.exec(n)?.[1])
    .filter((n): n is string => n !== undefined)
    .map(Number)
    .sort((a, b) => a - b);
  for (const n of iters) {
    const c = await store.getJson<unknown>(keys.iterationConfig(runId, n));
    if (c !== null) return c;
  }
  return null;
}

/** MLflow metrics of one iteration: every numeric field (nested ones as `a/b`) at step = iteration, at the line's own time. */
export function iterationMetrics(line: MetricsLine): MlflowMetric[] {
  const { iteration, time, runId: _runId, ...rest } = line;
  return Object.entries(numericLeaves(rest)).map(([k, value]) => ({ key: mlflowKey(k), value, timestamp: Math.round(time ?? 0), step: iteration }));
}

function chunks<T>(xs: T[], n: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += n) out.push(xs.slice(i, i + n));
  return out;
}

/**
 * Brings the run's MLflow run up to date: finds or creates it (tag swerl.run_id = our run id), logs the
 * config as params once, the undelivered metrics lines, the plots and metrics.jsonl as artifacts, and
 * closes it when `final`. Idempotent: a resent metric (same key, step, time, value) is stored once by MLflow.
 */
export async function syncMlflow(
  store: ArtifactStore,
  runId: string,
  cfg: MlflowConfig,
  lines: MetricsLine[],
  final?: ReportRunInput['final'],
  client = new MlflowClient(cfg.uri),
): Promise<NonNullable<ReportRunResult['tracking']>> {
  const key = keys.mlflowState(runId);
  let st = await store.getJson<MlflowState>(key);
  if (!st || st.uri !== cfg.uri || st.experiment !== cfg.experiment) st = { uri: cfg.uri, experiment: cfg.experiment, sentLines: 0 };
  const state = st;
  const save = () => store.putJson(key, state);
  const sentBefore = state.sentLines;
  const pending = () =>
    Math.max(0, lines.length - state.sentLines) +
    (state.paramsLogged ? 0 : 1) +
    ((state.artifactsOf ?? -1) < lines.length && lines.length > 0 ? 1 : 0) +
    (final && state.closed !== final.status ? 1 : 0);
  const deliver = async (): Promise<string> => {
    beat('mlflow: run');
    if (!state.mlflowRunId) {
      state.experimentId = await client.experimentId(cfg.experiment);
      let runs = await client.findRuns(state.experimentId, runId);
      if (!runs.length) {
        const first = lines[0];
        const start = first?.time ? Math.round(first.time - 1000 * Number(first.iterationSeconds ?? 0)) : Date.now();
        const created = await client.createRun(state.experimentId, runId, start, [
          { key: MLFLOW_RUN_ID_TAG, value: runId },
          { key: 'mlflow.source.name', value: 'swerl trainingRun' },
          { key: 'mlflow.source.type', value: 'JOB' },
        ]);
        // a concurrent attempt may have created one too: keep the oldest, delete ours if it is not
        runs = await client.findRuns(state.experimentId, runId);
        if (runs.length && runs[0].run_id !== created.run_id && runs.some((r) => r.run_id === created.run_id)) await client.deleteRun(created.run_id);
        if (!runs.length) runs = [created];
      }
      state.mlflowRunId = runs[0].run_id;
      state.artifactUri = runs[0].artifact_uri;
      await save();
    }
    const mlflowRunId = state.mlflowRunId;
    if (!state.paramsLogged) {
      const config = await firstIterationConfig(store, runId);
      if (config !== null) {
        const params = configParams(config);
        try {
          for (const batch of chunks(params, LOG_BATCH_LIMITS.params)) await client.logBatch(mlflowRunId, { params: batch });
        } catch (e) {
          // params are write-once in MLflow: a value logged before (another config) stays; not worth retrying
          if (!(e instanceof MlflowError) || e.transient || e.code === 'RESOURCE_DOES_NOT_EXIST') throw e;
          state.lastError = e.message;
        }
        state.paramsLogged = true;
        await save();
      }
    }
    while (state.sentLines < lines.length) {
      // whole lines per request, within MLflow's limit of metrics per request
      const batch: MlflowMetric[] = [];
      let upTo = state.sentLines;
      while (upTo < lines.length) {
        const ms = iterationMetrics(lines[upTo]);
        if (batch.length && batch.length + ms.length > LOG_BATCH_LIMITS.metrics) break;
        batch.push(...ms.slice(0, LOG_BATCH_LIMITS.metrics));
        upTo++;
      }
      beat(`mlflow: metrics of line ${upTo}`);
      try {
        await client.logBatch(mlflowRunId, { metrics: batch });
      } catch (e) {
        // a request MLflow refuses (not one it could not take now) would be refused forever: skip it
        if (!(e instanceof MlflowError) || e.transient || e.code === 'RESOURCE_DOES_NOT_EXIST') throw e;
        state.lastError = e.message;
      }
      state.sentLines = upTo;
      await save();
    }
    if (lines.length && ((state.artifactsOf ?? -1) < lines.length || final)) {
      beat('mlflow: artifacts');
      try {
        await uploadArtifacts(store, runId, client, state.artifactUri!);
      } catch (e) {
        if (!(e instanceof MlflowError) || e.transient || e.code === 'RESOURCE_DOES_NOT_EXIST') throw e;
        state.lastError = e.message;
      }
      state.artifactsOf = lines.length;
      await save();
    }
    if (final && state.closed !== final.status) {
      const last = lines.at(-1)?.time;
      await client.updateRun(mlflowRunId, final.status, Math.round(last ?? Date.now()));
      state.closed = final.status;
      await save();
    }
    return mlflowRunId;
  };
  try {
    let mlflowRunId: string;
    try {
      mlflowRunId = await deliver();
    } catch (e) {
      // the MLflow run is gone (deleted, or a new server): start over with a new one
      if (!(e instanceof MlflowError) || e.code !== 'RESOURCE_DOES_NOT_EXIST' || !state.mlflowRunId) throw e;
      Object.assign(state, { mlflowRunId: undefined, artifactUri: undefined, paramsLogged: false, sentLines: 0, artifactsOf: undefined, closed: undefined });
      mlflowRunId = await deliver();
    }
    if (state.unreachable) {
      state.unreachable = undefined;
      await save();
    }
    return { mlflowRunId, sent: Math.max(0, state.sentLines - sentBefore), pending: pending() };
  } catch (e) {
    // unreachable or failing server: keep what was delivered, report the rest as pending
    if (!(e instanceof MlflowError)) throw e;
    state.unreachable = e.message;
    await save().catch(() => undefined);
    return { mlflowRunId: state.mlflowRunId ?? null, sent: Math.max(0, state.sentLines - sentBefore), pending: pending(), error: e.message };
  }
}

const CONTENT_TYPES: Record<string, string> = { svg: 'image/svg+xml', png: 'image/png', json: 'application/json', jsonl: 'application/x-ndjson' };

async function uploadArtifacts(store: ArtifactStore, runId: string, client: MlflowClient, artifactUri: string): Promise<void> {
  const files: [string, string][] = [
    ...PLOT_FILES.map((f): [string, string] => [keys.plot(runId, f), `plots/${f}`]),
    [keys.metrics(runId), 'metrics.jsonl'],
  ];
  for (const [k, path] of files) {
    const data = await store.get(k);
    if (data === null) continue;
    await client.uploadArtifact(artifactUri, path, data, CONTENT_TYPES[path.split('.').at(-1)!] ?? 'application/octet-stream');
  }
}

/** The reportRun activity: plots, then the tracker. */
export async function reportRun(input: ReportRunInput): Promise<ReportRunResult> {
  const store = openStore(input.storeUrl);
  const lines = await readMetricsLines(store, input.runId);
  beat('plots');
  const plots = lines.length ? await renderRunPlots(store, input.runId, lines) : [];
  let tracking: ReportRunResult['tracking'] = null;
  const cfg = input.tracking.mlflow;
  if (cfg) {
    tracking = await syncMlflow(store, input.runId, cfg, lines, input.final);
    if (input.requireDelivered && tracking.pending > 0) {
      throw ApplicationFailure.create({
        type: 'TrackingUndelivered',
        message: `MLflow ${cfg.uri}: ${tracking.pending} item(s) of run ${input.runId} not delivered yet (${tracking.error ?? 'no error'})`,
      });
    }
  }
  return { iterations: lines.length, plots, tracking };
}
