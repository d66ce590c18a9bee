// Issue 29's recipe, SWE-RL at small scale: configs/swe-rl.json (edit mode, similarity reward, GRPO++) trains an
// imported model (Qwen2.5-Coder-0.5B-Instruct from `swerl model import`) on the training split of a factory task
// set, then evaluates checkpoint 0 and the last checkpoint on the held-out split (repositories never trained on).
//
//   npm run bench:learning -- --tasks DIR --model DIR [--config configs/swe-rl.json] [--iterations N]
//                             [--eval-runs 2] [--no-eval] [--vllm] [--out bench/out/learning]
//
// --vllm samples the rollouts with vLLM (its CPU build, fp32, started here from --model) instead of the learner
// worker's batching server: the config's `policy` becomes { baseUrl, model: "policy", weightSync: "vllm" }, so
// every learner step is synced into vLLM and verified by the probe (docs/swe-training.md). The held-out evaluation
// serves the checkpoints with our server either way.
//
// DIR of --tasks is `swerl tasks synth --repos FILE --out DIR`'s output (train.jsonl, validation.jsonl; the team
// makes it from the benchmark repositories outside the clone, a user from any repositories file in that format).
// Prints per iteration the mean reward, valid-edit and exact-fix rates, tokens per second and the time split; then
// each checkpoint's held-out mean reward, valid-edit rate and pass@1 by tests with bootstrap 95% intervals over tasks,
// and the paired difference. The last four lines are the base and trained checkpoints and the two held-out lines.
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { train, type TrainOutcome } from '../scripts/commands/train.ts';
import { evaluate } from '../scripts/commands/eval.ts';
import { fileStoreUrl, keys, openStore } from '../lib/store.ts';
import { bootstrapDiffCI, bootstrapMeanCI } from '../lib/eval/metrics.ts';
import { readEvalEpisodes, type EvalEpisodeRecord } from '../activities/evaluation.ts';
import type { Trajectory } from '../lib/types.ts';
import type { IterationMetrics } from '../lib/training/shapes.ts';
import { validateConfig, type TrainingConfig } from '../lib/config.ts';
import { startVllm, type VllmServer } from '../services/vllm.ts';

const { values } = parseArgs({
  options: {
    config: { type: 'string', default: 'configs/swe-rl.json' },
    tasks: { type: 'string' },
    model: { type: 'string' },
    iterations: { type: 'string' },
    'eval-runs': { type: 'string', default: '2' },
    'no-eval': { type: 'boolean', default: false },
    vllm: { type: 'boolean', default: false },
    out: { type: 'string', default: 'bench/out/learning' },
  },
});

/** Valid-edit and exact-fix rates and the rewards of one iteration, read from its trajectories in the store. */
function iterationEdits(storeUrl: string, runId: string, iteration: number): { valid: number; localized: number; exact: number; episodes: number; rewards: number[] } {
  const dir = openStore(storeUrl).dirFor(keys.trajectories(runId, iteration));
  let valid = 0;
  let localized = 0;
  let exact = 0;
  const rewards: number[] = [];
  if (!existsSync(dir)) return { valid: 0, localized: 0, exact: 0, episodes: 0, rewards };
  for (const task of readdirSync(dir))
    for (const f of readdirSync(join(dir, task)).filter((n) => n.endsWith('.json'))) {
      const t = JSON.parse(readFileSync(join(dir, task, f), 'utf8')) as Trajectory;
      rewards.push(t.reward);
      if (t.info?.editOutcome === 'valid') valid++;
      if (Number(t.info?.localized ?? 0) > 0) localized++;
      // the patch's changes are the gold's (the located similarity, whatever the block's header: SWE-RL's own rule
      // gives a fence without `### PATH` −1 even then)
      if (t.info?.editOutcome === 'valid' && t.info?.similarity === 1) exact++;
    }
  const n = rewards.length;
  return { valid: n ? valid / n : 0, localized: n ? localized / n : 0, exact: n ? exact / n : 0, episodes: n, rewards };
}

/** The training curve's trend: the episodes' mean reward in the last third of the iterations against the first third's. */
function printTrend(o: TrainOutcome, storeUrl: string): void {
  const its = o.metrics.map((m) => m.iteration);
  const third = Math.floor(its.length / 3);
  if (third < 1) return void console.log('training trend: fewer than 3 iterations');
  const rewardsOf = (xs: number[]) => xs.flatMap((i) => iterationEdits(storeUrl, o.runId, i).rewards);
  const first = rewardsOf(its.slice(0, third));
  const last = rewardsOf(its.slice(its.length - third));
  const d = bootstrapDiffCI(first, last, { samples: 2000, seed: 0 });
  console.log(
    `training trend: mean reward of the first third ${mean(first).toFixed(3)} (${first.length} episodes) -> last third ${mean(last).toFixed(3)} ` +
      `(${last.length}) (difference ${(mean(last) - mean(first)).toFixed(3)}, 95% CI ${d ? `[${d.low.toFixed(3)}, ${d.high.toFixed(3)}]` : '[-, -]'})`,
  );
}

/** An iteration's line, printed as its metrics land (the trajectories are in the store by then). */
function printIteration(m: IterationMetrics, runId: string, storeUrl: string): void {
  const e = iterationEdits(storeUrl, runId, m.iteration);
  const tps = m.iterationSeconds > 0 ? m.tokens / m.iterationSeconds : 0;
  console.log(
    `iter ${m.iteration}: mean reward ${m.meanReward.toFixed(3)}  valid edits ${(100 * e.valid).toFixed(1)}%  in the faulty function ${(100 * e.localized).toFixed(1)}%  exact fixes ${(100 * e.exact).toFixed(1)}%  ` +
      `${tps.toFixed(0)} tokens/s (${m.tokens} tokens, ${m.responseTokens} sampled)  time ${m.iterationSeconds.toFixed(1)}s = rollouts ${m.rolloutSeconds.toFixed(1)}s + learner ${m.learnerSeconds.toFixed(1)}s + orchestration ${m.orchestrationSeconds.toFixed(1)}s`,
  );
}

/**
 * A checkpoint of the 0.5B model is 7.5 GB (weights and AdamW moments): the bench keeps checkpoint 0 and the newest
 * two whole (a resumed step reads the newest; the held-out evaluation reads 0 and the last) and drops the weights
 * and moments of the others, whose stats.json and tokenizer stay.
 */
function pruneCheckpoints(storeUrl: string): void {
  const root = dirname(openStore(storeUrl).dirFor(keys.checkpoint('x', 0)));
  const runs = dirname(dirname(root));
  if (!existsSync(runs)) return;
  for (const run of readdirSync(runs)) {
    const dir = join(runs, run, 'ckpt');
    if (!existsSync(dir)) continue;
    const ns = readdirSync(dir)
      .filter((n) => /^\d+$/.test(n))
      .map(Number)
      .sort((a, b) => a - b);
    for (const n of ns.slice(1, -2)) for (const f of ['model.safetensors', 'optimizer.bin']) rmSync(join(dir, String(n), f), { force: true });
  }
}

/** Per-task means of `f` over an evaluation's episodes. */
function perTask(eps: EvalEpisodeRecord[], f: (e: EvalEpisodeRecord) => number): Map<string, number> {
  const sums = new Map<string, { s: number; n: number }>();
  for (const e of eps) {
    const a = sums.get(e.taskId) ?? { s: 0, n: 0 };
    a.s += f(e);
    a.n++;
    sums.set(e.taskId, a);
  }
  return new Map([...sums].map(([k, v]) => [k, v.s / v.n]));
}

const ci = (xs: number[]) => {
  const i = bootstrapMeanCI(xs, { samples: 2000, seed: 0 });
  return i ? `[${i.low.toFixed(3)}, ${i.high.toFixed(3)}]` : '[-, -]';
};
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** Evaluates one checkpoint of the run on the held-out split in edit mode; returns its episodes. */
async function heldOut(config: TrainingConfig, runId: string, checkpoint: number, tasksFile: string, storeUrl: string, out: string): Promise<EvalEpisodeRecord[]> {
  if (config.env.kind !== 'swe') throw new Error('config.env.kind: the recipe trains SWE tasks');
  const evalId = `heldout-${runId}-ckpt${checkpoint}`;
  const file = join(out, `${evalId}.json`);
  const e = config.env;
  const evalConfig = {
    evalId,
    tasksFile,
    model: { run: runId, checkpoint },
    mode: 'edit',
    reward: e.reward,
    edit: e.edit,
    runs: Number(values['eval-runs']),
    seed: 1,
    maxSteps: 1,
    // the reply limits the run trained with (the evaluation's own defaults allow 8,192 tokens per turn)
    maxTokensPerTurn: config.episode.maxTokensPerTurn,
    responseBudget: config.episode.responseBudget,
    sampling: { temperature: config.episode.temperature, topP: config.episode.topP },
    store: { url: storeUrl },
  };
  writeFileSync(file, JSON.stringify(evalConfig, null, 2));
  await evaluate({ config: file, out: join(out, evalId), quiet: true });
  return readEvalEpisodes(openStore(storeUrl), evalId);
}

function reportHeldOut(name: string, eps: EvalEpisodeRecord[]): void {
  const r = [...perTask(eps, (e) => e.reward).values()];
  const v = [...perTask(eps, (e) => (e.grade.editOutcome === 'valid' ? 1 : 0)).values()];
  const l = [...perTask(eps, (e) => (Number(e.grade.localized ?? 0) > 0 ? 1 : 0)).values()];
  const p = [...perTask(eps, (e) => (e.resolved ? 1 : 0)).values()];
  console.log(
    `${name}: mean reward ${mean(r).toFixed(3)} ${ci(r)}  valid edits ${mean(v).toFixed(3)} ${ci(v)}  in the faulty function ${mean(l).toFixed(3)} ${ci(l)}  pass@1 ${mean(p).toFixed(3)} ${ci(p)}  (${r.length} tasks)`,
  );
}

async function main() {
  const tasksDir = values.tasks ?? process.env.SWERL_LEARNING_TASKS;
  if (!tasksDir || !existsSync(join(tasksDir, 'train.jsonl')))
    throw new Error('--tasks: a factory task set directory with train.jsonl and validation.jsonl (swerl tasks synth --repos FILE --out DIR)');
  const model = values.model ?? process.env.SWERL_LEARNING_MODEL;
  if (!model || !existsSync(join(model, 'config.json'))) throw new Error('--model: an imported model directory (swerl model import --from qwen2.5-coder-0.5b-instruct --out DIR)');
  const out = resolve(values.out);
  mkdirSync(out, { recursive: true });
  const raw = JSON.parse(readFileSync(values.config, 'utf8')) as Record<string, unknown> & { env: Record<string, unknown> };
  raw.model = { path: resolve(model) };
  raw.env = { ...raw.env, tasksFile: resolve(tasksDir, 'train.jsonl') };
  if (values.iterations !== undefined) raw.iterations = Number(values.iterations);
  const started = Date.now();
  let vllm: VllmServer | null = null;
  if (values.vllm) {
    // the prompt (context budget, issue, template) and the reply fit in 4,096 tokens
    vllm = await startVllm({ model: resolve(model), servedModelName: 'policy', maxModelLen: 4096, logFile: join(out, 'vllm.log') });
    console.log(`vLLM started in ${vllm.startSeconds.toFixed(0)} s at ${vllm.url}: it samples the rollouts, synced after every learner step`);
    raw.policy = { ...(raw.policy as Record<string, unknown> | undefined), baseUrl: vllm.url, model: 'policy', weightSync: 'vllm' };
  }
  const configFile = join(out, 'swe-rl.json');
  writeFileSync(configFile, JSON.stringify(raw, null, 2));

  const storeUrl = (raw.store as { url?: string } | undefined)?.url ?? fileStoreUrl(join(out, 'train', 'store'));
  const pruning = setInterval(() => pruneCheckpoints(storeUrl), 20_000);
  const o = await train({ config: configFile, out: join(out, 'train'), quiet: true, onIteration: (m, runId) => printIteration(m, runId, storeUrl) }).finally(async () => {
    clearInterval(pruning);
    await vllm?.close();
  });
  pruneCheckpoints(storeUrl);
  printTrend(o, storeUrl);
  console.log(`training: ${o.metrics.length} iterations in ${((Date.now() - started) / 60000).toFixed(1)} min; metrics ${o.metricsPath}; plot ${o.plotPaths.join(' ')}`);
  const last = o.result.checkpoint;
  const store = openStore(storeUrl);
  if (!values['no-eval']) {
    const validation = resolve(tasksDir, 'validation.jsonl');
    const v = validateConfig(raw);
    if (!v.ok) throw new Error(v.errors.join('; '));
    const config = v.config;
    const base = await heldOut(config, o.runId, 0, validation, storeUrl, out);
    const trained = await heldOut(config, o.runId, last, validation, storeUrl, out);
    reportHeldOut('held-out, checkpoint 0', base);
    reportHeldOut(`held-out, checkpoint ${last}`, trained);
    const rb = perTask(base, (e) => e.reward);
    const rt = perTask(trained, (e) => e.reward);
    const diff = [...rb.keys()].filter((k) => rt.has(k)).map((k) => rt.get(k)! - rb.get(k)!);
    const pb = mean([...perTask(base, (e) => (e.resolved ? 1 : 0)).values()]);
    const pt = mean([...perTask(trained, (e) => (e.resolved ? 1 : 0)).values()]);
    console.log(`base checkpoint: ${store.dirFor(keys.checkpoint(o.runId, 0))}`);
    console.log(`trained checkpoint: ${store.dirFor(keys.checkpoint(o.runId, last))}`);
    console.log(
      `held-out mean reward: base ${mean([...rb.values()]).toFixed(3)} -> trained ${mean([...rt.values()]).toFixed(3)} (difference ${mean(diff).toFixed(3)}, 95% CI ${ci(diff)})`,
    );
    console.log(`held-out pass@1: base ${pb.toFixed(3)} -> trained ${pt.toFixed(3)}`);
  } else {
    console.log(`base checkpoint: ${store.dirFor(keys.checkpoint(o.runId, 0))}`);
    console.log(`trained checkpoint: ${store.dirFor(keys.checkpoint(o.runId, last))}`);
    console.log('held-out mean reward: not evaluated (--no-eval)');
    console.log('held-out pass@1: not evaluated (--no-eval)');
  }
}

await main();
