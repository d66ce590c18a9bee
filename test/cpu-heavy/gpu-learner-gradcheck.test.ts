// Gradient check of the native GRPO++/GRPO backward: every parameter tensor's analytic gradient vs
// central finite differences of the native loss, on tiny random Qwen3 models (GQA 4 q / 2 kv heads,
// head_dim ≠ hidden/heads, tied and untied LM head, with and without attention bias).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { Learner, grpoTokenLoss, writeRandomCheckpoint, type QwenConfig, type TrainHyper } from '../../gpu-learner/index.ts';
import { tinyModelConfig, trainHyper } from '../helpers/tiny-model.ts';

const root = mkdtempSync(join(tmpdir(), 'gl-gradcheck-'));
after(() => rmSync(root, { recursive: true, force: true }));

const base = tinyModelConfig();

const hp = trainHyper({ lMax: 8, microBatchTokens: 12 });

function rng(seed: number) {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
}

async function gradcheck(name: string, config: QwenConfig, mode: 'grpo++' | 'grpo') {
  const dir = join(root, name);
  writeRandomCheckpoint(dir, config, 11, { std: 0.3, normNoise: 0.2 });
  const learner = await Learner.load(dir, { threads: 2 });
  try {
    const r = rng(5);
    const lens = [7, 9, 5];
    const offsets = Int32Array.from([0, 7, 16, 21]);
    const ids = Int32Array.from({ length: 21 }, () => Math.floor(r() * config.vocab_size));
    const mask = Float32Array.from({ length: 21 }, (_, t) => (t % 5 === 2 ? 0 : 1));
    const advantages = Float32Array.from([1.0, -0.8, 0.5]);
    assert.equal(
      lens.reduce((a, b) => a + b),
      ids.length,
    );
    // Old log-probs shifted from the current ones by δ ∈ {+0.5, −0.5, 0, +0.1}: ρ ∈ {0.61, 1.65, 1, 0.90},
    // far from the kinks at 0.8 / 1.28, so both the clipped and the unclipped branch occur for A > 0 and A < 0.
    const cur = await learner.logprobs({ ids, offsets });
    const deltas = [0.5, -0.5, 0, 0.1];
    const oldLogprobs = Float32Array.from(cur, (v, t) => Math.min(0, v + deltas[t % 4]));
    const batch = { ids, offsets, mask, advantages, oldLogprobs };
    const h = { ...hp, mode };
    let clipped = 0,
      unclipped = 0;
    for (let s = 0; s < 3; s++)
      for (let t = offsets[s] + 1; t < offsets[s + 1]; t++)
        if (mask[t]) {
          if (grpoTokenLoss(cur[t], oldLogprobs[t], advantages[s], h.clipLow, mode === 'grpo' ? h.clipLow : h.clipHigh).clipped) clipped++;
          else unclipped++;
        }
    assert.ok(clipped >= 3 && unclipped >= 3, `both branches exercised (clipped ${clipped}, unclipped ${unclipped})`);

    const { loss, grads } = await learner.debugGradients(batch, h);
    assert.ok(Number.isFinite(loss) && loss !== 0);
    assert.equal(await learner.debugLoss(batch, h), loss, 'debugLoss == loss of debugGradients');
    const names = (await learner.paramInfo()).map((p) => p.name);
    assert.equal(names.includes('lm_head.weight'), !config.tie_word_embeddings);
    assert.equal(names.includes('model.layers.0.self_attn.q_proj.bias'), !!config.attention_bias);
    const eps = 1e-3;
    const report: string[] = [];
    for (const pname of names) {
      const g = grads.get(pname)!;
      const w = await learner.getParam(pname);
      // A random direction over the whole tensor covers every element: ∇L·u vs (L(θ+εu) − L(θ−εu)) / 2ε.
      const u = Float32Array.from(w, () => 2 * r() - 1);
      let analytic = 0;
      for (let i = 0; i < g.length; i++) analytic += g[i] * u[i];
      await learner.setParam(
        pname,
        Float32Array.from(w, (v, i) => v + eps * u[i]),
      );
      const lp = await learner.debugLoss(batch, h);
      await learner.setParam(
        pname,
        Float32Array.from(w, (v, i) => v - eps * u[i]),
      );
      const lm = await learner.debugLoss(batch, h);
      await learner.setParam(pname, w);
      const numeric = (lp - lm) / (2 * eps);
      // Tolerance: fp32 forward, loss O(1) rounds at ~1e-7·|L| per evaluation, divided by 2ε = 2e-3
      // gives ~1e-4 absolute noise in the numeric side; O(ε²) truncation adds ~1e-6·|L'''|. So
      // |analytic − numeric| ≤ 2e-2·max(|a|,|n|) + 3e-4 (observed: ≲ 5e-3 relative on larger terms).
      const err = Math.abs(analytic - numeric);
      const tol = 2e-2 * Math.max(Math.abs(analytic), Math.abs(numeric)) + 3e-4;
      report.push(`${pname}: analytic ${analytic.toExponential(4)} numeric ${numeric.toExponential(4)}`);
      assert.ok(err <= tol, `${name} ${pname}: analytic ${analytic} vs numeric ${numeric} (err ${err} > tol ${tol})`);
    }
    assert.equal(await learner.debugLoss(batch, h), loss, 'weights restored exactly');
    const nonzero = names.filter((n) => grads.get(n)!.some((v) => v !== 0));
    assert.equal(nonzero.length, names.length, 'every tensor receives gradient');
  } finally {
    learner.close();
  }
}

test('gradcheck: tied head, GQA 4/2, no attention bias, GRPO++', async () => {
  await gradcheck('tied', { ...base, tie_word_embeddings: true, attention_bias: false }, 'grpo++');
});

test('gradcheck: untied head, GQA 4/2, no attention bias, GRPO++', async () => {
  await gradcheck('untied', { ...base, tie_word_embeddings: false, attention_bias: false }, 'grpo++');
});

test('gradcheck: untied head with attention bias, GRPO (symmetric clip, per-sequence mean)', async () => {
  await gradcheck('bias-grpo', { ...base, tie_word_embeddings: false, attention_bias: true }, 'grpo');
});

// Every element of every tensor, one at a time, on a micro model (~1.7k parameters: untied head,
// attention bias, GQA 4/2, head_dim 4 ≠ hidden/heads) — no direction can hide a wrong element.
test('gradcheck: every element of every parameter tensor (micro model, GRPO++)', async () => {
  const config: QwenConfig = {
    vocab_size: 16,
    hidden_size: 8,
    intermediate_size: 12,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 4,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    max_position_embeddings: 64,
    tie_word_embeddings: false,
    attention_bias: true,
  };
  const dir = join(root, 'micro');
  writeRandomCheckpoint(dir, config, 23, { std: 0.5, normNoise: 0.3 });
  const learner = await Learner.load(dir, { threads: 1 });
  try {
    const r = rng(9);
    const offsets = Int32Array.from([0, 6, 11]);
    const ids = Int32Array.from({ length: 11 }, () => Math.floor(r() * config.vocab_size));
    const mask = Float32Array.from({ length: 11 }, (_, t) => (t === 3 ? 0 : 1));
    const advantages = Float32Array.from([1.0, -0.7]);
    const cur = await learner.logprobs({ ids, offsets });
    const deltas = [0.5, -0.5, 0, 0.1];
    const oldLogprobs = Float32Array.from(cur, (v, t) => Math.min(0, v + deltas[t % 4]));
    const batch = { ids, offsets, mask, advantages, oldLogprobs };
    const h: TrainHyper = { ...hp, lMax: 2, microBatchTokens: 64 };
    const { grads } = await learner.debugGradients(batch, h);
    const eps = 1e-2;
    let checked = 0,
      worst = 0;
    for (const { name } of await learner.paramInfo()) {
      const g = grads.get(name)!;
      const w = await learner.getParam(name);
      const p = Float32Array.from(w);
      // central difference at step e, in fp32 engine arithmetic
      const central = async (i: number, e: number): Promise<number> => {
        p[i] = w[i] + e;
        await learner.setParam(name, p);
        const lp = await learner.debugLoss(batch, h);
        p[i] = w[i] - e;
        await learner.setParam(name, p);
        const lm = await learner.debugLoss(batch, h);
        p[i] = w[i];
        return (lp - lm) / (2 * e);
      };
      for (let i = 0; i < w.length; i++) {
        // Richardson extrapolation (4·D(ε/2) − D(ε))/3 cancels the O(ε²) truncation term, which for
        // strongly curved elements dominates at ε = 1e-2; fp32 loss rounding (~1e-6 absolute) adds
        // ~1e-4 after dividing by 2ε. A wrong element is off by O(|g|), far above both.
        const numeric = (4 * (await central(i, eps / 2)) - (await central(i, eps))) / 3;
        const err = Math.abs(g[i] - numeric);
        const tol = 3e-2 * Math.max(Math.abs(g[i]), Math.abs(numeric)) + 2e-4;
        worst = Math.max(worst, err / tol);
        assert.ok(err <= tol, `${name}[${i}]: analytic ${g[i]} vs numeric ${numeric} (err ${err} > tol ${tol})`);
        checked++;
      }
      await learner.setParam(name, w);
    }
    assert.ok(checked > 1500, `checked ${checked} elements`);
    assert.ok(worst < 1, `worst err/tol ${worst}`);
    console.log(`checked ${checked} elements, worst err/tol ${worst.toFixed(3)}`);
  } finally {
    learner.close();
  }
});
