// Asynchronous RL side by side (DESIGN §10): the synchronous loop, one-step and the pump (η = 1, 2, 4; admission and
// streaming order) through the real stack (dev server, one worker for both queues, our policy server), on
//   plain     FrozenLake as configs/frozenlake.json has it (rollouts and learner share the same 2 cores);
//   longtail  the same with a seeded lognormal wait per environment step, its median growing with the step
//             (env.latency), so a batch's slowest episodes hold a synchronous iteration up;
//   slowlearn plain FrozenLake with each learner step lengthened by a sleep (a bigger model's learner on this one).
// For each mode: wall time per trained sample, its speedup over sync in the same scenario, the final success rate,
// the largest token staleness and the policy server's model loads. Stability (plain, 3 seeds): success rate against
// trained samples, no mode below the synchronous curve by more than max(0.05, 2 sd of the sync runs) over the last
// third of the run; no growth of the gradient norm or the mismatch KL (k3) from the first third to the last; and
// the correction ablation (none, TIS, decoupled) at η = 4. The last two lines: `pump speedup: X` (sync / the best
// pump on the long tail) and `stability: ok|FAIL`.
//
//   npm run bench:async -- [--full | --quick] [--iterations N] [--tail-iterations N] [--tasks B] [--samples G] [--seeds 1,2,3]
//                          [--learner-sleep-ms MS] [--only REGEX] [--json FILE]
//
// Default (≤ 40 min on this machine unshared): plain × {sync, one-step, pump η=1,2,4 admission, η=4 streaming,
// η=4 ablation none and TIS} × 3 seeds; longtail × every mode × 1 seed; slowlearn × {sync, one-step, pump η=2 both}.
// --full: every mode × every scenario × every seed, and the ablation in both orders.
// --quick (≤ 20 min on a shared 2-core host): longtail × {sync, one-step, pump η=2 admission, η=4 both orders} × 1
// seed, 6 iterations; plain × {sync, pump η=4 admission with the ablation none and TIS} × 3 seeds, 8 iterations;
// no slowlearn, no η=1 pump, no streaming ablation. It prints what it left out.
import { parseArgs } from 'node:util';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { startDevServer } from '../services/temporal-server.ts';
import { fileStoreUrl, keys, openStore } from '../lib/store.ts';
import type { TrainingConfigInput } from '../lib/config.ts';
import { startWorkers, type RunningWorkers } from '../workers/index.ts';
import type { LearnerHandle } from '../activities/learner.ts';
import { policyModelLoads } from '../lib/metrics.ts';
import type { IterationMetrics, TrainingRunResult } from '../lib/training/shapes.ts';

const { values: args } = parseArgs({
  options: {
    full: { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    iterations: { type: 'string' },
    'tail-iterations': { type: 'string' },
    tasks: { type: 'string', default: '8' },
    samples: { type: 'string', default: '8' },
    seeds: { type: 'string', default: '1,2,3' },
    'learner-sleep-ms': { type: 'string', default: '2500' },
    json: { type: 'string' },
    /** only the runs whose "<scenario> <mode>" matches this regular expression */
    only: { type: 'string' },
  },
});
if (args.full && args.quick) throw new Error('--full and --quick: give one of them');
const ITERATIONS = Number(args.iterations ?? (args.quick ? 8 : 16));
const TAIL_ITERATIONS = Number(args['tail-iterations'] ?? (args.quick ? 6 : 10));
const TASKS = Number(args.tasks);
const SAMPLES = Number(args.samples);
const SEEDS = args.seeds.split(',').map(Number);
const LEARNER_SLEEP_MS = Number(args['learner-sleep-ms']);
const root = fileURLToPath(new URL('..', import.meta.url));
const preset = JSON.parse(readFileSync(join(root, 'configs', 'frozenlake.json'), 'utf8')) as TrainingConfigInput;

type Scenario = 'plain' | 'longtail' | 'slowlearn';
interface Mode {
  name: string;
  async?: TrainingConfigInput['async'];
  correction?: NonNullable<TrainingConfigInput['learner']>['correction'];
}
const pump = (eta: number, order: 'admission' | 'streaming', correction?: Mode['correction']): Mode => ({
  name: `pump η=${eta} ${order}${correction ? ` ${correction.kind}` : ''}`,
  async: { mode: 'pump', maxStaleness: eta, order },
  ...(correction ? { correction } : {}),
});
const SYNC: Mode = { name: 'sync' };
const ONE_STEP: Mode = { name: 'one-step', async: { mode: 'one-step' } };
const ALL_MODES: Mode[] = [SYNC, ONE_STEP, ...[1, 2, 4].flatMap((eta) => [pump(eta, 'admission'), pump(eta, 'streaming')])];
const ABLATION = (order: 'admission' | 'streaming'): Mode[] => [pump(4, order, { kind: 'none' }), pump(4, order, { kind: 'tis', cap: 2 })];

interface Plan {
  scenario: Scenario;
  mode: Mode;
  seed: number;
}
function plan(): Plan[] {
  const out: Plan[] = [];
  const add = (scenario: Scenario, modes: Mode[], seeds: number[]) => {
    for (const seed of seeds) for (const mode of modes) out.push({ scenario, mode, seed });
  };
  // the long tail first: its speedup is the headline, and a run cut short has it
  if (args.quick) {
    add('longtail', [SYNC, ONE_STEP, pump(2, 'admission'), pump(4, 'admission'), pump(4, 'streaming')], SEEDS.slice(0, 1));
    add('plain', [SYNC, pump(4, 'admission'), ...ABLATION('admission')], SEEDS);
  } else if (args.full) {
    add('longtail', ALL_MODES, SEEDS);
    add('slowlearn', ALL_MODES, SEEDS);
    add('plain', [...ALL_MODES, ...ABLATION('admission'), ...ABLATION('streaming')], SEEDS);
  } else {
    add('longtail', ALL_MODES, SEEDS.slice(0, 1));
    add('slowlearn', [SYNC, ONE_STEP, pump(2, 'admission'), pump(2, 'streaming')], SEEDS.slice(0, 1));
    add('plain', [SYNC, ONE_STEP, pump(1, 'admission'), pump(2, 'admission'), pump(4, 'admission'), pump(4, 'streaming'), ...ABLATION('admission')], SEEDS);
  }
  const only = args.only ? new RegExp(args.only) : null;
  return only ? out.filter((p) => only.test(`${p.scenario} ${p.mode.name}`)) : out;
}

/** The long tail: median 40 ms per step growing by half of it per step, σ 1.2 (p99 ≈ 16 × the median), at most 8 s. */
const LATENCY = { medianMs: 40, sigma: 1.2, growth: 0.5, maxMs: 8000 };

function configOf(p: Plan, runId: string, storeUrl: string): TrainingConfigInput {
  const eta = p.mode.async?.mode === 'pump' ? p.mode.async.maxStaleness : p.mode.async?.mode === 'one-step' ? 1 : 0;
  const batch = TASKS * SAMPLES;
  return {
    ...preset,
    runId,
    seed: p.seed,
    iterations: p.scenario === 'plain' ? ITERATIONS : TAIL_ITERATIONS,
    batch: { tasks: TASKS, samples: SAMPLES },
    // the pump keeps η + 1 batches in flight at most: as far ahead as the staleness bound lets it run
    maxInflightRollouts: (eta + 1) * batch,
    model: { preset: 'frozenlake', seed: p.seed },
    // the lake and step limit this bench's figures were measured with (the demo's config now ends out-of-steps episodes as `fail`)
    env: { ...(preset.env as object), kind: 'frozenlake', stepLimit: 'truncate', ...(p.scenario === 'longtail' ? { latency: LATENCY } : {}) } as TrainingConfigInput['env'],
    // the scale, not crash recovery, is measured here: heartbeat timeouts a busy shared host does not trip
    rollout: { ...preset.rollout, heartbeatSeconds: 5, heartbeatTimeoutSeconds: 60 },
    learner: { ...preset.learner, threads: 1, heartbeatTimeoutSeconds: 60, ...(p.mode.correction ? { correction: p.mode.correction } : {}) },
    store: { url: storeUrl },
    ...(p.mode.async ? { async: p.mode.async } : {}),
  };
}

interface Result {
  scenario: Scenario;
  mode: string;
  seed: number;
  wallSeconds: number;
  trainedSamples: number;
  secondsPerSample: number;
  success: number[];
  gradNorm: number[];
  k3: number[];
  /** per step: the mean staleness of the tokens it trained (0 in the synchronous loop) */
  staleness: number[];
  /** the run's staleness bound η (1 for one-step, 0 for sync) */
  bound: number;
  maxStaleness: number;
  modelLoads: number;
}

/** Learner steps lengthened by `sleepMs` (the slowlearn scenario), through the worker's engine seam. */
let learnerSleepMs = 0;
async function loadSleepyLearner(dir: string, o: { device: 'cpu' | 'cuda'; threads?: number }): Promise<LearnerHandle> {
  const { Learner } = await import('../gpu-learner/index.ts');
  const l: LearnerHandle = await Learner.load(dir, o);
  return new Proxy(l, {
    get(target, prop) {
      // getters run on the Learner itself: `decoder` reads a private field, which the proxy does not have
      const v = Reflect.get(target, prop) as unknown;
      if (prop === 'trainStep') {
        return async (...a: Parameters<LearnerHandle['trainStep']>) => {
          if (learnerSleepMs) await new Promise((r) => setTimeout(r, learnerSleepMs));
          return target.trainStep(...a);
        };
      }
      return typeof v === 'function' ? (v as (...x: unknown[]) => unknown).bind(target) : v;
    },
  });
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
const sd = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));
const third = (xs: number[], which: 'first' | 'last') => {
  const k = Math.max(1, Math.floor(xs.length / 3));
  return which === 'first' ? xs.slice(0, k) : xs.slice(-k);
};
const loadsNow = async () => (await policyModelLoads.get()).values.reduce((a, v) => a + v.value, 0);

Runtime.install({ logger: new DefaultLogger('WARN') });
const dir = mkdtempSync(join(tmpdir(), 'swerl-bench-async-'));
const server = await startDevServer({ dir, uiPort: null });
let workers: RunningWorkers | null = null;
const connection = await Connection.connect({ address: server.address });
const client = new Client({ connection });
const results: Result[] = [];
const started = Date.now();
// interrupted: stop the dev server this process started (it is a child process), then go
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    void server.stop().finally(() => process.exit(130));
  });
}
try {
  workers = await startWorkers({
    address: server.address,
    queues: ['learner', 'rollout'],
    learner: { threads: 1, loadLearner: loadSleepyLearner, policyModels: 6 },
    maxConcurrentRollouts: 512,
    sandboxSweepSeconds: 0,
  });
  const runs = plan();
  console.log(`${runs.length} runs: ${TASKS} tasks × ${SAMPLES} samples, ${ITERATIONS} iterations (plain), ${TAIL_ITERATIONS} (longtail, slowlearn)`);
  if (args.quick) {
    console.log(
      '--quick: NOT run: slowlearn; pump η=1 (both orders) and η=2 streaming on the long tail, and more than 1 seed of it; one-step, pump η=1, 2 and η=4 streaming on plain; the ablation in streaming order',
    );
  }
  for (const [i, p] of runs.entries()) {
    const runId = `${p.scenario}-${p.mode.name.replace(/[^A-Za-z0-9]+/g, '-')}-s${p.seed}`;
    const storeUrl = fileStoreUrl(join(dir, 'store'));
    learnerSleepMs = p.scenario === 'slowlearn' ? LEARNER_SLEEP_MS : 0;
    const loads0 = await loadsNow();
    const t0 = Date.now();
    const r: TrainingRunResult = await client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [configOf(p, runId, storeUrl)] });
    const wallSeconds = (Date.now() - t0) / 1000;
    const text = (await openStore(storeUrl).get(keys.metrics(runId)))!.toString('utf8');
    const m = text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as IterationMetrics)
      .sort((a, b) => a.iteration - b.iteration);
    const trainedSamples = m.reduce((a, x) => a + x.learnerTrajectories, 0);
    // a run whose rollouts all failed trains nothing: its figures would mean nothing
    if (trainedSamples === 0)
      throw new Error(`${runId} trained no sample: ${m.find((x) => x.rolloutFailures?.length)?.rolloutFailures?.[0]?.error ?? 'no rollout failure recorded'}`);
    const res: Result = {
      scenario: p.scenario,
      mode: p.mode.name,
      seed: p.seed,
      wallSeconds,
      trainedSamples,
      secondsPerSample: wallSeconds / trainedSamples,
      success: m.map((x) => x.successRate),
      gradNorm: m.map((x) => x.gradNorm),
      k3: m.map((x) => x.mismatch?.k3 ?? 0),
      staleness: m.map((x) => x.mismatch?.staleness?.mean ?? 0),
      bound: p.mode.async?.mode === 'pump' ? p.mode.async.maxStaleness : p.mode.async?.mode === 'one-step' ? 1 : 0,
      maxStaleness: Math.max(0, ...m.map((x) => x.mismatch?.staleness?.max ?? 0)),
      modelLoads: (await loadsNow()) - loads0,
    };
    results.push(res);
    console.log(
      `[${i + 1}/${runs.length}] ${p.scenario.padEnd(9)} ${p.mode.name.padEnd(26)} seed ${p.seed}: ${wallSeconds.toFixed(1)} s, ` +
        `${(1000 * res.secondsPerSample).toFixed(1)} ms/sample, success ${mean(third(res.success, 'last')).toFixed(3)} (last third), ` +
        `staleness ≤ ${res.maxStaleness}, model loads ${res.modelLoads}, ${r.iterations} steps`,
    );
  }
} finally {
  await connection.close();
  await workers?.shutdown();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}

// ---- report ------------------------------------------------------------------------------------------------
const of = (scenario: Scenario, mode: string) => results.filter((r) => r.scenario === scenario && r.mode === mode);
const modesIn = (scenario: Scenario) => [...new Set(results.filter((r) => r.scenario === scenario).map((r) => r.mode))];
console.log(`\nwall time per trained sample (mean over seeds), speedup = sync / mode in the same scenario; total ${((Date.now() - started) / 60000).toFixed(1)} min`);
const speedups: Record<string, Record<string, number>> = {};
for (const scenario of ['plain', 'longtail', 'slowlearn'] as Scenario[]) {
  const sync = mean(of(scenario, 'sync').map((r) => r.secondsPerSample));
  if (!sync) continue;
  speedups[scenario] = {};
  console.log(`  ${scenario}`);
  for (const mode of modesIn(scenario)) {
    const x = mean(of(scenario, mode).map((r) => r.secondsPerSample));
    speedups[scenario]![mode] = sync / x;
    console.log(`    ${mode.padEnd(26)} ${(1000 * x).toFixed(1).padStart(7)} ms/sample  ${(sync / x).toFixed(2)}×`);
  }
}

// Stability on plain FrozenLake. A step's success rate is that of the policy its batch was sampled from: checkpoint
// n − η for step n of the pump in admission order, not checkpoint n. Compared step by step, a stale mode would be
// charged η steps of learning it did do; so success is compared per checkpoint (the policy after c learner steps,
// i.e. c batches of trained samples), over the last third of the checkpoints every run sampled from. Growth of the
// gradient norm and of the mismatch KL is measured after the ramp: in the first η steps the staleness itself rises
// from 0 to η by construction, so k3 grows there in any stable run. The step-by-step view is printed beside it.
const failures: string[] = [];
const syncRuns = of('plain', 'sync');
/** checkpoint → the success rates of the batches sampled from it (streaming: the checkpoint nearest its tokens' mean) */
const byCheckpoint = (r: Result) => {
  const m = new Map<number, number[]>();
  r.success.forEach((x, n) => {
    const c = n - Math.round(r.staleness[n] ?? 0);
    m.set(c, [...(m.get(c) ?? []), x]);
  });
  return m;
};
const checkpointsOf = new Map(results.filter((r) => r.scenario === 'plain').map((r) => [r, byCheckpoint(r)]));
const maps = [...checkpointsOf.values()];
const common = maps.length ? [...maps[0]!.keys()].filter((c) => maps.every((m) => m.has(c))).sort((a, b) => a - b) : [];
const window = third(common, 'last');
const windowSuccess = (r: Result) => mean(window.map((c) => mean(checkpointsOf.get(r)!.get(c)!)));
const stepLastThird = (r: Result) => mean(third(r.success, 'last'));
const afterRamp = (r: Result, xs: number[]) => xs.slice(Math.min(r.bound, xs.length - 1));
const syncWin = syncRuns.map(windowSuccess);
const margin = Math.max(0.05, 2 * sd(syncWin));
console.log(
  `\nstability (plain, ${SEEDS.length} seeds): success rate of checkpoints ${window[0] ?? '-'}–${window[window.length - 1] ?? '-'} (the last third every run sampled from), ` +
    `sync ${mean(syncWin).toFixed(3)} ± ${sd(syncWin).toFixed(3)}; allowed below it: ${margin.toFixed(3)}; grad norm and k3 from the first third to the last after the ramp (step η on)`,
);
for (const mode of modesIn('plain')) {
  const rs = of('plain', mode);
  const s = mean(rs.map(windowSuccess));
  const below = mean(syncWin) - s;
  const g0 = mean(rs.flatMap((r) => third(afterRamp(r, r.gradNorm), 'first')));
  const g1 = mean(rs.flatMap((r) => third(afterRamp(r, r.gradNorm), 'last')));
  const k0 = mean(rs.flatMap((r) => third(afterRamp(r, r.k3), 'first')));
  const k1 = mean(rs.flatMap((r) => third(afterRamp(r, r.k3), 'last')));
  // growth: the last third above 1.5 × the first, beyond a floor that rounding and early noise stay under
  const gradGrew = g1 > 1.5 * g0 + 0.05;
  const klGrew = k1 > 1.5 * k0 + 0.01;
  // the correction ablation's "none" is the baseline the corrections are measured against, not a mode offered for use
  const ablationBaseline = mode.endsWith(' none');
  const ok = below <= margin && !gradGrew && !klGrew;
  if (!ok && !ablationBaseline) failures.push(mode);
  console.log(
    `  ${mode.padEnd(26)} success ${s.toFixed(3)} (${below > 0 ? '−' : '+'}${Math.abs(below).toFixed(3)}; step by step, last third: ${mean(rs.map(stepLastThird)).toFixed(3)}), ` +
      `grad norm ${g0.toFixed(3)} → ${g1.toFixed(3)}, k3 ${k0.toExponential(1)} → ${k1.toExponential(1)}  ${ok ? 'ok' : ablationBaseline ? 'below (ablation baseline)' : 'FAIL'}`,
  );
}
const tail = speedups.longtail ?? {};
const pumps = Object.entries(tail).filter(([m]) => m.startsWith('pump'));
const best = pumps.sort((a, b) => b[1] - a[1])[0];
if (args.json) writeFileSync(args.json, JSON.stringify({ results, speedups, stabilityFailures: failures }, null, 2));
console.log(`best pump on the long tail: ${best ? best[0] : 'none'}; one-step ${tail['one-step']?.toFixed(2) ?? '-'}×`);
console.log(`pump speedup: ${best ? best[1].toFixed(2) : 'n/a'}`);
console.log(`stability: ${failures.length === 0 && syncRuns.length > 0 ? 'ok' : `FAIL${failures.length ? ` (${failures.join(', ')})` : ''}`}`);
