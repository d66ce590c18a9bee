// Sampler–learner mismatch and its correction (DESIGN §9), checked by hand: the metric on numbers worked out
// on paper, a sampler holding bf16-rounded or stale weights raising it, and TIS/MIS changing the native
// engine's loss exactly as the formula says. No vLLM here (test/docker/vllm-training.test.ts has the real server).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { correctedMask, keptTokens, logprobMismatch, maskedIsWeight, truncatedIsWeight } from '../../lib/grpo.ts';
import { compareProbe, dtypeClass, FP32_PROBE_TOLERANCE, halfPrecisionProbeTolerance, probePrompt } from '../../lib/sync-probe.ts';
import { writeModel } from '../../lib/model-init.ts';
import { f32ToBf16 } from '../../lib/safetensors.ts';
import { Learner } from '../../gpu-learner/index.ts';

const close = (a: number, b: number, tol = 1e-12) => assert.ok(Math.abs(a - b) <= tol, `${a} vs ${b}`);

test('logprobMismatch: mean and max |Δ| and k3 over masked-in tokens, by hand', () => {
  const learner = [0, -1.0, -2.0, -0.5, -3.0];
  const behaviour = [0, -1.5, -2.0, -0.25, -9.0];
  const mask = [0, 1, 1, 1, 0]; // the last token is an observation: not compared
  const m = logprobMismatch(learner, behaviour, mask);
  // Δ = learner − behaviour = +0.5, 0, −0.25
  assert.equal(m.tokens, 3);
  close(m.meanAbsDelta, (0.5 + 0 + 0.25) / 3);
  close(m.maxAbsDelta, 0.5);
  // k3 per token: e^Δ − 1 − Δ
  close(m.k3, (Math.exp(0.5) - 1.5 + 0 + (Math.exp(-0.25) - 1 + 0.25)) / 3);
  assert.ok(m.k3 > 0);
  const same = logprobMismatch([0, -1, -2], [0, -1, -2], [0, 1, 1]);
  assert.deepEqual(same, { tokens: 2, meanAbsDelta: 0, maxAbsDelta: 0, k3: 0 });
  assert.throws(() => logprobMismatch([0], [0, 1], [1]), /lengths differ/);
});

test('TIS and MIS weights: min(ρ, C) and [1/C, C], ρ = exp(logπ_old − logπ_b)', () => {
  close(truncatedIsWeight(-1, -1, 2), 1);
  close(truncatedIsWeight(-1, -1.5, 2), Math.exp(0.5)); // ρ = 1.65 < 2: kept as is
  close(truncatedIsWeight(-1, -3, 2), 2); // ρ = e² > 2: truncated
  close(truncatedIsWeight(-3, -1, 2), Math.exp(-2)); // below 1: never raised
  assert.equal(maskedIsWeight(-1, -1.5, 2), 1);
  assert.equal(maskedIsWeight(-1, -3, 2), 0);
  assert.equal(maskedIsWeight(-3, -1, 2), 0); // ρ = e⁻² < 1/2
  assert.equal(maskedIsWeight(-1, -1 + Math.log(2), 2), 1); // ρ = 1/2 exactly: kept
  const learner = [0, -1, -1, -3, -1];
  const behaviour = [0, -1.5, -3, -1, -1];
  const mask = [0, 1, 1, 1, 0.5];
  const tis = correctedMask(mask, learner, behaviour, { kind: 'tis', cap: 2 });
  assert.deepEqual(Array.from(tis.mask), Array.from(Float32Array.from([0, Math.exp(0.5), 2, Math.exp(-2), 0.5])));
  assert.equal(tis.changed, 1);
  const mis = correctedMask(mask, learner, behaviour, { kind: 'mis', cap: 2 });
  assert.deepEqual(Array.from(mis.mask), [0, 1, 0, 0, 0.5]);
  assert.equal(mis.changed, 2);
  assert.throws(() => correctedMask(mask, learner, behaviour, { kind: 'tis', cap: 0.5 }), /correction.cap: must be ≥ 1, got 0.5/);
  assert.deepEqual(Array.from(keptTokens([1, 2, 3, 4, 5, 6], [0, 2, 3, 6], [0, 2])), [1, 2, 4, 5, 6]);
});

test('probe: prompt spread over the vocabulary, tolerance by dtype, comparison', () => {
  assert.deepEqual(probePrompt(32, 4), [4, 12, 20, 28]);
  assert.equal(dtypeClass('torch.float32'), 'fp32');
  assert.equal(dtypeClass('bfloat16'), 'bf16');
  assert.equal(dtypeClass('half'), 'fp16');
  close(halfPrecisionProbeTolerance(0.01), 0.03 + FP32_PROBE_TOLERANCE);
  const mean = compareProbe([-1, -2, -3, -4], [-1.3, -2, -3, -4], 0.1, 'bf16', 'mean');
  assert.ok(mean.ok && mean.statistic === 'mean', `mean 0.075 within 0.1, though the max 0.3 is not: ${JSON.stringify(mean)}`);
  assert.equal(compareProbe([-1, -2], [-1.3, -2], 0.1, 'bf16').ok, false, 'the max by default');
  assert.equal(compareProbe([-1, -2], [NaN, -2], 1, 'bf16', 'mean').ok, false, 'NaN fails the mean too');
  const ok = compareProbe([-1, -2], Float32Array.from([-1.00001, -2]), FP32_PROBE_TOLERANCE, 'fp32');
  assert.equal(ok.ok, true);
  const bad = compareProbe([-1, -2], [-1.3, -2], FP32_PROBE_TOLERANCE, 'fp32');
  assert.equal(bad.ok, false);
  close(bad.maxAbsDelta, 0.3, 1e-12);
  assert.equal(compareProbe([-1], [NaN], 1, 'fp32').ok, false);
});

/** A learner whose every weight is rounded to bf16 (what a bf16 server holds). */
async function bf16Copy(dir: string): Promise<Learner> {
  const l = await Learner.load(dir, { threads: 1 });
  for (const p of await l.paramInfo()) {
    const h = f32ToBf16(await l.getParam(p.name));
    const r = new Float32Array(h.length);
    const u = new Uint32Array(r.buffer);
    for (let i = 0; i < h.length; i++) u[i] = h[i]! << 16;
    await l.setParam(p.name, r);
  }
  return l;
}

test('a sampler holding bf16-rounded or stale weights raises the mismatch; the same weights give rounding only', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'swerl-mismatch-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const m0 = await writeModel(join(root, 'c0'), 'tiny', 3);
  const m1 = await writeModel(join(root, 'c1'), 'tiny', 4); // "the next checkpoint": other weights, same shapes
  const learner = await Learner.load(m0.dir, { threads: 1 });
  const bf16 = await bf16Copy(m0.dir);
  const stale = await Learner.load(m1.dir, { threads: 1 });
  t.after(() => [learner, bf16, stale].forEach((l) => l.close()));
  const prompt = Int32Array.from(probePrompt(m0.config.vocab_size));
  /** samples with `sampler`, then the learner's log-probs of the same tokens: the mismatch of one "trajectory" */
  const mismatchOf = async (sampler: Learner) => {
    const g = await sampler.generate(prompt, { maxNewTokens: 48, temperature: 1, seed: 11 });
    const ids = Int32Array.from([...prompt, ...g.ids]);
    const lp = await learner.logprobs({ ids, offsets: Int32Array.from([0, ids.length]) });
    const behaviour = new Float32Array(ids.length);
    behaviour.set(g.logprobs, prompt.length);
    const mask = new Float32Array(ids.length).fill(1, prompt.length);
    return logprobMismatch(lp, behaviour, mask);
  };
  const same = await mismatchOf(learner);
  const half = await mismatchOf(bf16);
  const old = await mismatchOf(stale);
  assert.ok(same.maxAbsDelta <= 1e-5, `same weights: rounding only (${same.maxAbsDelta})`);
  assert.ok(half.meanAbsDelta > 10 * Math.max(same.meanAbsDelta, 1e-7), `bf16 sampler raises the metric: ${JSON.stringify(half)} vs ${JSON.stringify(same)}`);
  assert.ok(old.meanAbsDelta > 0.05 && old.k3 > 1e-3, `stale sampler: ${JSON.stringify(old)}`);
  assert.ok(old.meanAbsDelta > half.meanAbsDelta, 'another checkpoint is further off than rounding');
});

test('TIS and MIS change the native engine loss exactly as computed by hand', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'swerl-tis-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const m = await writeModel(join(root, 'c0'), 'tiny', 5);
  const learner = await Learner.load(m.dir, { threads: 1 });
  t.after(() => learner.close());
  const ids = Int32Array.from([10, 20, 30, 40, 50, 60]);
  const offsets = Int32Array.from([0, ids.length]);
  const mask = Float32Array.from([0, 0, 1, 1, 1, 1]);
  const A = 0.75;
  const N = 3; // episodes in the batch (two left out for zero advantage)
  const lMax = 16;
  const hp = { lr: 1e-3, weightDecay: 0, beta1: 0.9, beta2: 0.999, eps: 1e-8, clipLow: 0.2, clipHigh: 0.28, maxGradNorm: 1, lMax, mode: 'grpo++' as const, normSequences: N };
  const old = await learner.logprobs({ ids, offsets });
  // the behaviour policy's log-probs: the learner's, shifted by hand-picked amounts (ρ = exp(−shift))
  const shift = [0, 0, -1.2, 0.1, 0.9, 0];
  const behaviour = Float32Array.from(old, (x, i) => x + shift[i]!);
  const base = await learner.debugLoss({ ids, offsets, mask, advantages: Float32Array.from([A]) }, hp);
  // one optimizer step per iteration: π_θ = π_old, ρ_PPO = 1, so ℓ_t = −A and L = Σ_t m_t·w_t·(−A) / (N·L_max)
  close(base, (-A * 4) / (N * lMax), 1e-7);
  const rho = shift.map((s) => Math.exp(-s));
  const C = 2;
  const tis = correctedMask(mask, old, behaviour, { kind: 'tis', cap: C });
  const tisLoss = await learner.debugLoss({ ids, offsets, mask: tis.mask, advantages: Float32Array.from([A]) }, hp);
  const wTis = [2, 3, 4, 5].map((t) => Math.min(rho[t]!, C)); // e^1.2 = 3.32 → 2; e^-0.1; e^-0.9; 1
  close(tisLoss, (-A * wTis.reduce((a, b) => a + b, 0)) / (N * lMax), 1e-7);
  assert.equal(tis.changed, 1);
  const mis = correctedMask(mask, old, behaviour, { kind: 'mis', cap: C });
  const misLoss = await learner.debugLoss({ ids, offsets, mask: mis.mask, advantages: Float32Array.from([A]) }, hp);
  // kept: 1/2 ≤ ρ ≤ 2 → tokens 3 (e^-0.1) and 5 (1); token 2 (3.32) and 4 (e^-0.9 = 0.41) dropped
  close(misLoss, (-A * 2) / (N * lMax), 1e-7);
  // the gradient scales the same way: TIS's loss differs from the plain one, so the step does too
  assert.notEqual(tisLoss, base);
});

test('FSDP engine (2 ranks): its logprobs op equals the native engine; a TIS-corrected step has the native loss and gradient norm', async (t) => {
  const { FSDP_CONFIG, FSDP_HP, TOLERANCE, fsdpOptions, packedBatch } = await import('../../gpu-learner/fsdp/crosscheck.ts');
  const { FsdpLearner, writeTrainBatch } = await import('../../gpu-learner/fsdp/index.ts');
  const { writeRandomCheckpoint } = await import('../../gpu-learner/index.ts');
  const root = mkdtempSync(join(tmpdir(), 'swerl-fsdp-tis-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const model = join(root, 'model');
  writeRandomCheckpoint(model, FSDP_CONFIG, 7, { normNoise: 0.1 });
  const batch = packedBatch(FSDP_CONFIG.vocab_size, 3);
  const native = await Learner.load(model, { threads: 1 });
  const fsdp = await FsdpLearner.start(fsdpOptions(2));
  t.after(async () => {
    native.close();
    await fsdp.close();
  });
  await fsdp.load(model);
  const path = join(root, 'batch.safetensors');
  writeTrainBatch(path, batch);
  const [lpNative, lpFsdp] = [await native.logprobs(batch), await fsdp.logprobs(path)];
  assert.equal(lpFsdp.length, lpNative.length);
  let maxd = 0;
  for (let i = 0; i < lpNative.length; i++) maxd = Math.max(maxd, Math.abs(lpNative[i]! - lpFsdp[i]!));
  assert.ok(maxd <= TOLERANCE.logprobs, `FSDP vs native log-probs: max |Δ| ${maxd}`);
  // a behaviour policy off by ±1 nat on every fifth token: TIS with cap 1.5 truncates some, keeps others
  const behaviour = Float32Array.from(lpNative, (x, i) => x + (i % 5 === 0 ? -1 : i % 5 === 2 ? 0.5 : 0));
  const c = correctedMask(batch.mask, lpNative, behaviour, { kind: 'tis', cap: 1.5 });
  assert.ok(c.changed > 0);
  const corrected = { ...batch, mask: c.mask };
  const cpath = join(root, 'corrected.safetensors');
  writeTrainBatch(cpath, corrected);
  const hp = { ...FSDP_HP, normSequences: 6 };
  const plain = await native.debugLoss(batch, hp);
  const [n, f] = [await native.trainStep(corrected, hp), await fsdp.trainStep(cpath, hp)];
  const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-12);
  assert.ok(rel(f.loss, n.loss) <= TOLERANCE.loss, `loss: FSDP ${f.loss} vs native ${n.loss}`);
  assert.ok(rel(f.gradNorm, n.gradNorm) <= TOLERANCE.gradNorm, `grad norm: FSDP ${f.gradNorm} vs native ${n.gradNorm}`);
  assert.ok(Math.abs(plain - n.loss) > 1e-6, `the correction changed the loss (${plain} → ${n.loss})`);
});

test('mismatch/* reaches MLflow (nested keys) and the run details in the UI', async () => {
  const { iterationMetrics } = await import('../../activities/report.ts');
  const { runDetails } = await import('../../workflows/run-reporting.ts');
  const mismatch = { tokens: 40, meanAbsDelta: 0.012, maxAbsDelta: 0.3, k3: 0.0004, corrected: 0.05 };
  const keysOf = iterationMetrics({ iteration: 2, time: 1000, meanReward: 0.5, mismatch }).map((m) => `${m.key}=${m.value}@${m.step}`);
  for (const k of ['mismatch/meanAbsDelta=0.012@2', 'mismatch/maxAbsDelta=0.3@2', 'mismatch/k3=0.0004@2', 'mismatch/corrected=0.05@2', 'mismatch/tokens=40@2']) {
    assert.ok(keysOf.includes(k), `${k} in ${keysOf.join(', ')}`);
  }
  const m = {
    iteration: 2,
    checkpoint: 3,
    meanReward: 0.5,
    successRate: 0.5,
    episodes: 8,
    rolloutErrors: 0,
    filtered: { max_context: 0, max_steps: 0, timeout: 0 },
    ends: {},
    zeroAdvantageGroups: 0,
    tokens: 100,
    responseTokens: 40,
    meanSteps: 3,
    loss: 0,
    gradNorm: 0,
    clipFraction: 0,
    skipped: false,
    learnerTrajectories: 8,
    lr: 1e-3,
    rolloutSeconds: 1,
    learnerSeconds: 1,
    orchestrationSeconds: 0,
    iterationSeconds: 2,
    mismatch,
    sync: { seconds: 0.12, reloaded: true, probeMaxAbsDelta: 4e-7, probeTolerance: 1e-4 },
  };
  const text = runDetails({
    runId: 'r',
    state: { iteration: 3, checkpoint: 3, lastMetrics: m, recent: [], paused: false, stopAt: null },
    config: { iterations: 5 } as never,
    phase: 'rollouts',
    running: true,
  });
  assert.match(text, /mismatch \|Δ log p\| mean 1\.20e-2 · max 3\.00e-1 · KL k3 4\.00e-4 · corrected 5\.0% of tokens · sync 0\.12 s, probe 4\.0e-7/);
});

test('a half-precision emulation (emulateHalf) rounds the activations as well as the weights: further from fp32 than bf16 weights alone, fp16 nearer than bf16, the same numbers on every call', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'swerl-emulate-half-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const m = await writeModel(join(root, 'c0'), 'tiny', 3);
  const fp32 = await Learner.load(m.dir, { threads: 1 });
  const weightsOnly = await bf16Copy(m.dir);
  const bf16 = await Learner.load(m.dir, { threads: 1, emulateHalf: 'bf16' });
  const fp16 = await Learner.load(m.dir, { threads: 1, emulateHalf: 'fp16' });
  t.after(() => [fp32, weightsOnly, bf16, fp16].forEach((l) => l.close()));
  const prompt = Int32Array.from(probePrompt(m.config.vocab_size));
  const g = await fp32.generate(prompt, { maxNewTokens: 48, temperature: 1, seed: 5 });
  const b = { ids: Int32Array.from([...prompt, ...g.ids]), offsets: Int32Array.from([0, prompt.length + g.ids.length]) };
  const ref = await fp32.logprobs(b);
  const meanDelta = (x: Float32Array) => x.reduce((s, v, i) => s + Math.abs(v - ref[i]!), 0) / x.length;
  const w = meanDelta(await weightsOnly.logprobs(b));
  const h = meanDelta(await bf16.logprobs(b));
  const f = meanDelta(await fp16.logprobs(b));
  assert.ok(w > 0 && h > 1.1 * w, `bf16 activations add to the weights' rounding: weights ${w}, emulation ${h}`);
  assert.ok(f > 0 && f < h / 4, `fp16 (3 more mantissa bits) is nearer fp32: fp16 ${f}, bf16 ${h}`);
  assert.deepEqual(await bf16.logprobs(b), await bf16.logprobs(b));
  console.log(
    `# mean |Δ log p| from fp32 over ${b.ids.length} tokens: bf16 weights ${w.toExponential(1)}; bf16 emulation ${h.toExponential(1)}; fp16 emulation ${f.toExponential(1)}`,
  );
});

test("the probe of a bf16 server: its mean |Δ| within 3× the learner's own bf16 emulation, and another checkpoint still fails", async (t) => {
  const { probeServedCheckpoint } = await import('../../activities/learner.ts');
  const { createInProcessPolicyClient } = await import('../../lib/policy/completions.ts');
  const root = mkdtempSync(join(tmpdir(), 'swerl-probe-bf16-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const m0 = await writeModel(join(root, 'c0'), 'tiny', 3);
  const m1 = await writeModel(join(root, 'c1'), 'tiny', 4);
  const learner = await Learner.load(m0.dir, { threads: 1 });
  const bf16 = await bf16Copy(m0.dir);
  const stale = await bf16Copy(m1.dir);
  t.after(() => [learner, bf16, stale].forEach((l) => l.close()));
  const fp32Server = await probeServedCheckpoint(createInProcessPolicyClient(learner), learner, m0.dir, 'float32');
  assert.ok(fp32Server.ok && fp32Server.maxAbsDelta <= 1e-6, JSON.stringify(fp32Server));
  const half = await probeServedCheckpoint(createInProcessPolicyClient(bf16), learner, m0.dir, 'torch.bfloat16');
  assert.equal(half.dtype, 'bf16');
  assert.ok(half.ok, `a bf16 copy of the checkpoint passes: ${JSON.stringify(half)}`);
  assert.ok(half.maxAbsDelta > FP32_PROBE_TOLERANCE, `it would fail the fp32 bound (${half.maxAbsDelta})`);
  assert.equal(half.statistic, 'mean');
  assert.ok(half.tolerance < 0.05, `the derived bound stays tight: ${half.tolerance}`);
  const wrong = await probeServedCheckpoint(createInProcessPolicyClient(stale), learner, m0.dir, 'bfloat16');
  assert.equal(wrong.ok, false, `another checkpoint in bf16 fails: ${JSON.stringify(wrong)}`);
  console.log(
    `# probe |Δ log p|: fp32 server max ${fp32Server.maxAbsDelta.toExponential(1)}; bf16 copy mean ${half.meanAbsDelta.toExponential(1)} (bound ${half.tolerance.toExponential(1)}); another checkpoint in bf16 mean ${wrong.meanAbsDelta.toExponential(1)}`,
  );
});
