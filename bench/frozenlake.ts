// FrozenLake training in process (no Temporal): the demo's config (configs/frozenlake.json by default) run with
// the same task ids, rollout seeds, advantages, batch and learner hyperparameters as `npm run demo`'s
// rlIteration, through the shared episode loop and the in-process policy client, so one run here is the demo's
// curve in a fraction of its time. Compares GRPO++ with plain GRPO, and prints per iteration what the tuning of
// the demo looked at: outcomes (goal, hole, out of steps), zero-advantage groups, the sampled tokens' mean
// negative log-prob (an entropy estimate) and the learner's step.
//
//   npm run bench:frozenlake -- [--config configs/frozenlake.json] [--set algorithm.lr=0.01 ...]
//                               [--modes config|grpo++,grpo] [--iterations N] [--threshold 0.8] [--window 3]
//                               [--threads 2] [--concurrency 16] [--out bench/out/frozenlake]

import { parseArgs } from 'node:util';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile, appendFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { frozenLakeFromTaskId, frozenLakeTaskIds, type FrozenLakeConfig } from '../lib/envs/frozenlake.ts';
import { rolloutSeed } from '../lib/seed.ts';
import { runEpisode, tokenTransport, type EpisodePolicy, type EpisodeTokenizer, type TokenEpisodeResult } from '../lib/episode.ts';
import { buildTrainBatch, groupAdvantages, summariseIteration, type EpisodeSummary } from '../lib/grpo.ts';
import { validateConfig, type TrainingConfig } from '../lib/config.ts';
import { createInProcessPolicyClient } from '../lib/policy/completions.ts';
import { writeRewardPlot } from '../lib/plot.ts';
import { writeModel } from '../lib/model-init.ts';
import { loadTokenizer } from '../lib/tokenizer.ts';
import { trainHyper } from '../activities/learner.ts';

type Mode = 'config' | 'grpo++' | 'grpo';
/** What each compared algorithm sets in the config ('config' keeps the config's own). */
const MODES: Record<Mode, Partial<TrainingConfig['algorithm']>> = {
  config: {},
  'grpo++': { advantage: 'loo', loss: 'grpo++', clipLow: 0.2, clipHigh: 0.28 },
  grpo: { advantage: 'grpo', loss: 'grpo', clipLow: 0.2, clipHigh: 0.2 },
};

export interface BenchOptions {
  threads: number;
  concurrency: number;
  /** held-out maps evaluated after training (0: none) */
  evalMaps?: number;
  onHeldOut?: (h: HeldOut) => void;
  metricsPath?: string;
  log?: (line: string) => void;
}

/** One FrozenLake episode of task `taskId` as a rollout runs it (actions only), the run's sampling unless `over` says. */
async function flEpisode(
  config: TrainingConfig,
  envConfig: FrozenLakeConfig & { maxSteps: number },
  model: { policy: EpisodePolicy; tokenizer: EpisodeTokenizer },
  taskId: string,
  seed: number,
  over: { maxTokensPerTurn?: number; sampling?: { temperature: number; topP: number } } = {},
) {
  const env = frozenLakeFromTaskId(taskId, envConfig, seed);
  try {
    return await runEpisode({
      env,
      transport: tokenTransport({ ...model, allowedActionTokens: true }),
      maxSteps: envConfig.maxSteps,
      responseBudget: config.episode.responseBudget,
      maxTokensPerTurn: over.maxTokensPerTurn ?? config.episode.maxTokensPerTurn,
      sampling: over.sampling ?? { temperature: config.episode.temperature, topP: config.episode.topP },
      seed,
    });
  } finally {
    await env.close();
  }
}

/** Success on `maps` held-out maps (iterations 1e6.. of the run's task ids) at the run's temperature and greedy. */
export interface HeldOut {
  maps: number;
  sampled: number;
  greedy: number;
}

export interface IterationRecord {
  iteration: number;
  meanReward: number;
  successRate: number;
  /** episodes per FrozenLake outcome: goal, hole, running (out of steps) */
  outcomes: Record<string, number>;
  zeroAdvantageGroups: number;
  /** mean of −log p over the sampled tokens: an estimate of the policy's entropy per action (ln 4 = 1.386 uniform) */
  sampledNll: number;
  loss: number;
  gradNorm: number;
  clipFraction: number;
  rolloutSeconds: number;
  trainSeconds: number;
}

/** Success on `maps` held-out maps (task ids no iteration draws), sampled at the run's temperature and greedy. */
async function heldOut(
  config: TrainingConfig,
  envConfig: FrozenLakeConfig & { maxSteps: number },
  policy: EpisodePolicy,
  tokenizer: EpisodeTokenizer,
  maps: number,
): Promise<{ maps: number; sampled: number; greedy: number }> {
  const ids = frozenLakeTaskIds(maps, config.seed, 1_000_000);
  const success = async (temperature: number) => {
    let won = 0;
    for (const [k, taskId] of ids.entries()) {
      const r = await flEpisode(config, envConfig, { policy, tokenizer }, taskId, k, { maxTokensPerTurn: 1, sampling: { temperature, topP: 1 } });
      won += r.reward >= 1 ? 1 : 0;
    }
    return won / ids.length;
  };
  return { maps: ids.length, sampled: await success(config.episode.temperature), greedy: await success(0) };
}

/** Runs `config` (a FrozenLake training config) in process and returns its per-iteration records. */
export async function trainFrozenLake(config: TrainingConfig, o: BenchOptions): Promise<IterationRecord[]> {
  if (config.env.kind !== 'frozenlake') throw new Error(`config.env.kind: the bench runs FrozenLake, got ${JSON.stringify(config.env.kind)}`);
  if (!('preset' in config.model) && !('path' in config.model)) throw new Error('config.model: the bench starts from a preset or a model directory');
  const { kind: _kind, ...envConfig } = config.env;
  const { Learner } = await import('../gpu-learner/index.ts');
  const work = await mkdtemp(join(tmpdir(), 'fl-bench-'));
  try {
    // a model directory is copied: the learner trains in place
    const model = join(work, 'model');
    if ('preset' in config.model) await writeModel(model, config.model.preset, config.model.seed);
    else await cp(config.model.path, model, { recursive: true });
    const tokenizer = await loadTokenizer(model);
    const learner = await Learner.load(model, { device: 'cpu', threads: o.threads });
    const policy = createInProcessPolicyClient(learner);
    const records: IterationRecord[] = [];
    for (let it = 0; it < config.iterations; it++) {
      const t0 = performance.now();
      // as rlIteration: the batch's task ids, then samples in order, each episode seeded like the rollout activity
      const jobs = frozenLakeTaskIds(config.batch.tasks, config.seed, it).flatMap((taskId) => Array.from({ length: config.batch.samples }, (_, sample) => ({ taskId, sample })));
      const results: (TokenEpisodeResult & { taskId: string; sample: number })[] = new Array(jobs.length);
      let next = 0;
      const worker = async () => {
        while (next < jobs.length) {
          const k = next++;
          const { taskId, sample } = jobs[k]!;
          const seed = rolloutSeed(config.seed, it, taskId, sample);
          const r = await flEpisode(config, envConfig, { policy, tokenizer }, taskId, seed);
          results[k] = { ...r, taskId, sample };
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
      const adv = groupAdvantages(summaries, config.algorithm.advantage);
      // as the learner step: compact filtering, zero-advantage sequences left out but counted in N
      const batch = buildTrainBatch(results, adv, { compactFilter: true, dropZeroAdvantage: true });
      const step =
        batch.kept.length > 0
          ? await learner.trainStep(batch, trainHyper(config, batch.episodes))
          : { loss: 0, gradNorm: 0, clipFraction: 0, meanRatio: 0, tokens: 0, seconds: 0, skipped: true };
      const t2 = performance.now();
      const s = summariseIteration(summaries);
      const outcomes: Record<string, number> = {};
      let nll = 0;
      let sampled = 0;
      for (const r of results) {
        const outcome = String(r.info.outcome);
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        r.mask.forEach((m, j) => {
          if (m === 1) {
            nll -= r.logprobs[j]!;
            sampled++;
          }
        });
      }
      const rec: IterationRecord = {
        iteration: it,
        meanReward: s.meanReward,
        successRate: s.successRate,
        outcomes,
        zeroAdvantageGroups: s.zeroAdvantageGroups,
        sampledNll: sampled ? nll / sampled : 0,
        loss: step.loss,
        gradNorm: step.gradNorm,
        clipFraction: step.clipFraction,
        rolloutSeconds: (t1 - t0) / 1000,
        trainSeconds: (t2 - t1) / 1000,
      };
      records.push(rec);
      if (o.metricsPath) await appendFile(o.metricsPath, JSON.stringify(rec) + '\n');
      o.log?.(
        `it ${String(it).padStart(3)}  success ${s.successRate.toFixed(3)}  ${JSON.stringify(outcomes)}  zero-adv groups ${s.zeroAdvantageGroups}/${s.groups}  nll ${rec.sampledNll.toFixed(3)}  |g| ${step.gradNorm.toFixed(3)}  clip ${step.clipFraction.toFixed(3)}  ${rec.rolloutSeconds.toFixed(1)}s+${rec.trainSeconds.toFixed(1)}s`,
      );
    }
    if (o.evalMaps) o.onHeldOut?.(await heldOut(config, envConfig, policy, tokenizer, o.evalMaps));
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

/** `path.to.field=value` (a JSON value, else the string) set in a plain config object. */
export function applySetting(raw: Record<string, unknown>, setting: string): void {
  const eq = setting.indexOf('=');
  if (eq <= 0) throw new Error(`--set: expected path=value, got ${JSON.stringify(setting)}`);
  const path = setting.slice(0, eq).split('.');
  const text = setting.slice(eq + 1);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = text;
  }
  let o = raw;
  for (const k of path.slice(0, -1)) {
    if (typeof o[k] !== 'object' || o[k] === null) o[k] = {};
    o = o[k] as Record<string, unknown>;
  }
  o[path.at(-1)!] = value;
}

async function main() {
  const { values } = parseArgs({
    options: {
      config: { type: 'string', default: 'configs/frozenlake.json' },
      set: { type: 'string', multiple: true, default: [] },
      iterations: { type: 'string' },
      modes: { type: 'string', default: 'config' },
      threshold: { type: 'string', default: '0.8' },
      window: { type: 'string', default: '3' },
      threads: { type: 'string', default: '2' },
      concurrency: { type: 'string', default: '16' },
      out: { type: 'string', default: 'bench/out/frozenlake' },
      'eval-maps': { type: 'string', default: '256' },
    },
  });
  const modes = values.modes.split(',').map((s) => s.trim()) as Mode[];
  for (const mo of modes) if (!(mo in MODES)) throw new Error(`--modes: unknown mode ${JSON.stringify(mo)} (config, grpo++ or grpo)`);
  const raw = JSON.parse(await readFile(values.config, 'utf8')) as Record<string, unknown>;
  for (const s of values.set) applySetting(raw, s);
  if (values.iterations !== undefined) raw.iterations = Number(values.iterations);
  const out = resolve(values.out);
  await mkdir(out, { recursive: true });
  const threshold = Number(values.threshold);
  const window = Number(values.window);
  const reached: Partial<Record<Mode, number | null>> = {};
  const curves: Partial<Record<Mode, number[]>> = {};
  for (const mode of modes) {
    const v = validateConfig({ ...raw, algorithm: { ...(raw.algorithm as object), ...MODES[mode] } });
    if (!v.ok) throw new Error(v.errors.join('; '));
    const name = mode.replace('+', 'p').replace('+', 'p');
    const metricsPath = join(out, `${name}.jsonl`);
    await writeFile(metricsPath, '');
    const start = performance.now();
    const recs = await trainFrozenLake(v.config, {
      evalMaps: Number(values['eval-maps']),
      onHeldOut: (h) => console.log(`${mode}: held-out ${h.maps} maps: success ${h.sampled.toFixed(3)} sampled, ${h.greedy.toFixed(3)} greedy`),
      threads: Number(values.threads),
      concurrency: Number(values.concurrency),
      metricsPath,
      log: (l) => console.log(`${mode.padEnd(6)} ${l}`),
    });
    const success = recs.map((r) => r.successRate);
    curves[mode] = success;
    reached[mode] = iterationsToThreshold(success, threshold, window);
    const fifth = Math.max(1, Math.floor(success.length / 5));
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    console.log(
      `${mode}: ${((performance.now() - start) / 1000).toFixed(0)}s, ${recs.length} iterations x ${v.config.batch.tasks * v.config.batch.samples} episodes, first fifth ${mean(success.slice(0, fifth)).toFixed(3)}, last fifth ${mean(success.slice(-fifth)).toFixed(3)}, reached ${threshold} (window ${window}) at ${reached[mode] ?? 'never'}`,
    );
    const [html] = await writeRewardPlot(metricsPath, join(out, `${name}.html`), `FrozenLake ${mode}`);
    console.log(`plot: ${html}`);
  }
  console.log(JSON.stringify({ threshold, window, iterationsToThreshold: reached, curves }));
  const a = reached['grpo++'];
  const b = reached.grpo;
  if (modes.includes('grpo++') && modes.includes('grpo')) {
    if (a != null && b != null) console.log(`GRPO iterations / GRPO++ iterations = ${(b / a).toFixed(2)}`);
    else if (a != null) console.log(`GRPO++ reached the threshold at ${a}; GRPO did not within ${curves.grpo!.length} (ratio > ${(curves.grpo!.length / a).toFixed(2)})`);
    else console.log('ratio: undefined (GRPO++ did not reach the threshold)');
  }
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith('bench/frozenlake.ts')) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
