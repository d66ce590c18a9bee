// An independent fp64 reference of the Hugging Face Qwen3 forward pass (modeling_qwen3: RMSNorm,
// q/k per-head norm before rotate-half RoPE, GQA via repeat_kv, causal fp32 softmax, SwiGLU, tied or
// untied head, attention bias on q/k/v/o), and of its Llama (no q/k norm) and Qwen2 (no q/k norm, q/k/v biases,
// none on o_proj) relatives (modeling_llama, modeling_qwen2), written from the model definitions and not from our C++,
// against which the native engine's packed log-probs are checked. PyTorch itself is compared on the
// GPU machine (docs/cuda.md); this keeps the CPU reference honest in every CI run.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { Learner, writeRandomCheckpoint, type QwenConfig } from '../../gpu-learner/index.ts';

const root = mkdtempSync(join(tmpdir(), 'qwen3-ref-'));
after(() => rmSync(root, { recursive: true, force: true }));

type Weights = Map<string, Float32Array>;

// y (T, out) = x (T, in) · W^T, W stored (out, in) as nn.Linear does.
function linear(x: Float64Array, T: number, inDim: number, W: Float32Array, outDim: number, b?: Float32Array): Float64Array {
  const y = new Float64Array(T * outDim);
  for (let t = 0; t < T; t++) {
    for (let o = 0; o < outDim; o++) {
      let s = b ? b[o] : 0;
      for (let i = 0; i < inDim; i++) s += x[t * inDim + i] * W[o * inDim + i];
      y[t * outDim + o] = s;
    }
  }
  return y;
}

// RMSNorm over rows of length d: x / sqrt(mean(x²) + eps) * w.
function rmsnorm(x: Float64Array, rows: number, d: number, w: Float32Array, eps: number): Float64Array {
  const y = new Float64Array(x.length);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < d; i++) ss += x[r * d + i] ** 2;
    const inv = 1 / Math.sqrt(ss / d + eps);
    for (let i = 0; i < d; i++) y[r * d + i] = x[r * d + i] * inv * w[i];
  }
  return y;
}

// Rotate-half RoPE on (T, H, D): x·cos + rotate_half(x)·sin, inv_freq_i = θ^(−2i/D), positions 0..T−1.
function rope(x: Float64Array, T: number, H: number, D: number, theta: number): void {
  const half = D / 2;
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < H; h++) {
      const base = (t * H + h) * D;
      const row = x.slice(base, base + D);
      for (let i = 0; i < D; i++) {
        const f = i % half;
        const ang = t * Math.pow(theta, (-2 * f) / D);
        const rot = i < half ? -row[i + half] : row[i - half];
        x[base + i] = row[i] * Math.cos(ang) + rot * Math.sin(ang);
      }
    }
  }
}

/** log p(ids[t] | ids[<t]) for one sequence (entry 0 is 0), and the largest |logit|. */
function referenceLogprobs(c: QwenConfig, w: Weights, ids: number[]): { logprobs: number[]; maxLogit: number } {
  const T = ids.length,
    C = c.hidden_size,
    H = c.num_attention_heads,
    KV = c.num_key_value_heads,
    D = c.head_dim ?? c.hidden_size / c.num_attention_heads;
  const I = c.intermediate_size,
    V = c.vocab_size,
    eps = c.rms_norm_eps;
  const g = (n: string) => {
    const t = w.get(n);
    if (!t) throw new Error(`missing ${n}`);
    return t;
  };
  // the architectures' switches, as modeling_qwen3 / modeling_llama / modeling_qwen2 build their layers
  const arch = c.model_type ?? 'qwen3';
  const qkvBias = arch === 'qwen2' || !!c.attention_bias,
    oBias = arch !== 'qwen2' && !!c.attention_bias;
  const opt = (n: string) => ((n.includes('o_proj') ? oBias : qkvBias) ? g(n) : undefined);
  const qkNorm = (x: Float64Array, rows: number, n: string) => (arch === 'qwen3' ? rmsnorm(x, rows, D, g(n), eps) : x);
  const emb = g('model.embed_tokens.weight');
  const h = new Float64Array(T * C);
  for (let t = 0; t < T; t++) for (let i = 0; i < C; i++) h[t * C + i] = emb[ids[t] * C + i];
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    const x = rmsnorm(h, T, C, g(p + 'input_layernorm.weight'), eps);
    const q = qkNorm(linear(x, T, C, g(p + 'self_attn.q_proj.weight'), H * D, opt(p + 'self_attn.q_proj.bias')), T * H, p + 'self_attn.q_norm.weight');
    const k = qkNorm(linear(x, T, C, g(p + 'self_attn.k_proj.weight'), KV * D, opt(p + 'self_attn.k_proj.bias')), T * KV, p + 'self_attn.k_norm.weight');
    const v = linear(x, T, C, g(p + 'self_attn.v_proj.weight'), KV * D, opt(p + 'self_attn.v_proj.bias'));
    rope(q, T, H, D, c.rope_theta);
    rope(k, T, KV, D, c.rope_theta);
    const att = new Float64Array(T * H * D);
    const groups = H / KV;
    for (let hh = 0; hh < H; hh++) {
      const kvh = Math.floor(hh / groups); // repeat_kv
      for (let t = 0; t < T; t++) {
        const scores: number[] = [];
        for (let s = 0; s <= t; s++) {
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[(t * H + hh) * D + d] * k[(s * KV + kvh) * D + d];
          scores.push(dot / Math.sqrt(D));
        }
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let s = 0; s <= t; s++) {
          for (let d = 0; d < D; d++) att[(t * H + hh) * D + d] += (e[s] / z) * v[(s * KV + kvh) * D + d];
        }
      }
    }
    const o = linear(att, T, H * D, g(p + 'self_attn.o_proj.weight'), C, opt(p + 'self_attn.o_proj.bias'));
    for (let i = 0; i < h.length; i++) h[i] += o[i];
    const x2 = rmsnorm(h, T, C, g(p + 'post_attention_layernorm.weight'), eps);
    const gate = linear(x2, T, C, g(p + 'mlp.gate_proj.weight'), I);
    const up = linear(x2, T, C, g(p + 'mlp.up_proj.weight'), I);
    for (let i = 0; i < gate.length; i++) gate[i] = (gate[i] / (1 + Math.exp(-gate[i]))) * up[i];
    const down = linear(gate, T, I, g(p + 'mlp.down_proj.weight'), C);
    for (let i = 0; i < h.length; i++) h[i] += down[i];
  }
  const hf = rmsnorm(h, T, C, g('model.norm.weight'), eps);
  const head = c.tie_word_embeddings ? emb : g('lm_head.weight');
  const logits = linear(hf, T, C, head, V);
  const out = [0];
  let maxLogit = 0;
  for (const z of logits) maxLogit = Math.max(maxLogit, Math.abs(z));
  for (let t = 1; t < T; t++) {
    const row = logits.subarray((t - 1) * V, t * V);
    let m = -Infinity;
    for (const z of row) m = Math.max(m, z);
    let s = 0;
    for (const z of row) s += Math.exp(z - m);
    out.push(row[ids[t]] - m - Math.log(s));
  }
  return { logprobs: out, maxLogit };
}

// The first-order worst-case rounding bound of the fp32 engine against this fp64 reference: every stage rounds a
// reduction of at most K terms, with relative error ≤ K·u (u = 2^-24, the γ_K bound), and the per-layer stages
// (input norm, q/k/v, q/k norm and RoPE, scores, softmax·V, o_proj, the two residual additions, the MLP's two
// products) plus the final norm, the head and the log-softmax add up; a log-prob is a logit minus the
// log-sum-exp, each of magnitude ≤ max|logit| + ln V. So |Δ log p| ≤ (9L + 3)·K·u·2·(max|logit| + ln V), K the longest reduction of the model.
function roundingBound(c: QwenConfig, maxLogit: number, longestSeq: number): number {
  const u = 2 ** -24;
  const K = Math.max(c.hidden_size, c.intermediate_size, c.num_attention_heads * (c.head_dim ?? 0), c.vocab_size, longestSeq);
  return (9 * c.num_hidden_layers + 3) * K * u * 2 * (maxLogit + Math.log(c.vocab_size));
}

const base: QwenConfig = {
  vocab_size: 50,
  hidden_size: 24,
  intermediate_size: 40,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 10,
  rms_norm_eps: 1e-6,
  rope_theta: 1000,
  max_position_embeddings: 128,
};

const cases: [string, QwenConfig][] = [
  ['tied head, GQA 4/2, head_dim ≠ hidden/heads', { ...base, tie_word_embeddings: true }],
  ['untied head, attention bias, MQA 4/1', { ...base, num_key_value_heads: 1, tie_word_embeddings: false, attention_bias: true }],
  ['llama: no q/k norm, tied head, theta 1e5', { ...base, model_type: 'llama', rope_theta: 1e5, tie_word_embeddings: true }],
  ['qwen2: q/k/v biases, no o bias, no q/k norm', { ...base, model_type: 'qwen2', rope_theta: 1e6, tie_word_embeddings: false }],
];

for (const [name, config] of cases) {
  test(`native log-probs match an independent fp64 reference: ${name}`, async () => {
    const dir = join(root, name.replace(/[^a-z0-9]+/gi, '-'));
    // Large std and noisy norms so every part of the block moves the result.
    writeRandomCheckpoint(dir, config, 11, { std: 0.25, normNoise: 0.3 });
    const learner = await Learner.load(dir, { threads: 1 });
    try {
      const weights: Weights = new Map();
      for (const p of await learner.paramInfo()) weights.set(p.name, await learner.getParam(p.name));
      const seqs = [
        [3, 17, 42, 8, 8, 1, 49, 20, 11, 0, 33],
        [5, 6, 7, 30, 2],
      ];
      const flat = Int32Array.from(seqs.flat());
      const offsets = Int32Array.from([0, seqs[0].length, seqs[0].length + seqs[1].length]);
      const got = await learner.logprobs({ ids: flat, offsets });
      const refs = seqs.map((s) => referenceLogprobs(config, weights, s));
      const want = refs.flatMap((r) => r.logprobs);
      let worst = 0;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
      const bound = roundingBound(config, Math.max(...refs.map((r) => r.maxLogit)), seqs[0].length);
      console.log(`max |Δ log p| ${worst.toExponential(2)}, rounding bound ${bound.toExponential(2)}`);
      assert.ok(worst <= bound, `max |Δ logprob| = ${worst} > the fp32 rounding bound ${bound}`);
      // and the result is not trivially uniform (the check would be weak otherwise)
      const uniform = -Math.log(config.vocab_size);
      assert.ok(
        want.slice(1).some((x) => Math.abs(x - uniform) > 0.5),
        'reference log-probs are far from uniform',
      );
    } finally {
      learner.close();
    }
  });
}
