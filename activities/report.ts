// After each iteration: the run's curves redrawn into its store directory, and its experiment-tracker
// run brought up to date from metrics.jsonl (the store is the source of truth; what was delivered is
// remembered in runs/<id>/tracking/mlflow.json). A tracking server that is down or failing never fails
// the activity: what is undelivered is reported as pending and sent on a later call.
import { heartbeat } from '@temporalio/activity';
import { parseMetricsJsonl, renderChart, rewardChart } from '../lib/plot.ts';
import { keys, openStore, type ArtifactStore } from '../lib/store.ts';
import { evalKeys } from '../lib/eval/keys.ts';
import type { TrainingConfig } from '../lib/config.ts';
import type { ReportRunInput, ReportRunResult } from '../lib/training/shapes.ts';
import { LOG_BATCH_LIMITS, MLFLOW_EVAL_ID_TAG, MLFLOW_RUN_ID_TAG, MlflowClient, MlflowError, configParams, mlflowKey, numericLeaves, type MlflowMetric } from './mlflow.ts';
import { FailureType, retryable } from '../lib/failures.ts';

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
  /** timestamp of metrics whose lines carry no time of their own (fixed, so a resend is identical) */
  fixedTime?: number;
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

/** MLflow metrics of one line: every numeric field (nested ones as `a/b`) at step = iteration, at the line's own time (else `fixedTime`). */
export function iterationMetrics(line: MetricsLine, fixedTime = 0): MlflowMetric[] {
  const { iteration, time, runId: _runId, ...rest } = line;
  return Object.entries(numericLeaves(rest)).map(([k, value]) => ({ key: mlflowKey(k), value, timestamp: Math.round(time ?? fixedTime), step: iteration }));
}

/** What is tracked as one MLflow run: a training run, or an evaluation. */
export interface TrackedSubject {
  /** store key of the delivery state */
  stateKey: string;
  /** the MLflow run's name, and the value of `tag` that finds it again */
  name: string;
  tag: string;
  source: string;
  /** metrics lines, step = `iteration`, delivered in order */
  lines: MetricsLine[];
  /** the config logged as params (null: not there yet) */
  params: () => Promise<unknown>;
  /** store key → artifact path; `since`: metrics lines whose artifacts were uploaded already */
  artifacts: (since: number) => Promise<[string, string][]>;
}

/** The top-level report files of validation evaluations named in `lines` (evals/<evalId>/ in the run's artifacts). */
async function validationReports(store: ArtifactStore, lines: MetricsLine[]): Promise<[string, string][]> {
  const out: [string, string][] = [];
  for (const l of lines) {
    const evalId = (l.eval as { evalId?: unknown } | undefined)?.evalId;
    if (typeof evalId !== 'string') continue;
    const prefix = evalKeys.report(evalId);
    for (const k of (await store.list(prefix)).filter((k) => !k.slice(prefix.length + 1).includes('/')).slice(0, 50)) {
      out.push([k, `evals/${evalId}/${k.slice(prefix.length + 1)}`]);
    }
  }
  return out;
}

/** A training run: its metrics.jsonl lines as steps, its first iteration's config as params, its plots, metrics.jsonl and validation reports as artifacts. */
export function trainingRunSubject(store: ArtifactStore, runId: string, lines: MetricsLine[]): TrackedSubject {
  return {
    stateKey: keys.mlflowState(runId),
    name: runId,
    tag: MLFLOW_RUN_ID_TAG,
    source: 'swerl trainingRun',
    lines,
    params: () => firstIterationConfig(store, runId),
    artifacts: async (since) => [
      ...PLOT_FILES.map((f): [string, string] => [keys.plot(runId, f), `plots/${f}`]),
      [keys.metrics(runId), 'metrics.jsonl'],
      ...(await validationReports(store, lines.slice(since))),
    ],
  };
}

function chunks<T>(xs: T[], n: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += n) out.push(xs.slice(i, i + n));
  return out;
}

/** What one delivery to MLflow works on: the subject, where it goes, and its saved progress. */
interface Delivery {
  store: ArtifactStore;
  subject: TrackedSubject;
  cfg: MlflowConfig;
  client: MlflowClient;
  state: MlflowState;
  save: () => Promise<void>;
  final?: ReportRunInput['final'];
}

/** A request MLflow refused (not one it could not take now) would be refused forever: noted, and skipped. */
function skipIfRefused(e: unknown, state: MlflowState): void {
  if (!(e instanceof MlflowError) || e.transient || e.code === 'RESOURCE_DOES_NOT_EXIST') throw e;
  state.lastError = e.message;
}

/** The subject's MLflow run: found by its tag, or created (a concurrent creation resolved to the oldest). */
async function ensureMlflowRun(d: Delivery): Promise<string> {
  const { client, subject, state } = d;
  if (state.mlflowRunId) return state.mlflowRunId;
  state.experimentId = await client.experimentId(d.cfg.experiment);
  let runs = await client.findRuns(state.experimentId, subject.name, subject.tag);
  if (!runs.length) {
    const first = subject.lines[0];
    const start = first?.time ? Math.round(first.time - 1000 * Number(first.iterationSeconds ?? 0)) : (state.fixedTime ?? Date.now());
    const created = await client.createRun(state.experimentId, subject.name, start, [
      { key: subject.tag, value: subject.name },
      { key: 'mlflow.source.name', value: subject.source },
      { key: 'mlflow.source.type', value: 'JOB' },
    ]);
    // a concurrent attempt may have created one too: keep the oldest, delete ours if it is not
    runs = await client.findRuns(state.experimentId, subject.name, subject.tag);
    if (runs.length && runs[0].run_id !== created.run_id && runs.some((r) => r.run_id === created.run_id)) await client.deleteRun(created.run_id);
    if (!runs.length) runs = [created];
  }
  state.mlflowRunId = runs[0].run_id;
  state.artifactUri = runs[0].artifact_uri;
  await d.save();
  return state.mlflowRunId;
}

/** The config as params, once (params are write-once in MLflow: a value logged before stays). */
async function logParamsOnce(d: Delivery, mlflowRunId: string): Promise<void> {
  if (d.state.paramsLogged) return;
  const config = await d.subject.params();
  if (config === null) return;
  try {
    for (const batch of chunks(configParams(config), LOG_BATCH_LIMITS.params)) await d.client.logBatch(mlflowRunId, { params: batch });
  } catch (e) {
    skipIfRefused(e, d.state);
  }
  d.state.paramsLogged = true;
  await d.save();
}

/** The metrics lines not delivered yet: whole lines per request, within MLflow's limit of metrics per request. */
async function logPendingMetrics(d: Delivery, mlflowRunId: string): Promise<void> {
  const { lines } = d.subject;
  const state = d.state;
  while (state.sentLines < lines.length) {
    const batch: MlflowMetric[] = [];
    let upTo = state.sentLines;
    while (upTo < lines.length) {
      const ms = iterationMetrics(lines[upTo], state.fixedTime);
      if (batch.length && batch.length + ms.length > LOG_BATCH_LIMITS.metrics) break;
      batch.push(...ms.slice(0, LOG_BATCH_LIMITS.metrics));
      upTo++;
    }
    beat(`mlflow: metrics of line ${upTo}`);
    try {
      await d.client.logBatch(mlflowRunId, { metrics: batch });
    } catch (e) {
      skipIfRefused(e, state);
    }
    state.sentLines = upTo;
    await d.save();
  }
}

/** The plots and metrics.jsonl, when lines came since they were last uploaded (and always at the end). */
async function logArtifacts(d: Delivery): Promise<void> {
  const { lines } = d.subject;
  const state = d.state;
  if (!lines.length || ((state.artifactsOf ?? -1) >= lines.length && !d.final)) return;
  beat('mlflow: artifacts');
  try {
    await uploadArtifacts(d.store, await d.subject.artifacts(Math.max(0, state.artifactsOf ?? 0)), d.client, state.artifactUri!);
  } catch (e) {
    skipIfRefused(e, state);
  }
  state.artifactsOf = lines.length;
  await d.save();
}

/** Run, params, metrics, artifacts, then the run closed when final; each phase saves its progress. */
async function deliver(d: Delivery): Promise<string> {
  beat('mlflow: run');
  const mlflowRunId = await ensureMlflowRun(d);
  await logParamsOnce(d, mlflowRunId);
  await logPendingMetrics(d, mlflowRunId);
  await logArtifacts(d);
  if (d.final && d.state.closed !== d.final.status) {
    const last = d.subject.lines.at(-1)?.time;
    await d.client.updateRun(mlflowRunId, d.final.status, Math.round(last ?? Date.now()));
    d.state.closed = d.final.status;
    await d.save();
  }
  return mlflowRunId;
}

/**
 * Brings the run's MLflow run up to date: finds or creates it (tag swerl.run_id = our run id), logs the
 * config as params once, the undelivered metrics lines, the plots and metrics.jsonl as artifacts, and
 * closes it when `final`. Idempotent: a resent metric (same key, step, time, value) is stored once by MLflow.
 */
export async function syncMlflow(
  store: ArtifactStore,
  subject: TrackedSubject,
  cfg: MlflowConfig,
  final?: ReportRunInput['final'],
  client = new MlflowClient(cfg.uri),
): Promise<NonNullable<ReportRunResult['tracking']>> {
  const { lines } = subject;
  const key = subject.stateKey;
  let st = await store.getJson<MlflowState>(key);
  if (!st || st.uri !== cfg.uri || st.experiment !== cfg.experiment) st = { uri: cfg.uri, experiment: cfg.experiment, sentLines: 0, fixedTime: Date.now() };
  const state = st;
  const d: Delivery = { store, subject, cfg, client, state, save: () => store.putJson(key, state), final };
  const sentBefore = state.sentLines;
  const pending = () =>
    Math.max(0, lines.length - state.sentLines) +
    (state.paramsLogged ? 0 : 1) +
    ((state.artifactsOf ?? -1) < lines.length && lines.length > 0 ? 1 : 0) +
    (final && state.closed !== final.status ? 1 : 0);
  try {
    let mlflowRunId: string;
    try {
      mlflowRunId = await deliver(d);
    } catch (e) {
      // the MLflow run is gone (deleted, or a new server): start over with a new one
      if (!(e instanceof MlflowError) || e.code !== 'RESOURCE_DOES_NOT_EXIST' || !state.mlflowRunId) throw e;
      Object.assign(state, { mlflowRunId: undefined, artifactUri: undefined, paramsLogged: false, sentLines: 0, artifactsOf: undefined, closed: undefined });
      mlflowRunId = await deliver(d);
    }
    if (state.unreachable) {
      state.unreachable = undefined;
      await d.save();
    }
    return { mlflowRunId, sent: Math.max(0, state.sentLines - sentBefore), pending: pending() };
  } catch (e) {
    // unreachable or failing server: keep what was delivered, report the rest as pending
    if (!(e instanceof MlflowError)) throw e;
    state.unreachable = e.message;
    await d.save().catch(() => undefined);
    return { mlflowRunId: state.mlflowRunId ?? null, sent: Math.max(0, state.sentLines - sentBefore), pending: pending(), error: e.message };
  }
}

const CONTENT_TYPES: Record<string, string> = { svg: 'image/svg+xml', png: 'image/png', json: 'application/json', jsonl: 'application/x-ndjson' };

async function uploadArtifacts(store: ArtifactStore, files: [string, string][], client: MlflowClient, artifactUri: string): Promise<void> {
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
    tracking = await syncMlflow(store, trainingRunSubject(store, input.runId, lines), cfg, input.final);
    if (input.requireDelivered && tracking.pending > 0) {
      throw retryable(FailureType.TrackingUndelivered, `MLflow ${cfg.uri}: ${tracking.pending} item(s) of run ${input.runId} not delivered yet (${tracking.error ?? 'no error'})`);
    }
  }
  return { iterations: lines.length, plots, tracking };
}

/** The numbers of an evaluation summary as a metrics line: pass@k arrays become `passAtK/<k>`, per-repository rows are left out. */
export function evaluationLine(summary: { checkpoint?: number | null; metrics: Record<string, unknown> }): MetricsLine {
  const {
    perRepo: _perRepo,
    passAtK,
    passAtKCompleted,
    ...rest
  } = summary.metrics as Record<string, unknown> & { passAtK?: (number | null)[]; passAtKCompleted?: (number | null)[] };
  const byK = (xs: (number | null)[] | undefined) => Object.fromEntries((xs ?? []).flatMap((v, i) => (v === null ? [] : [[String(i + 1), v]])));
  return { iteration: summary.checkpoint ?? 0, ...rest, passAtK: byK(passAtK), passAtKCompleted: byK(passAtKCompleted) };
}

/** Report files uploaded with an evaluation (the top of its report directory; per-instance reports stay in the store). */
const EVAL_ARTIFACTS_MAX = 200;

/** An evaluation: its summary's numbers at step = the checkpoint evaluated, its config as params, its report files. */
export async function evaluationSubject(store: ArtifactStore, evalId: string): Promise<TrackedSubject | null> {
  const reportKey = evalKeys.report(evalId);
  const summary = await store.getJson<{ checkpoint?: number | null; metrics: Record<string, unknown> }>(`${reportKey}/summary.json`);
  if (!summary) return null;
  return {
    stateKey: evalKeys.mlflowState(evalId),
    name: evalId,
    tag: MLFLOW_EVAL_ID_TAG,
    source: 'swerl evaluationRun',
    lines: [evaluationLine(summary)],
    params: async () => store.getJson<unknown>(evalKeys.config(evalId)),
    artifacts: async () =>
      (await store.list(reportKey))
        .filter((k) => k.slice(reportKey.length + 1).split('/').length <= 2)
        .slice(0, EVAL_ARTIFACTS_MAX)
        .map((k): [string, string] => [k, `report/${k.slice(reportKey.length + 1)}`]),
  };
}

/** The reportEvaluation activity: the evaluation's MLflow run, created, filled and closed (idempotent). */
export async function reportEvaluation(input: {
  storeUrl: string;
  evalId: string;
  tracking: TrainingConfig['tracking'];
  requireDelivered?: boolean;
}): Promise<ReportRunResult['tracking']> {
  const cfg = input.tracking.mlflow;
  if (!cfg) return null;
  const store = openStore(input.storeUrl);
  const subject = await evaluationSubject(store, input.evalId);
  if (!subject) throw new Error(`evaluation ${input.evalId}: no report summary in ${store.url} yet`);
  const r = await syncMlflow(store, subject, cfg, { status: 'FINISHED' });
  if (input.requireDelivered && r.pending > 0) {
    throw retryable(FailureType.TrackingUndelivered, `MLflow ${cfg.uri}: evaluation ${input.evalId} not delivered yet (${r.error ?? 'no error'})`);
  }
  return r;
}
