// `swerl report RUN [--store URL] [--sync]`: redraws a run's curves into its store directory and prints
// where they are and a terminal summary (reward and success trend, timings, evaluation, tracker state).
import type { Command } from 'commander';
import { validateConfig } from '../../lib/config.ts';
import { fileStoreUrl, keys, openStore, type ArtifactStore } from '../../lib/store.ts';
import { readMetricsLines, renderRunPlots, syncMlflow, trainingRunSubject, type MetricsLine, type MlflowState } from '../../activities/report.ts';
import type { Trajectory } from '../../lib/types.ts';
import type { IntegrityFinding } from '../../lib/swe/grading.ts';
import { findingLines, integrityKeys, isHack } from '../../lib/swe/integrity.ts';

const BLOCKS = '▁▂▃▄▅▆▇█';

/** A one-line chart of `xs` in [lo, hi], at most `width` characters (bucket means). */
export function sparkline(xs: number[], lo = 0, hi = 1, width = 60): string {
  if (!xs.length) return '';
  const n = Math.min(width, xs.length);
  let out = '';
  for (let b = 0; b < n; b++) {
    const part = xs.slice(Math.floor((b * xs.length) / n), Math.floor(((b + 1) * xs.length) / n));
    const mean = part.reduce((a, x) => a + x, 0) / part.length;
    const f = hi > lo ? Math.min(1, Math.max(0, (mean - lo) / (hi - lo))) : 0;
    out += BLOCKS[Math.min(BLOCKS.length - 1, Math.floor(f * BLOCKS.length))];
  }
  return out;
}

const num = (l: MetricsLine, k: string) => Number(l[k] ?? 0);
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** The terminal summary of a run's metrics lines. */
export function formatRunSummary(runId: string, lines: MetricsLine[]): string[] {
  const out: string[] = [];
  const rewards = lines.map((l) => num(l, 'meanReward'));
  const success = lines.map((l) => num(l, 'successRate'));
  const fifth = Math.max(1, Math.floor(lines.length / 5));
  const best = rewards.reduce((bi, r, i) => (r > rewards[bi] ? i : bi), 0);
  const lo = Math.min(0, ...rewards);
  const hi = Math.max(1, ...rewards);
  out.push(`run ${runId}: ${lines.length} iteration(s), ${lines[0].iteration}..${lines.at(-1)!.iteration}`);
  out.push(
    `reward   ${sparkline(rewards, lo, hi)}  first fifth ${mean(rewards.slice(0, fifth)).toFixed(3)} → last fifth ${mean(rewards.slice(-fifth)).toFixed(3)}` +
      ` (best ${rewards[best].toFixed(3)} at iteration ${lines[best].iteration})`,
  );
  out.push(`success  ${sparkline(success)}  first fifth ${pct(mean(success.slice(0, fifth)))} → last fifth ${pct(mean(success.slice(-fifth)))}`);
  const last = lines.at(-1)!;
  const filtered = last.filtered as Record<string, number> | undefined;
  out.push(
    `last     iteration ${last.iteration}: reward ${num(last, 'meanReward').toFixed(3)}, success ${pct(num(last, 'successRate'))}, ` +
      `loss ${num(last, 'loss').toExponential(2)}, |g| ${num(last, 'gradNorm').toFixed(3)}, tokens ${num(last, 'tokens')}` +
      (filtered ? `, filtered ${pct(Object.values(filtered).reduce((a, b) => a + b, 0))}` : ''),
  );
  const secs = lines.map((l) => num(l, 'iterationSeconds'));
  out.push(
    `time     ${Math.min(...secs).toFixed(1)}–${Math.max(...secs).toFixed(1)} s per iteration (mean ${mean(secs).toFixed(1)} s: rollouts ${mean(lines.map((l) => num(l, 'rolloutSeconds'))).toFixed(1)}, ` +
      `learner ${mean(lines.map((l) => num(l, 'learnerSeconds'))).toFixed(1)}, orchestration ${mean(lines.map((l) => num(l, 'orchestrationSeconds'))).toFixed(1)}); ` +
      `${(secs.reduce((a, b) => a + b, 0) / 60).toFixed(1)} min in iterations`,
  );
  const withIntegrity = lines.filter((l) => l.integrity && typeof l.integrity === 'object');
  if (withIntegrity.length) {
    const rates = withIntegrity.map((l) => (l.integrity as { hackRate: number }).hackRate);
    const sum = (k: 'hacks' | 'episodes') => withIntegrity.reduce((a, l) => a + ((l.integrity as Record<string, number>)[k] ?? 0), 0);
    out.push(
      `hacks    ${sparkline(rates)}  hack rate last ${pct(rates.at(-1)!)}, ${sum('hacks')} of ${sum('episodes')} graded episodes caught over the run (swerl report --integrity)`,
    );
  }
  const withEval = lines.filter((l) => l.eval && typeof l.eval === 'object');
  if (withEval.length) {
    const e = withEval.at(-1)!;
    out.push(`eval     iteration ${e.iteration}: ${JSON.stringify(e.eval)}`);
  }
  return out;
}

function formatTracking(st: MlflowState | null, lines: number): string {
  if (!st) return 'mlflow   not configured for this run (config.tracking.mlflow)';
  const where = `${st.uri} (experiment ${JSON.stringify(st.experiment)})`;
  if (!st.mlflowRunId) return `mlflow   ${where}: no MLflow run yet${st.unreachable ? ` (${st.unreachable})` : ''}`;
  const pending = lines - st.sentLines;
  return (
    `mlflow   run ${st.mlflowRunId} at ${where}: ${st.sentLines}/${lines} iteration(s) sent` +
    (pending > 0 ? `, ${pending} pending${st.unreachable ? ` (${st.unreachable})` : ''}` : '') +
    (st.closed ? `, closed ${st.closed}` : '')
  );
}

/** The tracking config of the run's newest iteration snapshot. */
async function trackingOf(store: ArtifactStore, runId: string, lines: MetricsLine[]) {
  const raw = await store.getJson<unknown>(keys.iterationConfig(runId, lines.at(-1)!.iteration));
  const v = raw === null ? null : validateConfig(raw, { recorded: true });
  return v?.ok ? v.config.tracking : null;
}

/**
 * How the run's workflow ended, as the MLflow status to close with, when it ended without running its own
 * report: a terminated or timed-out workflow runs no code (the others close their MLflow run themselves, and
 * closing again with the same status is a no-op). null while it runs or when Temporal cannot say.
 */
async function endedWithoutReport(address: string, namespace: string, runId: string, log: (s: string) => void): Promise<{ status: 'KILLED' | 'FAILED' } | null> {
  const { Client, Connection } = await import('@temporalio/client');
  let connection: Awaited<ReturnType<typeof Connection.connect>> | null = null;
  try {
    connection = await Connection.connect({ address, connectTimeout: 5000 });
    const d = await new Client({ connection, namespace }).workflow.getHandle(runId).describe();
    if (d.status.name === 'TERMINATED') return { status: 'KILLED' };
    if (d.status.name === 'TIMED_OUT') return { status: 'FAILED' };
    return null;
  } catch (e) {
    log(`mlflow   --sync: how workflow ${runId} ended is unknown (${(e as Error).message.split('\n')[0]}); the MLflow run's status is left as it is`);
    return null;
  } finally {
    await connection?.close();
  }
}

export async function report(o: {
  runId: string;
  store: string;
  sync?: boolean;
  address?: string;
  namespace?: string;
  log?: (s: string) => void;
}): Promise<{ lines: MetricsLine[]; plots: string[] }> {
  const log = o.log ?? console.log;
  const storeUrl = o.store.includes('://') ? o.store : fileStoreUrl(o.store);
  const store = openStore(storeUrl);
  const lines = await readMetricsLines(store, o.runId);
  if (!lines.length) throw new Error(`run ${JSON.stringify(o.runId)}: no metrics in ${storeUrl} (${keys.metrics(o.runId)}); is --store the run's store?`);
  const plots = (await renderRunPlots(store, o.runId, lines)).map((k) => store.dirFor(k));
  for (const l of formatRunSummary(o.runId, lines)) log(l);
  if (o.sync) {
    const tracking = await trackingOf(store, o.runId, lines);
    if (!tracking?.mlflow) log('mlflow   --sync: the run has no config.tracking.mlflow');
    else {
      const final = await endedWithoutReport(o.address ?? '127.0.0.1:7233', o.namespace ?? 'default', o.runId, log);
      const r = await syncMlflow(store, trainingRunSubject(store, o.runId, lines), tracking.mlflow, final ?? undefined);
      log(`mlflow   --sync: sent ${r.sent} iteration(s), ${r.pending} item(s) pending${r.error ? ` (${r.error})` : ''}`);
    }
  }
  log(formatTracking(await store.getJson<MlflowState>(keys.mlflowState(o.runId)), lines.length));
  log(`plots    ${plots.filter((p) => !p.endsWith('.json')).join('  ')}`);
  return { lines, plots };
}

/**
 * The trajectories the grader caught hacking, iteration by iteration: where, the reward's reason, every integrity
 * finding (kind, rule, file:line, the line or the contradiction) and the patch; then where the kept samples are.
 */
export async function integrityReport(o: { runId: string; store: string; log?: (s: string) => void }): Promise<{ flagged: number }> {
  const log = o.log ?? console.log;
  const storeUrl = o.store.includes('://') ? o.store : fileStoreUrl(o.store);
  const store = openStore(storeUrl);
  const lines = await readMetricsLines(store, o.runId);
  const iters = (await store.children(keys.run(o.runId)))
    .map((n) => /^iter-(\d+)$/.exec(n)?.[1])
    .filter((n): n is string => n !== undefined)
    .map(Number)
    .sort((a, b) => a - b);
  if (!iters.length) throw new Error(`run ${JSON.stringify(o.runId)}: no iterations in ${storeUrl}; is --store the run's store?`);
  const counted = new Map(lines.map((l) => [l.iteration, l.integrity as { hacks: number; episodes: number; hackRate: number } | undefined]));
  let flagged = 0;
  for (const n of iters) {
    const c = counted.get(n);
    // an iteration whose metrics say no episode was caught has nothing to list
    if (c && c.hacks === 0) continue;
    for (const k of await store.list(keys.trajectories(o.runId, n))) {
      const t = await store.getJson<Trajectory>(k);
      const found = (t?.info?.integrity as IntegrityFinding[] | undefined) ?? [];
      if (!t || !isHack(integrityKeys(found))) continue;
      flagged++;
      log(`iteration ${n} · task ${t.taskId} · sample ${t.sample} · reward ${t.reward} (${String(t.info?.reason)}) · ${k}`);
      for (const l of findingLines(t.taskId, found)) log(l);
      const patch = typeof t.info?.patch === 'string' ? t.info.patch : '';
      log(patch ? patch.replace(/^/gm, '    | ').trimEnd() : '    (no patch)');
    }
    if (c) log(`iteration ${n}: hack rate ${pct(c.hackRate)} (${c.hacks} of ${c.episodes} graded episodes)`);
  }
  log(`flagged trajectories: ${flagged}; kept whole for review under ${store.dirFor(`${keys.run(o.runId)}/integrity`)}`);
  return { flagged };
}

export function register(program: Command): void {
  program
    .command('report')
    .description("redraw a run's curves into its store directory and print a summary")
    .argument('<run>', 'run id')
    .option('--store <url-or-dir>', "the run's artifact store (file:// URL or directory)", 'file://.runs/store')
    .option('--sync', "also send what MLflow has not received yet (when the run has config.tracking.mlflow); a terminated run's MLflow run is closed KILLED")
    .option('--address <host:port>', 'Temporal frontend, asked with --sync how the run ended', process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233')
    .option('--namespace <ns>', 'Temporal namespace', process.env.TEMPORAL_NAMESPACE ?? 'default')
    .option('--integrity', 'list the trajectories the grader caught hacking, with their findings and patches (docs/integrity.md)')
    .action(async (runId: string, raw: { store: string; sync?: boolean; address: string; namespace: string; integrity?: boolean }) => {
      try {
        if (raw.integrity) await integrityReport({ runId, store: raw.store });
        else await report({ runId, store: raw.store, sync: raw.sync, address: raw.address, namespace: raw.namespace });
      } catch (e) {
        console.error(`swerl report: ${(e as Error).message}`);
        process.exitCode = 1;
      }
    });
}
