// `swerl eval --config FILE [--out DIR]`: runs evaluationRun on TEMPORAL_ADDRESS, or, when none is given,
// on an embedded dev server with an embedded worker; shows a progress bar, prints the summary table and
// copies the report, the trajectories and the pass@k plot into DIR. `swerl eval report DIR` prints the
// table of a finished evaluation again; `swerl eval best-of-k --config FILE` runs selectBestOfK.
import type { Command } from 'commander';
import cliProgress from 'cli-progress';
import { cp, mkdir, readFile } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { Client, Connection, WorkflowExecutionAlreadyStartedError, type WorkflowHandle } from '@temporalio/client';
import { validateBestOfKConfig, validateEvalConfig } from '../../lib/eval/config.ts';
import { evalKeys } from '../../lib/eval/keys.ts';
import { formatEvalErrors, formatEvalMetrics, type EvalMetrics } from '../../lib/eval/metrics.ts';
import { fileStoreUrl, openStore } from '../../lib/store.ts';
import { startDevServer, type DevServer } from '../../services/temporal-server.ts';
import { startWorkers, type RunningWorkers } from '../../workers/index.ts';
import { evaluationStatusQuery, selectionStatusQuery } from '../../workflows/evaluation-signals.ts';
import type { EvaluationRunResult } from '../../lib/eval/shapes.ts';
import type { SelectionResult } from '../../workflows/select-best-of-k.ts';
import { parseBackendOptions, prepareLocalClusterImages, withBackendOptions, type BackendCliOptions } from './cluster.ts';
import { followResult, installCliLogger, useLogDir } from '../cli-log.ts';

export interface EvalOptions {
  config: string;
  out?: string;
  address?: string;
  evalId?: string;
  /** no progress bar and no table (tests) */
  quiet?: boolean;
  /** --backend (overrides config.env.backend), --kubeconfig, --namespace (the embedded worker's) */
  sandboxes?: BackendCliOptions;
}

export interface EvalOutcome {
  evalId: string;
  result: EvaluationRunResult;
  outDir: string;
  text: string;
}

interface Temporal {
  client: Client;
  close(): Promise<void>;
}

/** A client of TEMPORAL_ADDRESS (or --address), else an embedded dev server + worker under `dir`. */
async function connect(address: string | undefined, dir: string, log: (s: string) => void): Promise<Temporal> {
  let server: DevServer | null = null;
  let workers: RunningWorkers | null = null;
  let addr = address ?? process.env.TEMPORAL_ADDRESS;
  if (!addr) {
    server = await startDevServer({ dir: join(dir, 'temporal'), uiPort: 0 });
    addr = server.address;
    log(`embedded Temporal dev server at ${addr}${server.uiUrl ? ` (web UI ${server.uiUrl})` : ''}`);
    installCliLogger();
    workers = await startWorkers({ address: addr, queues: ['learner', 'rollout'] });
  }
  const connection = await Connection.connect({ address: addr });
  return {
    client: new Client({ connection }),
    async close() {
      await connection.close().catch(() => undefined);
      await workers?.shutdown();
      await server?.stop();
    },
  };
}

/** Reads a config file, makes relative paths absolute (workers may run elsewhere) and applies overrides. */
function readConfig(file: string, over: Record<string, unknown>): Record<string, unknown> {
  const raw = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  Object.assign(raw, over);
  if (typeof raw.tasksFile === 'string' && !isAbsolute(raw.tasksFile)) raw.tasksFile = resolve(raw.tasksFile);
  const m = raw.model as Record<string, unknown> | undefined;
  for (const k of ['path', 'tokenizer']) if (m && typeof m[k] === 'string' && !isAbsolute(m[k] as string)) m[k] = resolve(m[k] as string);
  return raw;
}

/**
 * --backend sets config.env.backend; --kubeconfig and --namespace are the embedded worker's (its Kubernetes
 * backend reads KUBECONFIG and SWERL_K8S_NAMESPACE): a worker of a server has its own.
 */
function useSandboxOptions(raw: Record<string, unknown>, o: BackendCliOptions, address: string | undefined): void {
  raw.env = { ...((raw.env as Record<string, unknown> | undefined) ?? {}), backend: o.backend };
  if (!o.kubeconfig && !o.namespace) return;
  if (address) throw new Error('--kubeconfig and --namespace apply to the embedded worker; with a Temporal server, set KUBECONFIG and SWERL_K8S_NAMESPACE where the worker runs');
  if (o.kubeconfig) process.env.KUBECONFIG = o.kubeconfig;
  if (o.namespace) process.env.SWERL_K8S_NAMESPACE = o.namespace;
}

/** Copies an evaluation's report (with its pass@k plot) and trajectories from the store into `outDir`. */
export async function exportEvaluation(storeUrl: string, evalId: string, outDir: string): Promise<string> {
  const store = openStore(storeUrl);
  await mkdir(outDir, { recursive: true });
  await cp(store.dirFor(evalKeys.report(evalId)), outDir, { recursive: true });
  if (existsSync(store.dirFor(evalKeys.episodes(evalId)))) await cp(store.dirFor(evalKeys.episodes(evalId)), join(outDir, 'trajectories'), { recursive: true });
  const summary = JSON.parse(await readFile(join(outDir, 'summary.json'), 'utf8')) as { text: string };
  return summary.text;
}

export async function evaluate(o: EvalOptions): Promise<EvalOutcome> {
  const log = (s: string) => {
    if (!o.quiet) console.log(s);
  };
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const over: Record<string, unknown> = o.evalId ? { evalId: o.evalId } : {};
  const raw0 = readConfig(o.config, over);
  if (o.sandboxes) useSandboxOptions(raw0, o.sandboxes, o.address ?? process.env.TEMPORAL_ADDRESS);
  const evalId = (raw0.evalId as string | undefined) ?? `eval-${stamp}`;
  raw0.evalId = evalId;
  const outDir = resolve(o.out ?? join('runs', evalId));
  await mkdir(outDir, { recursive: true });
  useLogDir(outDir);
  if (raw0.store === undefined) raw0.store = { url: fileStoreUrl(join(outDir, 'store')) };
  const v = validateEvalConfig(raw0);
  if (!v.ok) throw new Error(`invalid config ${o.config}:\n  ${v.errors.join('\n  ')}`);
  const config = v.config;
  const embedded = !(o.address ?? process.env.TEMPORAL_ADDRESS);
  if (config.env.backend === 'kubernetes') await prepareLocalClusterImages(config.tasksFile, config.tasks ?? [], o.sandboxes ?? {}, embedded, log);
  const temporal = await connect(o.address, outDir, log);
  try {
    const result = await startAndFollow<EvaluationRunResult>(temporal.client, {
      type: 'evaluationRun',
      workflowId: evalId,
      config,
      detail: ` (store ${config.store.url})`,
      quiet: o.quiet,
      log,
      format: `${evalId} |{bar}| {value}/{total} episodes | resolved {resolved} | errors {errors} | pass@1 so far {pass1} | {phase}`,
      progress: async (h) => {
        const st = await h.query(evaluationStatusQuery);
        const pass1 = st.pass1SoFar === null ? '-' : `${(100 * st.pass1SoFar).toFixed(1)}%`;
        return { total: st.total, done: st.done, payload: { resolved: st.resolved, errors: st.errors, pass1, phase: st.phase } };
      },
    });
    const text = await exportEvaluation(config.store.url, evalId, outDir);
    log(text);
    log(`report: ${outDir} (summary.json, run-<r>/predictions.jsonl, run-<r>/logs/run_evaluation/…, trajectories/, pass_at_k.html)`);
    return { evalId, result, outDir, text };
  } finally {
    await temporal.close();
  }
}

/**
 * Starts `type` as `workflowId` (or follows the one already running, e.g. after the CLI was interrupted) and
 * waits for its result, drawing a progress bar from its status query every half second.
 */
async function startAndFollow<R>(
  client: Client,
  o: {
    type: string;
    workflowId: string;
    config: unknown;
    /** said after "started <type> <id>" */
    detail?: string;
    quiet?: boolean;
    log: (s: string) => void;
    format: string;
    progress: (h: WorkflowHandle) => Promise<{ total: number; done: number; payload: Record<string, unknown> }>;
  },
): Promise<R> {
  try {
    await client.workflow.start(o.type, { taskQueue: 'learner', workflowId: o.workflowId, args: [o.config] });
    o.log(`started ${o.type} ${o.workflowId}${o.detail ?? ''}`);
  } catch (e) {
    if (!(e instanceof WorkflowExecutionAlreadyStartedError)) throw e;
    o.log(`${o.type} ${o.workflowId} is already running: following it`);
  }
  const handle = client.workflow.getHandle(o.workflowId);
  let finished = false;
  const resultP = followResult<R>(handle, o.workflowId).finally(() => (finished = true));
  let bar: cliProgress.SingleBar | null = null;
  while (!finished) {
    await Promise.race([resultP.catch(() => undefined), new Promise((r) => setTimeout(r, 500))]);
    if (finished || o.quiet) continue;
    try {
      const p = await o.progress(handle);
      if (p.total > 0 && !bar) {
        bar = new cliProgress.SingleBar({ format: o.format, hideCursor: false, noTTYOutput: !process.stdout.isTTY, notTTYSchedule: 5000 }, cliProgress.Presets.shades_classic);
        bar.start(p.total, 0, p.payload);
      }
      bar?.update(p.done, p.payload);
    } catch {
      // not queryable yet, or the server is restarting
    }
  }
  bar?.stop();
  return resultP;
}

/** Why a finished evaluation measured nothing (every episode an error), or null: the CLI then exits 1. */
export function evaluationFailure(r: EvaluationRunResult): string | null {
  const e = r.summary.episodes;
  if (e.planned === 0 || e.completed > 0) return null;
  return `none of the ${e.planned} episodes could happen (every one is an error; the reasons are in the summary above): nothing was measured`;
}

/** The table of a finished evaluation (an `--out` directory or a store's report directory). */
export async function reportText(dir: string): Promise<string> {
  const file = [join(dir, 'summary.json'), join(dir, 'report', 'summary.json')].find((f) => existsSync(f));
  if (!file) throw new Error(`${dir}: no summary.json (give the --out directory of swerl eval, or evals/<id>/report in the store)`);
  const s = JSON.parse(await readFile(file, 'utf8')) as {
    evalId: string;
    modelName: string;
    metrics: EvalMetrics;
    errors?: { taskId: string; run: number; reason: string }[];
    text?: string;
  };
  // the text summary.txt holds (setting, tool format, integrity); summaries written before it had one are rebuilt
  if (typeof s.text === 'string') return s.text;
  return `${formatEvalMetrics(s.metrics, `evaluation ${s.evalId} (${s.modelName})`)}\n${formatEvalErrors(s.errors ?? [])}`;
}

export function register(program: Command): void {
  const cmd = withBackendOptions(
    program
      .command('eval')
      .description('evaluate a checkpoint or any OpenAI-compatible server on SWE tasks (evaluationRun); see also `eval report` and `eval best-of-k`')
      .option('--config <file>', 'evaluation config JSON (lib/eval/config.ts)')
      .option('--out <dir>', 'output directory (report, predictions, trajectories, plot; embedded server state)')
      .option('--address <host:port>', 'Temporal frontend (default: $TEMPORAL_ADDRESS, else embedded)')
      .option('--eval-id <id>', 'evaluation id (= evaluationRun workflow id)'),
  )
    // `eval best-of-k --config F --eval-id X`: options after a subcommand are the subcommand's, not eval's
    .enablePositionalOptions()
    .action(async (raw: { config?: string; out?: string; address?: string; evalId?: string; backend?: string; kubeconfig?: string; namespace?: string }, command: Command) => {
      if (!raw.config) {
        console.error('swerl eval: --config: required (or use `swerl eval report DIR` / `swerl eval best-of-k --config FILE`)');
        process.exitCode = 2;
        return;
      }
      // the config's env.backend holds unless --backend is given; --kubeconfig or --namespace mean kubernetes
      const backendGiven = command.getOptionValueSource('backend') !== 'default';
      const k8sGiven = raw.kubeconfig !== undefined || raw.namespace !== undefined;
      const sandboxes = backendGiven || k8sGiven ? parseBackendOptions({ ...raw, backend: backendGiven ? raw.backend : 'kubernetes' }) : undefined;
      // a failed evaluation (e.g. the server check before the first episode) ends in one line (scripts/cli.ts)
      const o = await evaluate({ config: raw.config, out: raw.out, address: raw.address, evalId: raw.evalId, ...(sandboxes ? { sandboxes } : {}) });
      const failed = evaluationFailure(o.result);
      if (failed) {
        console.error(`swerl eval: ${o.evalId}: ${failed}`);
        process.exitCode = 1;
      }
    });
  cmd
    .command('report <dir>')
    .description('print the summary table of a finished evaluation (its --out directory)')
    .action(async (dir: string) => {
      console.log(await reportText(dir));
    });
  cmd
    .command('best-of-k')
    .description('Best@K selection over a finished evaluation with verifiers (selectBestOfK)')
    .requiredOption('--config <file>', 'Best@K config JSON (lib/eval/config.ts BestOfKConfigSchema)')
    .option('--eval-id <id>', "the finished evaluation (overrides the config's evalId)")
    .option('--store <dir|url>', "the evaluation's artifact store (a directory or file:// URL; `swerl eval --out DIR` keeps it in DIR/store)")
    .option('--out <dir>', 'output directory (selected predictions, Best@K table and plot)')
    .option('--address <host:port>', 'Temporal frontend (default: $TEMPORAL_ADDRESS, else embedded)')
    .action(async (raw: { config: string; evalId?: string; store?: string; out?: string; address?: string }) => {
      await selectBestOfK({ config: raw.config, evalId: raw.evalId, store: raw.store, out: raw.out, address: raw.address });
    });
}

export interface BestOfKOptions {
  config: string;
  /** overrides the config's evalId */
  evalId?: string;
  /** overrides the config's store: a directory or a file:// URL */
  store?: string;
  out?: string;
  address?: string;
  quiet?: boolean;
}

export async function selectBestOfK(o: BestOfKOptions): Promise<{ selectionId: string; outDir: string; text: string; result: unknown }> {
  const log = (s: string) => {
    if (!o.quiet) console.log(s);
  };
  const raw = JSON.parse(readFileSync(o.config, 'utf8')) as Record<string, unknown>;
  if (o.evalId) raw.evalId = o.evalId;
  if (o.store) raw.store = { url: o.store.startsWith('file://') ? o.store : fileStoreUrl(o.store) };
  if (raw.evalId === undefined) throw new Error(`${o.config}: evalId: required (in the config or --eval-id ID)`);
  const selectionId = (raw.selectionId as string | undefined) ?? `bok-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  raw.selectionId = selectionId;
  const v = validateBestOfKConfig(raw);
  if (!v.ok) throw new Error(`invalid config ${o.config}:\n  ${v.errors.join('\n  ')}`);
  const config = v.config;
  const outDir = resolve(o.out ?? join('runs', `${config.evalId}-${selectionId}`));
  await mkdir(outDir, { recursive: true });
  useLogDir(outDir);
  const temporal = await connect(o.address, outDir, log);
  try {
    const workflowId = `${config.evalId}-${selectionId}`;
    const result = await startAndFollow<SelectionResult>(temporal.client, {
      type: 'selectBestOfK',
      workflowId,
      config,
      quiet: o.quiet,
      log,
      format: `${selectionId} |{bar}| {value}/{total} verifier results | {phase}`,
      progress: async (h) => {
        const st = await h.query(selectionStatusQuery);
        return { total: st.total, done: st.done, payload: { phase: st.phase } };
      },
    });
    const store = openStore(config.store.url);
    await cp(store.dirFor(evalKeys.selectionReport(config.evalId, selectionId)), outDir, { recursive: true });
    const s = JSON.parse(await readFile(join(outDir, 'best_of_k.json'), 'utf8')) as { text: string };
    log(s.text);
    log(`selection: ${outDir} (best_of_k.json, <selector>/predictions.jsonl, best_at_k.html)`);
    return { selectionId, outDir, text: s.text, result };
  } finally {
    await temporal.close();
  }
}
