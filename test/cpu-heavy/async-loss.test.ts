// The async run's corrections on the native engine, computed by hand (DESIGN §10): decoupled PPO is the engine's
// clipped loss around π_prox times the weight min(π_prox/π_b, C) folded into the mask; checked where the clip is
// active (π_θ ≠ π_prox, as after a first update), against lib/grpo.ts's reference token loss; "none" leaves the
// stale tokens' loss as on-policy; and with one optimizer step per batch (the learner's: π_θ = π_prox when the loss
// is taken) decoupled and TIS at the same cap are one update.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { clippedTokenLoss, correctedMask, decoupledPpoTokenLoss } from '../../lib/grpo.ts';
import { writeModel } from '../../lib/model-init.ts';
import { Learner } from '../../gpu-learner/index.ts';

const close = (a: number, b: number, tol: number) => assert.ok(Math.abs(a - b) <= tol, `${a} vs ${b}`);

test('decoupled PPO, "none" and TIS on the native engine, by hand', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'swerl-decoupled-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const m = await writeModel(join(root, 'c0'), 'tiny', 11);
  const learner = await Learner.load(m.dir, { threads: 1 });
  t.after(() => learner.close());
  const ids = Int32Array.from([12, 22, 32, 42, 52, 62, 72]);
  const offsets = Int32Array.from([0, ids.length]);
  const mask = Float32Array.from([0, 0, 1, 1, 1, 1, 1]);
  const A = 0.75;
  const N = 2;
  const lMax = 16;
  const clip = { low: 0.2, high: 0.28 };
  const hp = {
    lr: 1e-3,
    weightDecay: 0,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    clipLow: clip.low,
    clipHigh: clip.high,
    maxGradNorm: 1,
    lMax,
    mode: 'grpo++' as const,
    normSequences: N,
  };
  const theta = await learner.logprobs({ ids, offsets });
  // π_prox: where the weights were before an update moved them to θ (r = π_θ/π_prox = e^{−shift}); π_b a stale sampler
  const proxShift = [0, 0, -0.5, 0.1, 0.4, 0, -0.05];
  const prox = Float32Array.from(theta, (x, i) => x + proxShift[i]!);
  const behaviourShift = [0, 0, 0.2, -1.5, 0.3, -0.1, 0];
  const behaviour = Float32Array.from(prox, (x, i) => x + behaviourShift[i]!);
  const C = 2;
  const trained = [2, 3, 4, 5, 6];

  // decoupled: the engine's loss with π_old = π_prox and the mask times w
  const dec = correctedMask(mask, prox, behaviour, { kind: 'decoupled', cap: C });
  const decLoss = await learner.debugLoss({ ids, offsets, mask: dec.mask, advantages: Float32Array.from([A]), oldLogprobs: prox }, hp);
  const byHand = trained.reduce((s, i) => s + decoupledPpoTokenLoss({ theta: theta[i]!, prox: prox[i]!, behaviour: behaviour[i]! }, A, clip, C), 0) / (N * lMax);
  close(decLoss, byHand, 1e-6);
  // the hand computation, token by token: r = e^{0.5} (clipped at 1.28), e^{−0.1}, e^{−0.4}, 1, e^{0.05}; w = min(e^{−shift_b}, 2)
  const r = [0.5, -0.1, -0.4, 0, 0.05].map(Math.exp);
  const w = [-0.2, 1.5, -0.3, 0.1, 0].map((x) => Math.min(Math.exp(x), C));
  const expected = r.reduce((s, ri, k) => s + w[k]! * Math.max(-A * ri, -A * Math.min(Math.max(ri, 1 - clip.low), 1 + clip.high)), 0) / (N * lMax);
  close(decLoss, expected, 1e-6);
  assert.equal(dec.changed, 1, 'one token truncated (e^1.5 > 2)');

  // "none": the mask as it was, the same clipped loss around π_prox, stale tokens weighted as on-policy
  const noneLoss = await learner.debugLoss({ ids, offsets, mask, advantages: Float32Array.from([A]), oldLogprobs: prox }, hp);
  close(noneLoss, trained.reduce((s, i) => s + clippedTokenLoss(theta[i]!, prox[i]!, A, clip.low, clip.high), 0) / (N * lMax), 1e-6);
  assert.ok(Math.abs(noneLoss - decLoss) > 1e-4, 'the weights change the loss');

  // one optimizer step per batch: π_θ = π_prox when the loss is taken (the engine recomputes π_old), so decoupled's
  // gradient is TIS's at the same cap: the same loss, the same step
  const g = async (kind: 'tis' | 'decoupled') => {
    const cm = correctedMask(mask, theta, behaviour, { kind, cap: C });
    return learner.debugGradients({ ids, offsets, mask: cm.mask, advantages: Float32Array.from([A]) }, hp);
  };
  const [tis, decoupled] = [await g('tis'), await g('decoupled')];
  assert.equal(decoupled.loss, tis.loss);
  for (const [name, grad] of tis.grads) assert.deepEqual(decoupled.grads.get(name), grad, name);
});
