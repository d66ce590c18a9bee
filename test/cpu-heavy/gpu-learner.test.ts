// gpu-learner CPU backend: the GRPO++ token loss, packed log-probs vs KV-cache generation, seeds,
// learning direction, save/load round trip, BF16/F16 checkpoints. Tiny random models, real engine.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { Learner, grpoTokenLoss, writeRandomCheckpoint, type TrainBatch } from '../../gpu-learner/index.ts';
import { tinyModelConfig, trainHyper } from '../helpers/tiny-model.ts';

const root = mkdtempSync(join(tmpdir(), 'gl-test-'));
const config = tinyModelConfig({ tie_word_embeddings: true });
const hp = trainHyper({ lr: 3e-3, weightDecay: 0 });
const modelDir = join(root, 'f32');
let learner: Learner;

before(async () => {
  writeRandomCheckpoint(modelDir, config, 3, { std: 0.3, normNoise: 0.1 });
  learner = await Learner.load(modelDir, { threads: 2 });
});
after(() => {
  learner?.close();
  rmSync(root, { recursive: true, force: true });
});

const ids1 = Int32Array.from([1, 5, 9, 33, 2, 17, 40, 8]);
const ids2 = Int32Array.from([7, 7, 3, 60, 12]);
const ids3 = Int32Array.from([0, 63, 22, 31, 4, 4, 9, 10, 11, 50]);
const packed = { ids: Int32Array.from([...ids1, ...ids2, ...ids3]), offsets: Int32Array.from([0, 8, 13, 23]) };
const single = (ids: Int32Array) => ({ ids, offsets: Int32Array.from([0, ids.length]) });
const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
};

test('native GRPO++ token loss: hand-computed cases', () => {
  const close = (a: number, b: number) => assert.ok(Math.abs(a - b) < 1e-12, `${a} vs ${b}`);
  // clip-high: A=1, ρ=1.5 > 1.28 → ℓ = max(−1.5, −1.28) = −1.28, clipped, no gradient
  let r = grpoTokenLoss(Math.log(1.5), 0, 1, 0.2, 0.28);
  close(r.ratio, 1.5);
  close(r.loss, -1.28);
  assert.equal(r.clipped, true);
  assert.equal(r.dlogp, 0);
  // inside the trust region: A=1, ρ=1.1 → ℓ = −1.1, dℓ/dlogp = −A·ρ
  r = grpoTokenLoss(Math.log(1.1), 0, 1, 0.2, 0.28);
  close(r.loss, -1.1);
  close(r.dlogp, -1.1);
  assert.equal(r.clipped, false);
  // clip-low: A=−1, ρ=0.5 < 0.8 → ℓ = max(0.5, 0.8) = 0.8, clipped
  r = grpoTokenLoss(-2 + Math.log(0.5), -2, -1, 0.2, 0.28);
  close(r.loss, 0.8);
  assert.equal(r.clipped, true);
  assert.equal(r.dlogp, 0);
  // A=−1, ρ=1.5: the clip would lower the loss, so the unclipped branch is kept: ℓ = 1.5, dℓ = 1.5
  r = grpoTokenLoss(Math.log(1.5), 0, -1, 0.2, 0.28);
  close(r.loss, 1.5);
  close(r.dlogp, 1.5);
  assert.equal(r.clipped, false);
  // A=1, ρ=0.5: unclipped −0.5 > clipped −0.8 → ℓ = −0.5
  r = grpoTokenLoss(Math.log(0.5), 0, 1, 0.2, 0.28);
  close(r.loss, -0.5);
  close(r.dlogp, -0.5);
  assert.equal(r.clipped, false);
  // zero advantage: no loss, no gradient
  r = grpoTokenLoss(-1, -3, 0, 0.2, 0.28);
  assert.equal(Math.abs(r.loss), 0);
  assert.equal(Math.abs(r.dlogp), 0);
});

test('batch loss: mask, length normalisation by N·lMax, GRPO per-sequence mean', async () => {
  const lp = await learner.logprobs(packed);
  const n = packed.ids.length;
  const mask = Float32Array.from({ length: n }, (_, t) => (t % 3 === 0 ? 0 : 1));
  const advantages = Float32Array.from([1, -0.5, 0]);
  const oldLogprobs = Float32Array.from(lp, (v, t) => Math.min(0, v + (t % 2 ? 0.4 : -0.3)));
  const batch: TrainBatch = { ...packed, mask, advantages, oldLogprobs };
  const expected = (mode: 'grpo++' | 'grpo', lMax: number) => {
    let total = 0;
    for (let s = 0; s < 3; s++) {
      let sum = 0,
        m = 0;
      for (let t = packed.offsets[s] + 1; t < packed.offsets[s + 1]; t++) {
        if (!mask[t]) continue;
        sum += grpoTokenLoss(lp[t], oldLogprobs[t], advantages[s], 0.2, mode === 'grpo' ? 0.2 : 0.28).loss;
        m++;
      }
      total += mode === 'grpo' ? (m ? sum / m : 0) : sum;
    }
    return mode === 'grpo' ? total / 3 : total / (3 * lMax);
  };
  const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(1e-12, Math.abs(b));
  const l16 = await learner.debugLoss(batch, hp);
  assert.ok(rel(l16, expected('grpo++', 16)) < 1e-6, `${l16} vs ${expected('grpo++', 16)}`);
  const l32 = await learner.debugLoss(batch, { ...hp, lMax: 32 });
  assert.ok(rel(l32, l16 / 2) < 1e-12, 'doubling lMax halves the loss');
  const lg = await learner.debugLoss(batch, { ...hp, mode: 'grpo' });
  assert.ok(rel(lg, expected('grpo', 16)) < 1e-6, `${lg} vs ${expected('grpo', 16)}`);
  // masked tokens do not count: changing their old log-probs changes nothing
  const old2 = oldLogprobs.slice();
  for (let t = 0; t < n; t++) if (!mask[t]) old2[t] = -5;
  assert.equal(await learner.debugLoss({ ...batch, oldLogprobs: old2 }, hp), l16);
  // zero advantages: zero loss and zero gradient
  const z = await learner.debugGradients({ ...batch, advantages: new Float32Array(3) }, hp);
  assert.equal(Math.abs(z.loss), 0);
  for (const g of z.grads.values()) assert.ok(g.every((v) => v === 0));
});

test('gradient accumulation over micro-batches equals one big batch', async () => {
  const n = packed.ids.length;
  const batch: TrainBatch = { ...packed, mask: new Float32Array(n).fill(1), advantages: Float32Array.from([1, -1, 0.5]) };
  const big = await learner.debugGradients(batch, { ...hp, microBatchTokens: 4096 });
  const small = await learner.debugGradients(batch, { ...hp, microBatchTokens: 1 });
  assert.ok(Math.abs(big.loss - small.loss) < 1e-9);
  for (const [name, g] of big.grads) assert.ok(maxAbsDiff(g, small.grads.get(name)!) < 1e-6, name);
});

test("normSequences: leaving out zero-advantage sequences keeps the full batch's loss and gradients", async () => {
  const n = packed.ids.length;
  const lp = await learner.logprobs(packed);
  const mask = Float32Array.from({ length: n }, (_, t) => (t % 4 === 0 ? 0 : 1));
  const oldLogprobs = Float32Array.from(lp, (v, t) => Math.min(0, v + (t % 2 ? 0.3 : -0.2)));
  const full: TrainBatch = { ...packed, mask, advantages: Float32Array.from([1, 0, -0.5]), oldLogprobs };
  // the same batch without sequence 1 (A = 0)
  const keep = (a: ArrayLike<number>) => Float32Array.from([...Array.from(a).slice(0, 8), ...Array.from(a).slice(13)]);
  const reduced: TrainBatch = {
    ids: Int32Array.from([...ids1, ...ids3]),
    offsets: Int32Array.from([0, 8, 18]),
    mask: keep(mask),
    advantages: Float32Array.from([1, -0.5]),
    oldLogprobs: keep(oldLogprobs),
  };
  const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(1e-30, Math.abs(b));
  for (const mode of ['grpo++', 'grpo'] as const) {
    const a = await learner.debugGradients(full, { ...hp, mode });
    const b = await learner.debugGradients(reduced, { ...hp, mode, normSequences: 3 });
    assert.ok(a.loss !== 0 && rel(b.loss, a.loss) < 1e-6, `${mode}: loss ${b.loss} vs ${a.loss}`);
    for (const [name, g] of a.grads) {
      const scale = g.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
      assert.ok(scale > 0, `${mode}: ${name} has a gradient`);
      // fp32 sums over other row counts: OpenBLAS's Zen kernels differ by 1.1e-6 of the scale (a wrong N: 0.5)
      assert.ok(maxAbsDiff(b.grads.get(name)!, g) <= 1e-5 * scale, `${mode}: ${name}: ${maxAbsDiff(b.grads.get(name)!, g)} vs ${scale}`);
    }
    // without normSequences the reduced batch is normalised by its own 2 sequences: 3/2 × the loss
    assert.ok(rel(await learner.debugLoss(reduced, { ...hp, mode }), (a.loss * 3) / 2) < 1e-6, `${mode}: N defaults to the batch`);
  }
});

test("normSequences below the batch's sequence count, negative or fractional, is rejected naming the field", async () => {
  const n = packed.ids.length;
  const batch: TrainBatch = { ...packed, mask: new Float32Array(n).fill(1), advantages: Float32Array.from([1, -1, 0.5]) };
  const step = learner.step;
  await assert.rejects(learner.debugLoss(batch, { ...hp, normSequences: 2 }), /hp\.normSequences=2\b.*3 sequences/);
  await assert.rejects(learner.trainStep(batch, { ...hp, normSequences: 1 }), /hp\.normSequences=1\b/);
  await assert.rejects(learner.debugLoss(batch, { ...hp, normSequences: 3.5 }), /hp\.normSequences must be a non-negative integer, got 3\.5/);
  await assert.rejects(learner.debugLoss(batch, { ...hp, normSequences: -4 }), /hp\.normSequences/);
  assert.equal(learner.step, step, 'a rejected step does not step');
  assert.ok(Number.isFinite(await learner.debugLoss(batch, { ...hp, normSequences: 3 })));
});

test("log-probs equal packed, one by one, and through generate's KV cache", async () => {
  const all = await learner.logprobs(packed);
  assert.equal(all.length, packed.ids.length);
  for (const s of [0, 8, 13]) assert.equal(all[s], 0, 'first token of each sequence gets 0');
  const one = [...(await learner.logprobs(single(ids1))), ...(await learner.logprobs(single(ids2))), ...(await learner.logprobs(single(ids3)))];
  // fp32 both ways; only GEMM tile shapes (so the order of sums) differ: a few ulps of log-probs below 8 in magnitude
  // (ulp 4.8e-7), 1e-5 = 20 ulps
  assert.ok(maxAbsDiff(all, one) < 1e-5, `packed vs single ${maxAbsDiff(all, one)}`);
  assert.ok(all.every((v) => v <= 0 && Number.isFinite(v)));

  const prompt = ids1.slice(0, 5);
  const g = await learner.generate(prompt, { maxNewTokens: 20, temperature: 1, seed: 42 });
  assert.equal(g.ids.length, 20);
  assert.equal(g.finishReason, 'length');
  const full = Int32Array.from([...prompt, ...g.ids]);
  const lp = (await learner.logprobs(single(full))).slice(prompt.length);
  // incremental (one row per step through the decoding kernels) vs packed (OpenBLAS tiles, flash blocks) fp32
  // evaluation: order-only differences along 20 positions, each a few ulps (4.8e-7) of the log-probs; 1e-4 leaves
  // room for the cached keys/values that each step's attention reads back
  assert.ok(maxAbsDiff(lp, g.logprobs) < 1e-4, `generate vs logprobs ${maxAbsDiff(lp, g.logprobs)}`);

  // allowedIds restrict sampling; the returned log-prob stays the full-vocabulary one at temperature 1
  const allowed = [3, 9, 27, 40];
  const ga = await learner.generate(prompt, { maxNewTokens: 12, temperature: 0.7, topP: 0.9, seed: 1, allowedIds: allowed });
  assert.ok([...ga.ids].every((t) => allowed.includes(t)));
  const lpa = (await learner.logprobs(single(Int32Array.from([...prompt, ...ga.ids])))).slice(prompt.length);
  assert.ok(maxAbsDiff(lpa, ga.logprobs) < 1e-4);
  assert.ok(
    ga.logprobs.every((v) => v < Math.log(0.999)),
    'not renormalised over the allowed ids',
  );
});

test('seeds: same seed ⇒ same tokens, different seed ⇒ different; greedy and stop ids', async () => {
  const prompt = Int32Array.from([4, 8, 15, 16]);
  const a = await learner.generate(prompt, { maxNewTokens: 24, seed: 7 });
  const b = await learner.generate(prompt, { maxNewTokens: 24, seed: 7 });
  const c = await learner.generate(prompt, { maxNewTokens: 24, seed: 8 });
  assert.deepEqual(a.ids, b.ids);
  assert.deepEqual(a.logprobs, b.logprobs);
  assert.notDeepEqual(a.ids, c.ids);
  const g1 = await learner.generate(prompt, { maxNewTokens: 6, temperature: 0, seed: 1 });
  const g2 = await learner.generate(prompt, { maxNewTokens: 6, temperature: 0, seed: 2 });
  assert.deepEqual(g1.ids, g2.ids, 'greedy ignores the seed');
  // greedy picks the argmax: its log-prob is the largest of the next-token distribution
  const stop = await learner.generate(prompt, { maxNewTokens: 6, temperature: 0, seed: 1, stopIds: [g1.ids[2]] });
  const firstStop = [...g1.ids].indexOf(g1.ids[2]);
  assert.equal(stop.finishReason, 'stop');
  assert.deepEqual(stop.ids, g1.ids.slice(0, firstStop + 1), 'stops after emitting the stop id (included)');
  const none = await learner.generate(prompt, { maxNewTokens: 0, seed: 1 });
  assert.equal(none.ids.length, 0);
});

test('learning: positive advantage raises the sequence log-prob, negative lowers it', async () => {
  const seq = Int32Array.from([2, 11, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59]);
  const mask = Float32Array.from(seq, (_, t) => (t >= 4 ? 1 : 0));
  const score = (lp: Float32Array) => lp.reduce((s, v, t) => s + (t >= 4 ? v : 0), 0);
  for (const adv of [1, -1]) {
    const l = await Learner.load(modelDir, { threads: 2 });
    try {
      const before = score(await l.logprobs(single(seq)));
      let st;
      for (let i = 0; i < 200; i++) st = await l.trainStep({ ...single(seq), mask, advantages: Float32Array.from([adv]) }, { ...hp, lr: 1e-3 });
      assert.equal(l.step, 200);
      assert.equal(st!.step, 200);
      assert.equal(st!.skipped, false);
      assert.equal(st!.tokens, seq.length);
      assert.equal(st!.meanRatio, 1, 'oldLogprobs omitted ⇒ recomputed ⇒ ρ = 1');
      const afterScore = score(await l.logprobs(single(seq)));
      if (adv > 0) assert.ok(afterScore > before + 1, `raised: ${before} → ${afterScore}`);
      else assert.ok(afterScore < before - 1, `lowered: ${before} → ${afterScore}`);
    } finally {
      l.close();
    }
  }
});

test('save → load round trip: bit-identical log-probs and identical next steps', async () => {
  const a = await Learner.load(modelDir, { threads: 2 });
  const n = packed.ids.length;
  const batch: TrainBatch = { ...packed, mask: new Float32Array(n).fill(1), advantages: Float32Array.from([0.5, -1, 1]) };
  for (let i = 0; i < 3; i++) await a.trainStep(batch, hp);
  const saved = join(root, 'saved');
  await a.save(saved);
  for (const f of ['model.safetensors', 'config.json', 'optimizer.bin']) assert.ok(existsSync(join(saved, f)), f);
  const b = await Learner.load(saved, { threads: 1 }); // results do not depend on the thread count
  try {
    assert.equal(b.step, 3);
    assert.deepEqual(b.config, a.config);
    assert.deepEqual(await b.logprobs(packed), await a.logprobs(packed));
    const old = await a.logprobs(packed);
    const stepBatch = { ...batch, oldLogprobs: Float32Array.from(old, (v, t) => Math.min(0, v - 0.2 * (t % 2))) };
    const sa = await a.trainStep(stepBatch, hp);
    const sb = await b.trainStep(stepBatch, hp);
    assert.deepEqual({ ...sa, seconds: 0 }, { ...sb, seconds: 0 });
    assert.equal(sa.step, 4);
    assert.deepEqual(await b.logprobs(packed), await a.logprobs(packed));
  } finally {
    a.close();
    b.close();
  }
});

test('BF16 and F16 checkpoints load and match the F32 model within tolerance', async () => {
  const bf = join(root, 'bf16'),
    hf = join(root, 'f16');
  writeRandomCheckpoint(bf, config, 3, { std: 0.3, normNoise: 0.1, dtype: 'BF16' });
  writeRandomCheckpoint(hf, config, 3, { std: 0.3, normNoise: 0.1, dtype: 'F16' });
  const ref = await learner.logprobs(packed);
  for (const [dir, tol] of [
    [bf, 0.1],
    [hf, 0.02],
  ] as const) {
    const l = await Learner.load(dir, { threads: 2 });
    try {
      const lp = await l.logprobs(packed);
      // Weights rounded to 8 (bf16) / 11 (f16) mantissa bits (relative error ≤ 2^-9 / 2^-12) move the
      // log-probs of this model (std 0.3 weights) by ~3e-2 / ~5e-3 (observed); tolerances leave 3-4x room.
      const d = maxAbsDiff(lp, ref);
      assert.ok(d < tol, `${dir}: max |Δ logprob| ${d} ≥ ${tol}`);
      assert.ok(d > 0, 'really converted (not bit-identical to F32)');
    } finally {
      l.close();
    }
  }
});
