// `swerl train --config FILE [--iterations N] [--out DIR]`: starts trainingRun on TEMPORAL_ADDRESS, or,
// when none is given, on an embedded dev server (SQLite under the out dir) with an embedded worker.
// Shows a progress bar per iteration and a metrics line after each; writes metrics.jsonl and the plot.
import type { Command } from 'commander';
import cliProgress from 'cli-progress';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { Client, Connection, WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { asyncMode, validateConfig, type TrainingConfig } from '../../lib/config.ts';
import { fileStoreUrl, keys, openStore } from '../../lib/store.ts';
import { startDevServer, type DevServer } from '../../services/temporal-server.ts';
import { writeRewardPlot } from '../../lib/plot.ts';
import { startWorkers, type RunningWorkers } from '../../workers/index.ts';
import { progressQuery, statusQuery } from '../../workflows/signals.ts';
import type { IterationMetrics, TrainingRunResult } from '../../lib/training/shapes.ts';
import { followResult, installCliLogger, useLogDir } from '../cli-log.ts';
import { checkedKubeConfig } from './cluster.ts';
import type { LearnerWorkerOptions } from '../../activities/index.ts';

export interface TrainOptions {
  config: string;
  iterations?: number;
  out?: string;
  address?: string;
  runId?: string;
  threads?: number;
  /** no progress bar (tests) */
  quiet?: boolean;
  /** called once per iteration as its metrics land, quiet or not (bench:learning prints its own line) */
  onIteration?: (m: IterationMetrics, runId: string) => void;
}

export interface TrainOutcome {
  runId: string;
  result: TrainingRunResult;
  metrics: IterationMetrics[];
  metricsPath: string;
  plotPaths: string[];
  outDir: string;
}

/**
 * The embedded learner worker's options: a synchronous run serves one checkpoint at a time, so its policy server keeps
 * no older copy (a 0.5B model is 2.5 GB each; the default cache of 4 ran a 24 GB machine out of memory at iteration 2).
 */
export function embeddedLearnerOptions(config: TrainingConfig, threads?: number): LearnerWorkerOptions {
  return { device: config.learner.device, threads: threads ?? config.learner.threads, ...(asyncMode(config) === 'off' ? { policyModels: 1 } : {}) };
}

export function formatMetrics(m: IterationMetrics): string {
  const filtered = Object.values(m.filtered).reduce((a, b) => a + (b ?? 0), 0);
  return (
    `iter ${m.iteration}: reward ${m.meanReward.toFixed(3)}  success ${(100 * m.successRate).toFixed(1)}%  ` +
    `filtered ${(100 * filtered).toFixed(1)}%  tokens ${m.tokens}  loss ${m.loss.toExponential(2)}  |g| ${m.gradNorm.toFixed(3)}  ` +
    `time ${m.iterationSeconds.toFixed(1)}s (rollouts ${m.rolloutSeconds.toFixed(1)}s, learner ${m.learnerSeconds.toFixed(1)}s, orchestration ${m.orchestrationSeconds.toFixed(1)}s)`
  );
}

function readMetrics(storeUrl: string, runId: string): IterationMetrics[] {
  try {
    const text = readFileSync(openStore(storeUrl).dirFor(keys.metrics(runId)), 'utf8');
    const byIter = new Map<number, IterationMetrics>();
    for (const l of text.split('\n'))
      if (l.trim()) {
        const m = JSON.parse(l) as IterationMetrics;
        if (!byIter.has(m.iteration)) byIter.set(m.iteration, m);
      }
    return [...byIter.values()].sort((a, b) => a.iteration - b.iteration);
  } catch {
    return [];
  }
}

/** The run's config from its file and the command's options; workers may run elsewhere, so relative paths are made absolute. */
function loadTrainConfig(o: TrainOptions, outDir: string): TrainingConfig {
  const raw = JSON.parse(readFileSync(o.config, 'utf8')) as Record<string, unknown>;
  if (o.iterations !== undefined) raw.iterations = o.iterations;
  if (raw.store === undefined) raw.store = { url: fileStoreUrl(join(outDir, 'store')) };
  const env = raw.env as { tasksFile?: unknown } | undefined;
  if (env && typeof env.tasksFile === 'string' && !isAbsolute(env.tasksFile)) env.tasksFile = resolve(env.tasksFile);
  const ev = raw.eval as { tasks?: unknown } | undefined;
  if (ev && typeof ev.tasks === 'string' && !isAbsolute(ev.tasks)) ev.tasks = resolve(ev.tasks);
  const v = validateConfig(raw);
  if (!v.ok) throw new Error(`invalid config ${o.config}:\n  ${v.errors.join('\n  ')}`);
  return { ...v.config, runId: o.runId ?? v.config.runId ?? `run-${Date.now().toString(36)}` };
}

/** An embedded dev server and worker for a run given no server; Ctrl-C stops both, and the run resumes with the same --out and --run-id. */
async function startEmbedded(config: TrainingConfig, o: TrainOptions, outDir: string, log: (s: string) => void): Promise<{ server: DevServer; workers: RunningWorkers }> {
  const server = await startDevServer({ dir: join(outDir, 'temporal'), uiPort: 0 });
  log(`embedded Temporal dev server at ${server.address}${server.uiUrl ? ` (web UI ${server.uiUrl})` : ''}`);
  // the progress bar is the output; the embedded worker reports problems, one line each
  installCliLogger();
  const workers = await startWorkers({
    address: server.address,
    queues: ['learner', 'rollout'],
    learner: embeddedLearnerOptions(config, o.threads),
  });
  const onSignal = (sig: NodeJS.Signals) => {
    console.error(`\n${sig}: stopping the embedded worker and server (resume with the same --out and --run-id ${config.runId})`);
    void Promise.allSettled([workers.shutdown()])
      .then(() => server.stop())
      .then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return { server, workers };
}

/** Follows a started run to its end: metrics.jsonl and a line per iteration as they land, a progress bar of the current iteration's rollouts. */
async function followRun(
  client: Client,
  config: TrainingConfig,
  metricsPath: string,
  quiet: boolean,
  log: (s: string) => void,
  onIteration?: TrainOptions['onIteration'],
): Promise<TrainingRunResult> {
  const runId = config.runId!;
  const handle = client.workflow.getHandle(runId);
  const total = config.batch.tasks * config.batch.samples;
  let bar: cliProgress.SingleBar | null = null;
  let barIter = -1;
  let printed = -1;
  let finished = false;
  const resultP = followResult<TrainingRunResult>(handle, runId).finally(() => (finished = true));
  const flushMetrics = () => {
    const ms = readMetrics(config.store.url, runId);
    if (ms.length) writeFileSync(metricsPath, ms.map((m) => JSON.stringify(m)).join('\n') + '\n');
    for (const m of ms)
      if (m.iteration > printed) {
        bar?.stop();
        bar = null;
        log(formatMetrics(m));
        onIteration?.(m, runId);
        printed = m.iteration;
      }
  };
  while (!finished) {
    await Promise.race([resultP.catch(() => undefined), new Promise((r) => setTimeout(r, 500))]);
    flushMetrics();
    if (finished || quiet) continue;
    try {
      const st = await handle.query(statusQuery);
      if (st.running && st.iterationWorkflowId) {
        const p = await client.workflow.getHandle(st.iterationWorkflowId).query(progressQuery);
        if (p.n !== barIter) {
          bar?.stop();
          bar = new cliProgress.SingleBar(
            { format: `iter ${p.n} |{bar}| {value}/{total} rollouts | {phase}`, hideCursor: false, noTTYOutput: !process.stdout.isTTY, notTTYSchedule: 5000 },
            cliProgress.Presets.shades_classic,
          );
          bar.start(total, 0, { phase: p.phase });
          barIter = p.n;
        }
        bar?.update(p.rolloutsDone, { phase: p.phase });
      }
    } catch {
      // the server may be restarting, or the iteration just ended
    }
  }
  (bar as cliProgress.SingleBar | null)?.stop();
  const result = await resultP;
  flushMetrics();
  return result;
}

export async function train(o: TrainOptions): Promise<TrainOutcome> {
  const outDir = resolve(o.out ?? join('runs', `train-${new Date().toISOString().replace(/[:.]/g, '-')}`));
  mkdirSync(outDir, { recursive: true });
  useLogDir(outDir);
  const config = loadTrainConfig(o, outDir);
  const runId = config.runId!;
  const log = (s: string) => {
    if (!o.quiet) console.log(s);
  };
  let address = o.address ?? process.env.TEMPORAL_ADDRESS;
  // the embedded worker's sandbox pods: a cluster that cannot work stops the run before its first task
  if (!address && config.env.kind === 'swe' && config.env.backend === 'kubernetes') await checkedKubeConfig({});
  const embedded = address ? null : await startEmbedded(config, o, outDir, log);
  address ??= embedded!.server.address;
  const connection = await Connection.connect({ address });
  const client = new Client({ connection });
  const metricsPath = join(outDir, 'metrics.jsonl');
  try {
    try {
      await client.workflow.start('trainingRun', {
        taskQueue: 'learner',
        workflowId: runId,
        args: [config],
        // the UI's Summary/Details of the run (its current details follow the iterations)
        staticSummary: `${config.env.kind} training run: ${config.iterations} iterations of ${config.batch.tasks} tasks × ${config.batch.samples} samples`,
        staticDetails: `store \`${config.store.url}\`${config.tracking.mlflow ? ` · MLflow ${config.tracking.mlflow.uri} experiment \`${config.tracking.mlflow.experiment}\`` : ''}`,
      });
      log(`started trainingRun ${runId} (store ${config.store.url})`);
    } catch (e) {
      if (!(e instanceof WorkflowExecutionAlreadyStartedError)) throw e;
      log(`trainingRun ${runId} is already running: following it`);
    }
    const result = await followRun(client, config, metricsPath, o.quiet ?? false, log, o.onIteration);
    const metrics = readMetrics(config.store.url, runId);
    const plotPaths = metrics.length
      ? await writeRewardPlot(metricsPath, join(outDir, 'reward.html'), `${config.env.kind === 'frozenlake' ? 'FrozenLake' : 'SWE'} reward (${runId})`)
      : [];
    return { runId, result, metrics, metricsPath, plotPaths, outDir };
  } finally {
    await connection.close().catch(() => undefined);
    await embedded?.workers.shutdown();
    await embedded?.server.stop();
  }
}

export function register(program: Command): void {
  program
    .command('train')
    .description('run trainingRun (embedded dev server + worker unless TEMPORAL_ADDRESS or --address is given)')
    .requiredOption('--config <file>', 'training config JSON (e.g. configs/frozenlake.json)')
    .option('--iterations <n>', 'override config.iterations')
    .option('--out <dir>', 'output directory (metrics.jsonl, reward plot, store, embedded server state)')
    .option('--address <host:port>', 'Temporal frontend (default: $TEMPORAL_ADDRESS, else embedded)')
    .option('--run-id <id>', 'run id (= trainingRun workflow id)')
    .action(async (raw: { config: string; iterations?: string; out?: string; address?: string; runId?: string }) => {
      const iterations = raw.iterations === undefined ? undefined : Number(raw.iterations);
      if (iterations !== undefined && !(Number.isInteger(iterations) && iterations >= 1)) {
        console.error(`swerl train: --iterations: must be a positive integer, got ${JSON.stringify(raw.iterations)}`);
        process.exitCode = 2;
        return;
      }
      const outcome = await train({ config: raw.config, iterations, out: raw.out, address: raw.address, runId: raw.runId });
      console.log(`done: ${outcome.result.iterations} iterations, checkpoint ${outcome.result.checkpoint}`);
      console.log(`metrics: ${outcome.metricsPath}`);
      if (outcome.plotPaths.length) console.log(`plot: ${outcome.plotPaths.join(', ')}`);
    });
}
