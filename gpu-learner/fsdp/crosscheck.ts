// Cross-checks of the learners (test-only machinery beside what it tests; used by test/cpu-heavy/torch-oracle.test.ts,
// test/cpu-heavy/fsdp.test.ts and `npm run check:torch`), each giving rows of largest differences per config and quantity.
//   oracle: transformers' causal LM in fp32 (gpu-learner/fsdp/swerl_fsdp/oracle.py) vs the native engine on tiny
//           random checkpoints of each architecture (Qwen3, Llama, Qwen2): packed log-probs, GRPO++ loss, every
//           parameter's gradient; and mutants (a wrong bias, a wrong RoPE theta) the oracle must catch.
//   fsdp:   the FSDP engine on 1 and 2 ranks vs the native engine: loss and grad norm of three AdamW steps and
//           the weights after them.
// Tolerances (fp32 everywhere; the engines differ only in accumulation order and in how the work is split):
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { PackedTrainBatch } from '../../lib/grpo.ts';
import { decodeSafetensors } from '../../lib/safetensors.ts';
import { Learner, writeRandomCheckpoint, type QwenConfig, type TrainHyper } from '../index.ts';
import { FsdpLearner, fsdpPython, writeTrainBatch, type FsdpOptions } from './index.ts';

const here = dirname(fileURLToPath(import.meta.url));

export const TOLERANCE = {
  /** nats, max |Δ| over tokens: fp32 log-softmax over ≤ 512 logits, summation order only */
  logprobs: 1e-5,
  /** relative */
  loss: 1e-5,
  /** relative L2 per tensor: fp32 sums of products over ≤ 200 tokens in another order */
  gradient: 2e-5,
  /** relative, per step */
  gradNorm: 1e-5,
  /** relative L2 of the weight change after three AdamW steps (Adam divides by √v: rounding in small gradients grows) */
  weights: 5e-4,
} as const;

export interface Row {
  check: 'oracle' | 'fsdp' | 'mutant';
  config: string;
  quantity: string;
  diff: number;
  tol: number;
  ok: boolean;
  /** where the largest difference is (tensor name, step) */
  at?: string;
}

const base = { rms_norm_eps: 1e-6, rope_theta: 10000, max_position_embeddings: 256 };
/** a 2-layer shape of hidden 32, 4 heads over 2 KV heads of 8, vocab 97, untied; `o` changes what a config tests */
const small = (o: Partial<QwenConfig>): QwenConfig => ({
  ...base,
  vocab_size: 97,
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  tie_word_embeddings: false,
  ...o,
});
/** Tiny shapes covering the variants real checkpoints use: Qwen3 (q/k norm), Llama (tied, head_dim given and ≠
 *  hidden/heads, theta 1e5 as SmolLM2) and Qwen2 (q/k/v biases, no o bias, head_dim derived, theta 1e6 as Qwen2.5). */
export const ORACLE_CONFIGS: { name: string; config: QwenConfig; writer: 'native' | 'transformers' }[] = [
  { name: 'tied GQA 4/2', writer: 'native', config: small({ tie_word_embeddings: true }) },
  { name: 'untied MQA 4/1', writer: 'native', config: small({ num_key_value_heads: 1 }) },
  {
    name: 'head_dim 12 != 48/6',
    writer: 'native',
    config: small({ vocab_size: 64, hidden_size: 48, intermediate_size: 40, num_attention_heads: 6, num_key_value_heads: 3, head_dim: 12 }),
  },
  { name: 'attention bias', writer: 'native', config: small({ vocab_size: 64, tie_word_embeddings: true, attention_bias: true }) },
  { name: 'written by transformers 5', writer: 'transformers', config: small({ vocab_size: 80 }) },
  {
    name: 'llama tied 6/2 d12 θ1e5',
    writer: 'transformers',
    config: small({
      model_type: 'llama',
      rope_theta: 1e5,
      vocab_size: 90,
      hidden_size: 48,
      intermediate_size: 64,
      num_attention_heads: 6,
      head_dim: 12,
      tie_word_embeddings: true,
    }),
  },
  {
    name: 'qwen2 qkv-bias 4/2 θ1e6',
    writer: 'transformers',
    // no head_dim: Qwen2 derives it (hidden/heads = 8)
    config: {
      ...base,
      model_type: 'qwen2',
      rope_theta: 1e6,
      vocab_size: 96,
      hidden_size: 32,
      intermediate_size: 56,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      tie_word_embeddings: false,
      use_sliding_window: false,
    },
  },
];

/** A packed batch: sequences of 37, 3, 71 and 20 tokens, a masked span, mixed advantages. */
export function packedBatch(vocab: number, seed = 1, lens = [37, 3, 71, 20]): PackedTrainBatch {
  let s = seed;
  const rnd = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) / 16777216;
  const total = lens.reduce((a, b) => a + b, 0);
  const offsets = Int32Array.from([0, ...lens.map((_, i) => lens.slice(0, i + 1).reduce((a, b) => a + b, 0))]);
  const ids = Int32Array.from({ length: total }, () => Math.floor(rnd() * vocab));
  const mask = Float32Array.from({ length: total }, (_, t) => (t >= 50 && t < 60 ? 0 : 1));
  const advantages = Float32Array.from(lens, (_, i) => [1, -0.5, 0.75, -1][i % 4] * (seed % 2 ? 1 : 0.5));
  return { ids, offsets, mask, advantages };
}

function python(): string {
  return process.env.SWERL_TORCH_PYTHON ?? fsdpPython('cpu');
}

function runPython(args: string[]): void {
  const r = spawnSync(python(), ['-m', ...args], { env: { ...process.env, PYTHONPATH: here, TRANSFORMERS_VERBOSITY: 'error' }, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`python -m ${args.join(' ')} failed (exit ${r.status}):\n${r.stderr.slice(-3000)}`);
}

/** relative L2 distance of `a` from `b` */
export const relL2 = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  let d = 0,
    n = 0;
  for (let i = 0; i < a.length; i++) {
    d += (a[i] - b[i]) ** 2;
    n += b[i] ** 2;
  }
  return Math.sqrt(d) / Math.max(Math.sqrt(n), 1e-30);
};
export const rel = (a: number, b: number): number => Math.abs(a - b) / Math.max(Math.abs(b), 1e-30);
/** a check's row: ok when the difference is within the tolerance */
export const row = <C extends string = Row['check']>(check: C, config: string, quantity: string, diff: number, tol: number, at?: string) => ({
  check,
  config,
  quantity,
  diff,
  tol,
  ok: diff <= tol,
  ...(at ? { at } : {}),
});
/** a mutant's row: the check catches it when its difference is above the tolerance */
export const mutantRow = <C extends string = Row['check']>(check: C, config: string, quantity: string, diff: number, tol: number) => ({
  ...row(check, config, quantity, diff, tol),
  ok: diff > tol,
  at: 'caught when above tol',
});

const CLIP = { clipLow: 0.2, clipHigh: 0.28, lMax: 64 };

/** The oracle rows: every config of ORACLE_CONFIGS, native engine vs transformers. */
export async function oracleRows(root: string): Promise<Row[]> {
  const cases: Record<string, unknown>[] = [];
  const native: { name: string; logp: Float32Array; loss: number; grads: Map<string, Float32Array>; out: string }[] = [];
  const model = (i: number) => join(root, `oracle-${i}`, 'model');
  const byTorch = ORACLE_CONFIGS.flatMap((c, i) => (c.writer === 'transformers' ? [{ dir: model(i), config: c.config, seed: i }] : []));
  runPython(['swerl_fsdp.oracle', '--make-many', JSON.stringify(byTorch)]); // one interpreter start for all of them
  for (const [i, c] of ORACLE_CONFIGS.entries()) {
    const dir = join(root, `oracle-${i}`);
    if (c.writer === 'native') writeRandomCheckpoint(model(i), c.config, 10 + i, { normNoise: 0.1 });
    const l = await Learner.load(model(i), { threads: 1 });
    const batch = packedBatch(c.config.vocab_size, 3 + i);
    // old log-probs shifted by ±0.4 on two thirds of the tokens: both clip branches and the unclipped one occur
    const lp0 = await l.logprobs(batch);
    batch.oldLogprobs = Float32Array.from(lp0, (v, t) => Math.min(0, v - [0.4, -0.4, 0][t % 3]));
    const hp: TrainHyper = { lr: 1e-3, weightDecay: 0, beta1: 0.9, beta2: 0.999, eps: 1e-8, maxGradNorm: 1, mode: 'grpo++', ...CLIP };
    const g = await l.debugGradients(batch, hp);
    l.close();
    mkdirSync(dir, { recursive: true });
    writeTrainBatch(join(dir, 'batch.safetensors'), batch);
    cases.push({ model: model(i), batch: join(dir, 'batch.safetensors'), out: join(dir, 'oracle'), ...CLIP });
    native.push({ name: c.name, logp: lp0, loss: g.loss, grads: g.grads, out: join(dir, 'oracle') });
  }
  writeFileSync(join(root, 'oracle-cases.json'), JSON.stringify(cases));
  runPython(['swerl_fsdp.oracle', '--cases', join(root, 'oracle-cases.json')]);
  const rows: Row[] = [];
  for (const n of native) {
    const t = decodeSafetensors(readFileSync(join(n.out, 'oracle.safetensors')));
    const ref = JSON.parse(readFileSync(join(n.out, 'oracle.json'), 'utf8')) as { loss: number };
    const tl = t.get('logprobs')!.data;
    let lpDiff = 0;
    for (let i = 0; i < tl.length; i++) lpDiff = Math.max(lpDiff, Math.abs(tl[i] - n.logp[i]));
    rows.push(row('oracle', n.name, 'log-probs max |Δ| (nats)', lpDiff, TOLERANCE.logprobs));
    rows.push(row('oracle', n.name, 'GRPO++ loss, relative', rel(n.loss, ref.loss), TOLERANCE.loss));
    let worst = 0,
      at = '';
    for (const [name, g] of n.grads) {
      const r = t.get('grad.' + name);
      const e = r ? relL2(g, r.data) : Infinity;
      if (e > worst || !r) [worst, at] = [e, name];
    }
    const missing = [...t.keys()].filter((k) => k.startsWith('grad.') && !n.grads.has(k.slice(5)));
    rows.push(
      row('oracle', n.name, `every gradient (${n.grads.size}), rel-L2`, missing.length ? Infinity : worst, TOLERANCE.gradient, missing.length ? `torch-only ${missing[0]}` : at),
    );
  }
  return rows;
}

/**
 * Planted bugs the oracle must catch (run after oracleRows, on its models and transformers' log-probs): the native
 * engine given a wrong bias (Qwen2's layer-0 q_proj bias negated) and a wrong RoPE theta (Llama's 1e5 read as 1e4), as
 * a loader or kernel bug would give it. A row is ok when the log-prob difference is beyond the oracle's tolerance.
 */
export async function oracleMutantRows(root: string): Promise<Row[]> {
  const at = (name: string) => ORACLE_CONFIGS.findIndex((c) => c.name === name);
  const torchLogp = (i: number) => decodeSafetensors(readFileSync(join(root, `oracle-${i}`, 'oracle', 'oracle.safetensors'))).get('logprobs')!.data;
  const maxDiff = (a: Float32Array, b: ArrayLike<number>) => a.reduce((m, v, k) => Math.max(m, Math.abs(v - b[k])), 0);
  const rows: Row[] = [];
  const q2 = at('qwen2 qkv-bias 4/2 θ1e6');
  const l = await Learner.load(join(root, `oracle-${q2}`, 'model'), { threads: 1 });
  const bias = 'model.layers.0.self_attn.q_proj.bias';
  await l.setParam(
    bias,
    (await l.getParam(bias)).map((v) => -v),
  );
  const lpBias = await l.logprobs(packedBatch(ORACLE_CONFIGS[q2].config.vocab_size, 3 + q2));
  l.close();
  const dBias = maxDiff(lpBias, torchLogp(q2));
  rows.push(mutantRow('mutant', ORACLE_CONFIGS[q2].name, 'q_proj bias negated: log-probs |Δ|', dBias, TOLERANCE.logprobs));
  const ll = at('llama tied 6/2 d12 θ1e5');
  const src = join(root, `oracle-${ll}`, 'model'),
    mut = join(root, 'mutant-theta');
  mkdirSync(mut, { recursive: true });
  copyFileSync(join(src, 'model.safetensors'), join(mut, 'model.safetensors'));
  const cfg = JSON.parse(readFileSync(join(src, 'config.json'), 'utf8')) as Record<string, unknown> & { rope_parameters?: Record<string, unknown> };
  if (cfg.rope_parameters) cfg.rope_parameters.rope_theta = 1e4;
  else cfg.rope_theta = 1e4;
  writeFileSync(join(mut, 'config.json'), JSON.stringify(cfg));
  const lt = await Learner.load(mut, { threads: 1 });
  const lpTheta = await lt.logprobs(packedBatch(ORACLE_CONFIGS[ll].config.vocab_size, 3 + ll));
  lt.close();
  const dTheta = maxDiff(lpTheta, torchLogp(ll));
  rows.push(mutantRow('mutant', ORACLE_CONFIGS[ll].name, 'RoPE theta 1e4 for 1e5: log-probs |Δ|', dTheta, TOLERANCE.logprobs));
  return rows;
}

export const FSDP_CONFIG: QwenConfig = {
  ...base,
  vocab_size: 97,
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 3,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  tie_word_embeddings: false,
  attention_bias: true,
};
export const FSDP_HP: TrainHyper = { lr: 1e-3, weightDecay: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, maxGradNorm: 0.05, mode: 'grpo++', ...CLIP };

export function fsdpOptions(nproc: number, over: Partial<FsdpOptions> = {}): FsdpOptions {
  return {
    device: 'cpu',
    nprocPerNode: nproc,
    nnodes: 1,
    controlHost: '127.0.0.1',
    paramDtype: 'float32',
    reduceDtype: 'float32',
    cpuOffload: false,
    activationCheckpointing: true,
    maxTokensPerMicroBatch: 80,
    attnImplementation: 'sdpa',
    checkpointShardMB: 0.02,
    stallTimeoutSeconds: 120,
    collectiveTimeoutSeconds: 120,
    threads: 1,
    python: python(),
    ...over,
  };
}

export interface StepTrace {
  loss: number[];
  gradNorm: number[];
  weights: Map<string, Float32Array>;
}

/** Three AdamW steps with the native engine from `model` (batches 1..3); weights read back from the saved checkpoint. */
export async function nativeSteps(model: string, out: string, steps = 3): Promise<StepTrace> {
  const l = await Learner.load(model, { threads: 1 });
  const t: StepTrace = { loss: [], gradNorm: [], weights: new Map() };
  for (let k = 1; k <= steps; k++) {
    const s = await l.trainStep(packedBatch(FSDP_CONFIG.vocab_size, k), FSDP_HP);
    t.loss.push(s.loss);
    t.gradNorm.push(s.gradNorm);
  }
  await l.save(out);
  l.close();
  t.weights = await weightsOf(out);
  return t;
}

/** The same three steps on an FSDP process group; its checkpoint is read back by the native engine. */
export async function fsdpSteps(trainer: FsdpLearner, model: string, out: string, root: string, steps = 3): Promise<StepTrace> {
  await trainer.load(model);
  const t: StepTrace = { loss: [], gradNorm: [], weights: new Map() };
  for (let k = 1; k <= steps; k++) {
    const path = join(root, `batch-${k}.safetensors`);
    writeTrainBatch(path, packedBatch(FSDP_CONFIG.vocab_size, k));
    const s = await trainer.trainStep(path, FSDP_HP);
    t.loss.push(s.loss);
    t.gradNorm.push(s.gradNorm);
  }
  await trainer.save(out, model);
  t.weights = await weightsOf(out);
  return t;
}

/** Every tensor of a checkpoint as the native engine loads it (a sharded FSDP checkpoint included). */
export async function weightsOf(dir: string): Promise<Map<string, Float32Array>> {
  const l = await Learner.load(dir, { threads: 1 });
  const out = new Map<string, Float32Array>();
  for (const p of await l.paramInfo()) out.set(p.name, await l.getParam(p.name));
  l.close();
  return out;
}

/** Rows comparing an FSDP trace with the native one (weights: relative L2 of the change from `initial`). */
export function compareTraces(config: string, t: StepTrace, ref: StepTrace, initial: Map<string, Float32Array>): Row[] {
  const rows: Row[] = [];
  const worstOf = (a: number[], b: number[]) => a.reduce((w, v, i) => (rel(v, b[i]) > w[0] ? [rel(v, b[i]), i + 1] : w), [0, 0]);
  const [dl, sl] = worstOf(t.loss, ref.loss);
  rows.push(row('fsdp', config, 'loss, relative', dl, TOLERANCE.loss, `step ${sl}`));
  const [dg, sg] = worstOf(t.gradNorm, ref.gradNorm);
  rows.push(row('fsdp', config, 'grad norm, relative', dg, TOLERANCE.gradNorm, `step ${sg}`));
  let worst = 0,
    at = '';
  for (const [name, w0] of initial) {
    const a = t.weights.get(name),
      b = ref.weights.get(name);
    if (!a || !b) return [...rows, row('fsdp', config, 'weights after 3 steps', Infinity, TOLERANCE.weights, `missing ${name}`)];
    const da = a.map((v, i) => v - w0[i]),
      db = b.map((v, i) => v - w0[i]);
    const e = relL2(da, db);
    if (e > worst) [worst, at] = [e, name];
  }
  rows.push(row('fsdp', config, 'weight change after 3 steps, rel-L2', worst, TOLERANCE.weights, at));
  return rows;
}

/** The whole FSDP cross-check: native, 1 rank and 2 ranks from the same checkpoint and batches. */
export async function fsdpRows(root: string): Promise<Row[]> {
  const model = join(root, 'fsdp-model');
  writeRandomCheckpoint(model, FSDP_CONFIG, 7, { normNoise: 0.1 });
  const initial = await weightsOf(model);
  const ref = await nativeSteps(model, join(root, 'fsdp-native'));
  const rows: Row[] = [];
  for (const n of [1, 2]) {
    const trainer = await FsdpLearner.start(fsdpOptions(n));
    try {
      const t = await fsdpSteps(trainer, model, join(root, `fsdp-${n}`), root);
      rows.push(...compareTraces(`${n} rank${n > 1 ? 's' : ''} vs native`, t, ref, initial));
    } finally {
      await trainer.close();
    }
  }
  return rows;
}

export function formatRows(rows: Row[]): string {
  const lines = [
    'check   config                       quantity                                largest diff   tolerance  ok      at',
    '------  ---------------------------  --------------------------------------  ------------  ----------  ------  ----',
  ];
  for (const r of rows) {
    lines.push(
      `${r.check.padEnd(6)}  ${r.config.padEnd(27)}  ${r.quantity.padEnd(38)}  ${r.diff.toExponential(2).padStart(12)}  ${r.tol.toExponential(0).padStart(10)}  ${(r.check === 'mutant' ? (r.ok ? 'caught' : 'MISSED') : r.ok ? 'ok' : 'OVER').padEnd(6)}  ${r.at ?? ''}`,
    );
  }
  return lines.join('\n');
}
