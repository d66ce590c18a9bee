// The `async` config section and the corrections (DESIGN §10): bad configs name the field and the value; what the
// learner applies when learner.correction is absent, in a synchronous and an asynchronous run; and decoupled PPO's
// token loss and weight worked out by hand.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DECOUPLED_CAP_DEFAULT, asyncMode, effectiveCorrection, validateConfig } from '../../lib/config.ts';
import { clippedTokenLoss, correctedMask, decoupledPpoTokenLoss, decoupledPpoWeight, truncatedIsWeight } from '../../lib/grpo.ts';

const base = { batch: { tasks: 4, samples: 2 }, maxInflightRollouts: 16 };
const errors = (c: unknown) => {
  const v = validateConfig(c);
  assert.equal(v.ok, false, 'should be refused');
  return (v as { errors: string[] }).errors.join('\n');
};

test('async modes validate; absent is off', () => {
  for (const a of [undefined, { mode: 'off' }, { mode: 'one-step' }, { mode: 'pump', maxStaleness: 0 }, { mode: 'pump', maxStaleness: 4, order: 'streaming' }]) {
    const v = validateConfig({ ...base, ...(a ? { async: a } : {}) });
    assert.ok(v.ok, JSON.stringify(v));
    if (v.ok) assert.equal(asyncMode(v.config), a?.mode ?? 'off');
  }
  const v = validateConfig({ ...base, async: { mode: 'pump', maxStaleness: 2 } });
  assert.ok(v.ok && v.config.async?.mode === 'pump' && v.config.async.order === 'admission', 'order defaults to admission');
});

test('bad async configs name the field and the value', () => {
  assert.match(errors({ ...base, async: { mode: 'pump', maxStaleness: -1 } }), /config\.async\.maxStaleness: must be ≥ 0, got -1/);
  assert.match(errors({ ...base, async: { mode: 'pump' } }), /config\.async\.maxStaleness: must be number, got nothing/);
  assert.match(errors({ ...base, async: { mode: 'pump', maxStaleness: 99 } }), /config\.async\.maxStaleness: must be ≤ 16, got 99/);
  assert.match(errors({ ...base, async: { mode: 'sometimes' } }), /config\.async\.mode: must be one of "off", "one-step", "pump", got "sometimes"/);
  assert.match(errors({ ...base, async: { mode: 'pump', maxStaleness: 1, order: 'random' } }), /config\.async\.order: must be one of "admission", "streaming", got "random"/);
  assert.match(errors({ ...base, async: { mode: 'one-step', maxStaleness: 1 } }), /config\.async: unknown field\(s\) maxStaleness/);
  // C below one batch (4 tasks × 2 samples = 8)
  assert.match(
    errors({ ...base, maxInflightRollouts: 7, async: { mode: 'pump', maxStaleness: 1 } }),
    /config\.maxInflightRollouts: must be at least one batch \(4 tasks × 2 samples = 8\) with async\.mode "pump", got 7/,
  );
  assert.ok(validateConfig({ ...base, maxInflightRollouts: 7, async: { mode: 'one-step' } }).ok, 'one-step has no such bound');
  // an engine that cannot switch weights between turns (an external server swaps one model, by a verified sync)
  const ext = { policy: { baseUrl: 'http://127.0.0.1:8000', weightSync: 'vllm' } };
  assert.match(
    errors({ ...base, ...ext, async: { mode: 'pump', maxStaleness: 1, order: 'streaming' } }),
    /config\.async\.order: "streaming" switches weights between the turns of an episode; the external server at policy\.baseUrl/,
  );
  assert.match(errors({ ...base, ...ext, async: { mode: 'pump', maxStaleness: 1 } }), /config\.async\.mode: "pump" keeps episodes of several checkpoints in flight at once/);
  assert.ok(validateConfig({ ...base, ...ext, async: { mode: 'one-step' } }).ok, 'one-step runs on one checkpoint at a time: an external server serves it');
  assert.match(
    errors({ ...base, async: { mode: 'pump', maxStaleness: 1 }, eval: { every: 1, tasks: 'x.jsonl' } }),
    /config\.eval: validation during a run is not supported with async\.mode "pump"/,
  );
  assert.match(
    errors({ ...base, learner: { correction: { kind: 'pis', cap: 2 } } }),
    /config\.learner\.correction\.kind: must be one of "none", "tis", "mis", "decoupled", got "pis"/,
  );
  assert.match(errors({ ...base, learner: { correction: { kind: 'tis' } } }), /config\.learner\.correction\.cap: must be number, got nothing/);
  assert.match(errors({ ...base, learner: { correction: { kind: 'decoupled', cap: 0.5 } } }), /config\.learner\.correction\.cap: must be ≥ 1, got 0\.5/);
});

test('effectiveCorrection: absent is none when synchronous, decoupled when asynchronous; "none" is none everywhere', () => {
  const cfg = (o: object) => {
    const v = validateConfig({ ...base, ...o });
    assert.ok(v.ok, JSON.stringify(v));
    return v.config;
  };
  assert.equal(effectiveCorrection(cfg({})), undefined);
  assert.equal(effectiveCorrection(cfg({ async: { mode: 'off' } })), undefined);
  assert.deepEqual(effectiveCorrection(cfg({ async: { mode: 'one-step' } })), { kind: 'decoupled', cap: DECOUPLED_CAP_DEFAULT });
  assert.deepEqual(effectiveCorrection(cfg({ async: { mode: 'pump', maxStaleness: 2 } })), { kind: 'decoupled', cap: 2 });
  assert.equal(effectiveCorrection(cfg({ async: { mode: 'pump', maxStaleness: 2 }, learner: { correction: { kind: 'none' } } })), undefined);
  assert.deepEqual(effectiveCorrection(cfg({ async: { mode: 'one-step' }, learner: { correction: { kind: 'decoupled', cap: 5 } } })), { kind: 'decoupled', cap: 5 });
  assert.deepEqual(effectiveCorrection(cfg({ learner: { correction: { kind: 'decoupled' } } })), { kind: 'decoupled', cap: DECOUPLED_CAP_DEFAULT });
  assert.deepEqual(effectiveCorrection(cfg({ async: { mode: 'one-step' }, learner: { correction: { kind: 'tis', cap: 3 } } })), { kind: 'tis', cap: 3 });
});

const close = (a: number, b: number, tol = 1e-12) => assert.ok(Math.abs(a - b) <= tol, `${a} vs ${b}`);

test('decoupled PPO by hand: the clip is around π_prox, the weight min(π_prox/π_b, C) multiplies it', () => {
  const clip = { low: 0.2, high: 0.28 };
  const A = 0.5;
  // on-policy and fresh: θ = prox = b → ℓ = −A
  close(decoupledPpoTokenLoss({ theta: -1, prox: -1, behaviour: -1 }, A, clip, 2), -0.5);
  // θ moved up by 0.5 from prox (r = e^0.5 = 1.6487 > 1.28), A > 0: the clipped branch, −A·1.28 = −0.64; b = prox: w = 1
  close(decoupledPpoTokenLoss({ theta: -0.5, prox: -1, behaviour: -1 }, A, clip, 2), -0.64);
  // the same token sampled by a stale policy that gave it log p −1.25: w = e^0.25 = 1.2840 (below C = 2)
  close(decoupledPpoTokenLoss({ theta: -0.5, prox: -1, behaviour: -1.25 }, A, clip, 2), -0.64 * Math.exp(0.25));
  // the stale policy gave it −3: ρ = e² = 7.389 → truncated at C = 2
  close(decoupledPpoTokenLoss({ theta: -0.5, prox: -1, behaviour: -3 }, A, clip, 2), -1.28);
  // A < 0, r = e^−0.5 = 0.6065 < 0.8: max(−A·r, −A·0.8) = max(0.3033, 0.4) = 0.4; stale b = prox + 0.5 → w = e^−0.5 (never raised)
  close(decoupledPpoTokenLoss({ theta: -1.5, prox: -1, behaviour: -0.5 }, -A, clip, 2), 0.4 * Math.exp(-0.5));
  // what the "coupled" loss would do instead (ratio against the stale π_b): the token's r = π_θ/π_b = e^2.5 is clipped flat
  close(clippedTokenLoss(-0.5, -3, A, clip.low, clip.high), -0.64);
  // decoupled's weight is TIS's with the proximal policy in π_old's place
  for (const [p, b] of [
    [-1, -1.5],
    [-1, -3],
    [-3, -1],
    [-0.2, -0.2],
  ] as const)
    assert.equal(decoupledPpoWeight(p, b, 2), truncatedIsWeight(p, b, 2));
});

test('correctedMask with "decoupled" multiplies the mask by min(ρ, C) and counts the truncated tokens', () => {
  const mask = [0, 1, 1, 1, 0.5];
  const prox = [0, -1, -1, -3, -2];
  const behaviour = [0, -1.5, -3, -1, -2];
  const c = correctedMask(mask, prox, behaviour, { kind: 'decoupled', cap: 2 });
  // ρ: e^0.5 = 1.6487, e^2 → 2, e^−2, 1 (times the mask 0.5)
  const want = [0, Math.exp(0.5), 2, Math.exp(-2), 0.5];
  want.forEach((w, i) => close(c.mask[i]!, w, 1e-6));
  assert.equal(c.changed, 1);
  assert.deepEqual(c, correctedMask(mask, prox, behaviour, { kind: 'tis', cap: 2 }), 'the same mask as TIS: one mechanism');
});
