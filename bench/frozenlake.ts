// GRPO++ vs plain GRPO on FrozenLake, in process (no Temporal): Learner + FrozenLakeEnv + the shared
// episode loop through the in-process PolicyClient. Same model seed and task seeds for both; prints
// the iterations each needs to reach a success threshold over a window, and their ratio.
//
//   npm run bench:frozenlake -- [--iterations 40] [--tasks 16] [--samples 8] [--modes grpo++,grpo]
//                               [--threshold 0.6] [--window 3] [--seed 1] [--out bench/out/frozenlake]

import { parseArgs } from 'node:util';
import { mkdir, mkdtemp, rm, writeFile, appendFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { FrozenLakeConfigSchema, frozenLakeFromTaskId, frozenLakeTaskIds } from '../lib/envs/frozenlake.ts';
import { hashInts } from '../lib/seed.ts';
import { runEpisode } from '../lib/episode.ts';
import { buildTrainBatch, groupAdvantages, summariseIteration, type AdvantageEstimator, type EpisodeSummary } from '../lib/grpo.ts';
import { createInProcessPolicyClient } from '../lib/policy/completions.ts';
import { writeRewardPlot } from '../lib/plot.ts';
import { writeModel } from '../lib/presets.ts';
import { loadTokenizer } from '../lib/tokenizer.ts';

/** Recommended FrozenLake training settings (configs/frozenlake.json takes these). */
export const FROZENLAKE_DEFAULTS = {
  env: FrozenLakeConfigSchema.parse({ size: 3, holeProbability: 0.1, maxSteps: 6 }),
  tasksPerIteration: 16,
  samplesPerTask: 8,
  iterations: 30,
  maxTokensPerTurn: 1,
  maxResponseTokens: 6,
  temperature: 1.0,
  topP: 1.0,
  allowedActionTokens: true,
  optimizer: { lr: 3e-3, weightDecay: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, maxGradNorm: 1.0 },
};

type Mode = 'grpo++' | 'grpo';
const MODES: Record<Mode, { estimator: AdvantageEstimator; clipLow: number; clipHigh: number }> = {
  'grpo++': { estimator: 'loo', clipLow: 0.2, clipHigh: 0.28 },
  grpo: { estimator: 'grpo', clipLow: 0.2, clipHigh: 0.2 },
};

export interface BenchOptions {
  mode: Mode;
  iterations: number;
  tasks: number;
  samples: number;
  seed: number;
  modelSeed: number;
  lr: number;
  temperature: number;
  threads: number;
  concurrency: number;
  metricsPath?: string;
  log?: (line: string) => void;
}

export interface IterationRecord {
  iteration: number;
  meanReward: number;
  successRate: number;
  loss: number;
  gradNorm: number;
  clipFraction: number;
  responseTokens: number;
  rolloutSeconds: number;
  trainSeconds: number;
}

/** Runs one training run and returns its per-iteration records. */
export async function trainFrozenLake(o: BenchOptions): Promise<IterationRecord[]> {
  const { Learner } = await import('../gpu-learner/index.ts');
  const work = await mkdtemp(join(tmpdir(), `fl-bench-${o.mode.replace('+', 'p')}-`));
  try {
    await writeModel(join(work, 'model'), 'frozenlake', o.modelSeed);
    const tokenizer = await loadTokenizer(join(work, 'model'));
    const learner = await Learner.load(join(work, 'model'), { device: 'cpu', threads: o.threads });
    const policy = createInProcessPolicyClient(learner);
    const d = FROZENLAKE_DEFAULTS;
    const m = MODES[o.mode];
    const records: IterationRecord[] = [];
    for (let it = 0; it < o.iterations; it++) {
      const t0 = performance.now();
      const taskIds = frozenLakeTaskIds(o.tasks, o.seed, it);
      const jobs = taskIds.flatMap((taskId, ti) => Array.from({ length: o.samples }, (_, s) => ({ taskId, ti, s })));
      const results = new Array(jobs.length);
      let next = 0;
      const worker = async () => {
        while (next < jobs.length) {
          const k = next++;
          const { taskId, ti, s } = jobs[k];
          const env = frozenLakeFromTaskId(taskId, d.env, hashInts(o.seed, it, ti, s));
          const r = await runEpisode({
            env,
            policy,
            tokenizer,
            maxSteps: d.env.maxSteps,
            maxResponseTokens: d.maxResponseTokens,
            maxTokensPerTurn: d.maxTokensPerTurn,
            sampling: { temperature: o.temperature, topP: d.topP },
            seed: hashInts(o.seed, it, ti, s, 0xe9),
            allowedActionTokens: d.allowedActionTokens,
          });
          await env.close();
          results[k] = { ...r, taskId, sample: s };
        }
      };
      await Promise.all(Array.from({ length: o.concurrency }, worker));
      const t1 = performance.now();
      const summaries: EpisodeSummary[] = results.map((r) => ({
        taskId: r.taskId,
        sample: r.sample,
        reward: r.reward,
        end: r.end,
        tokens: r.ids.length,
        responseTokens: r.responseTokens,
        steps: r.steps,
      }));
      const adv = groupAdvantages(summaries, m.estimator);
      const batch = buildTrainBatch(results, adv);
      const step = await learner.trainStep(
        { ids: batch.ids, offsets: batch.offsets, mask: batch.mask, advantages: batch.advantages },
        { ...d.optimizer, lr: o.lr, clipLow: m.clipLow, clipHigh: m.clipHigh, lMax: d.maxResponseTokens, mode: o.mode },
      );
      const t2 = performance.now();
      const s = summariseIteration(summaries);
      const rec: IterationRecord = {
        iteration: it,
        meanReward: s.meanReward,
        successRate: s.successRate,
        loss: step.loss,
        gradNorm: step.gradNorm,
        clipFraction: step.clipFraction,
        responseTokens: s.responseTokens,
        rolloutSeconds: (t1 - t0) / 1000,
        trainSeconds: (t2 - t1) / 1000,
      };
      records.push(rec);
      if (o.metricsPath) await appendFile(o.metricsPath, JSON.stringify({ mode: o.mode, ...rec, ends: s.ends }) + '\n');
      o.log?.(
        `${o.mode.padEnd(6)} it ${String(it).padStart(3)}  success ${s.successRate.toFixed(3)}  loss ${step.loss.toFixed(5)}  |g| ${step.gradNorm.toFixed(3)}  clip ${step.clipFraction.toFixed(3)}  ends ${JSON.stringify(s.ends)}  ${rec.rolloutSeconds.toFixed(1)}s+${rec.trainSeconds.toFixed(1)}s`,
      );
    }
    learner.close?.();
    return records;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** First iteration at which the mean success over the trailing `window` iterations reaches `threshold`. */
export function iterationsToThreshold(success: number[], threshold: number, window: number): number | null {
  for (let i = window - 1; i < success.length; i++) {
    const w = success.slice(i - window + 1, i + 1);
    if (w.reduce((a, b) => a + b, 0) / window >= threshold) return i + 1;
  }
  return null;
}

async function main() {
  const { values } = parseArgs({
    options: {
      iterations: { type: 'string', default: String(FROZENLAKE_DEFAULTS.iterations) },
      tasks: { type: 'string', default: String(FROZENLAKE_DEFAULTS.tasksPerIteration) },
      samples: { type: 'string', default: String(FROZENLAKE_DEFAULTS.samplesPerTask) },
      modes: { type: 'string', default: 'grpo++,grpo' },
      threshold: { type: 'string', default: '0.5' },
      window: { type: 'string', default: '3' },
      seed: { type: 'string', default: '1' },
      'model-seed': { type: 'string', default: '0' },
      lr: { type: 'string', default: String(FROZENLAKE_DEFAULTS.optimizer.lr) },
      temperature: { type: 'string', default: String(FROZENLAKE_DEFAULTS.temperature) },
      threads: { type: 'string', default: '1' },
      concurrency: { type: 'string', default: '1' },
      out: { type: 'string', default: 'bench/out/frozenlake' },
    },
  });
  const modes = values.modes.split(',').map((s) => s.trim()) as Mode[];
  for (const mo of modes) if (!(mo in MODES)) throw new Error(`--modes: unknown mode ${JSON.stringify(mo)} (grpo++ or grpo)`);
  const out = resolve(values.out);
  await mkdir(out, { recursive: true });
  const threshold = Number(values.threshold);
  const window = Number(values.window);
  const reached: Partial<Record<Mode, number | null>> = {};
  const curves: Partial<Record<Mode, number[]>> = {};
  for (const mode of modes) {
    const metricsPath = join(out, `${mode.replace('+', 'p')}.jsonl`);
    await writeFile(metricsPath, '');
    const start = performance.now();
    const recs = await trainFrozenLake({
      mode,
      iterations: Number(values.iterations),
      tasks: Number(values.tasks),
      samples: Number(values.samples),
      seed: Number(values.seed),
      modelSeed: Number(values['model-seed']),
      lr: Number(values.lr),
      temperature: Number(values.temperature),
      threads: Number(values.threads),
      concurrency: Number(values.concurrency),
      metricsPath,
      log: (l) => console.log(l),
    });
    const success = recs.map((r) => r.successRate);
    curves[mode] = success;
    reached[mode] = iterationsToThreshold(success, threshold, window);
    const fifth = Math.max(1, Math.floor(success.length / 5));
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    console.log(
      `${mode}: ${((performance.now() - start) / 1000).toFixed(0)}s, first fifth ${mean(success.slice(0, fifth)).toFixed(3)}, last fifth ${mean(success.slice(-fifth)).toFixed(3)}, reached ${threshold} (window ${window}) at ${reached[mode] ?? 'never'}`,
    );
    const [html] = await writeRewardPlot(metricsPath, join(out, `${mode.replace('+', 'p')}.html`), `FrozenLake ${mode}`);
    console.log(`plot: ${html}`);
  }
  const a = reached['grpo++'];
  const b = reached.grpo;
  console.log(JSON.stringify({ threshold, window, iterationsToThreshold: reached, curves }));
  if (a != null && b != null) console.log(`GRPO iterations / GRPO++ iterations = ${(b / a).toFixed(2)}`);
  else if (a != null) console.log(`GRPO++ reached the threshold at ${a}; GRPO did not within ${values.iterations} (ratio > ${(Number(values.iterations) / a).toFixed(2)})`);
  else console.log('ratio: undefined (GRPO++ did not reach the threshold)');
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith('bench/frozenlake.ts')) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
