// Batched decoding on the native CPU engine: sequences decode together (per-sequence KV caches, one read of
// the weights per step for all of them), a group of samples of one prompt shares its prefill, and a sequence's
// tokens and log-probs are those it gets alone, whatever else is in the batch, whenever it joins, and on any
// thread count (exact equality: every row of a decoding step is reduced in one fixed order, gpu-learner/src/simd.h).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { Learner, writeRandomCheckpoint, type GenerateOptions, type GenerateResult, type QwenConfig } from '../../gpu-learner/index.ts';
import { trainHyper } from '../helpers/tiny-model.ts';

const root = mkdtempSync(join(tmpdir(), 'gl-batch-'));
const modelDir = join(root, 'model');
// Large enough that every kernel takes its vector paths and tails: hidden 72 (not a multiple of 16), head_dim 20,
// GQA 6/2, untied head over a vocabulary of 300, two layers.
const config: QwenConfig = {
  vocab_size: 300,
  hidden_size: 72,
  intermediate_size: 100,
  num_hidden_layers: 2,
  num_attention_heads: 6,
  num_key_value_heads: 2,
  head_dim: 20,
  rms_norm_eps: 1e-6,
  rope_theta: 10000,
  max_position_embeddings: 160,
  tie_word_embeddings: false,
};
let learner: Learner;

before(async () => {
  writeRandomCheckpoint(modelDir, config, 3, { std: 0.2, normNoise: 0.2 });
  learner = await Learner.load(modelDir, { threads: 2 });
  const greedy = await learner.generate(prompts[2], opts[2]);
  opts[2].stopIds = [greedy.ids[8]];
});
after(() => {
  learner?.close();
  rmSync(root, { recursive: true, force: true });
});

const prompts = [
  Int32Array.from([5, 17, 42, 99, 3, 250]),
  Int32Array.from([7]),
  Int32Array.from({ length: 70 }, (_, i) => (i * 37 + 11) % 300), // a prefill longer than one attention block (64)
  Int32Array.from([1, 2, 3, 4]),
];
const opts: GenerateOptions[] = [
  { maxNewTokens: 40, temperature: 1, seed: 7, topLogprobs: 3 },
  { maxNewTokens: 25, temperature: 0.7, topP: 0.9, seed: 11 },
  { maxNewTokens: 30, temperature: 0, seed: 0 }, // stopIds: the 9th greedy token (set in before())
  { maxNewTokens: 12, temperature: 1.3, seed: 5, allowedIds: [4, 8, 15, 16, 23, 42] },
];

function same(got: GenerateResult, want: GenerateResult, what: string) {
  assert.deepEqual(got.ids, want.ids, `${what}: tokens`);
  assert.deepEqual(got.logprobs, want.logprobs, `${what}: log-probs (bit-identical)`);
  assert.equal(got.finishReason, want.finishReason, `${what}: finish reason`);
  assert.deepEqual(got.topIds, want.topIds, `${what}: top ids`);
  assert.deepEqual(got.topLogprobs, want.topLogprobs, `${what}: top log-probs`);
}

test('a sequence decodes the same alone and in a batch of others, joining at any step, seeded per request', async () => {
  const alone = await Promise.all(prompts.map((p, i) => learner.generate(p, opts[i])));
  assert.ok(alone[0].ids.length === 40 && alone[0].topIds!.length === 120);
  assert.ok(alone.some((r) => r.finishReason === 'length') && alone.every((r) => r.ids.length > 0));

  // Drive the steps by hand: sequences 1 and 2 start, 0 joins after 3 steps, 3 after 9; a group of three more
  // samples of prompt 0 with other seeds joins at step 5.
  const got = new Map<number, { ids: number[]; lps: number[]; tops: number[]; topLps: number[]; finish?: string }>();
  const seqOf = new Map<number, number>(); // sequence id -> request index (0..3) or 100+k for the group
  const add = async (idx: number[], prompt: Int32Array, o: GenerateOptions[]) => {
    const ids = await learner.decodeAdd(prompt, o);
    ids.forEach((s, k) => {
      seqOf.set(s, idx[k]);
      got.set(s, { ids: [], lps: [], tops: [], topLps: [] });
    });
  };
  await add([1], prompts[1], [opts[1]]);
  await add([2], prompts[2], [opts[2]]);
  const group = [
    { ...opts[0], seed: 100 },
    { ...opts[0], seed: 101, temperature: 0.5 },
    { ...opts[0], seed: 102, topLogprobs: 0 },
  ];
  let maxBatch = 0;
  for (let step = 0; ; step++) {
    if (step === 3) await add([0], prompts[0], [opts[0]]);
    if (step === 5) await add([100, 101, 102], prompts[0], group);
    if (step === 9) await add([3], prompts[3], [opts[3]]);
    const toks = await learner.decodeStep();
    if (toks.length === 0 && step > 9) break;
    maxBatch = Math.max(maxBatch, toks.length);
    assert.deepEqual(
      toks.map((t) => t.seq),
      [...toks.map((t) => t.seq)].sort((a, b) => a - b),
      'tokens by increasing sequence id',
    );
    for (const t of toks) {
      const g = got.get(t.seq)!;
      assert.equal(g.finish, undefined, 'no token after the last');
      g.ids.push(t.id);
      g.lps.push(t.logprob);
      if (t.topIds) {
        g.tops.push(...t.topIds);
        g.topLps.push(...t.topLogprobs!);
      }
      g.finish = t.finishReason;
    }
  }
  assert.ok(maxBatch >= 5, `batches of several sequences (largest ${maxBatch})`);
  const asResult = (g: NonNullable<ReturnType<typeof got.get>>, k: number): GenerateResult => ({
    ids: Int32Array.from(g.ids),
    logprobs: Float32Array.from(g.lps),
    finishReason: g.finish as 'stop' | 'length',
    ...(k > 0 ? { topIds: Int32Array.from(g.tops), topLogprobs: Float32Array.from(g.topLps) } : {}),
  });
  for (const [seq, idx] of seqOf) {
    const g = got.get(seq)!;
    if (idx < 100) same(asResult(g, opts[idx].topLogprobs ?? 0), alone[idx], `request ${idx} in the batch`);
    else {
      const o = group[idx - 100];
      same(asResult(g, o.topLogprobs ?? 0), await learner.generate(prompts[0], o), `group sample ${idx - 100} (shared prefill)`);
    }
  }
  assert.equal(alone[2].finishReason, 'stop', 'the greedy request ends on its stop id');
});

test('BatchDecoder: concurrent callers share steps and get what generate gives each alone', async () => {
  const alone = await Promise.all(prompts.map((p, i) => learner.generate(p, opts[i])));
  const group = [1, 2, 3, 4, 5, 6].map((s) => ({ maxNewTokens: 20, temperature: 1, seed: s }));
  const [a, b, c, d, g] = (await Promise.all([
    ...prompts.map((p, i) => learner.decoder.generate(p, [opts[i]]).then((r) => r[0])),
    learner.decoder.generate(prompts[3], group),
  ])) as [GenerateResult, GenerateResult, GenerateResult, GenerateResult, GenerateResult[]];
  [a, b, c, d].forEach((r, i) => same(r as GenerateResult, alone[i], `caller ${i}`));
  for (let i = 0; i < group.length; i++) same(g[i], await learner.generate(prompts[3], group[i]), `group sample ${i}`);
  assert.equal(learner.decoder.running, 0);
  // maxNewTokens 0 gives an empty result without decoding
  const [none] = await learner.decoder.generate(prompts[0], [{ maxNewTokens: 0, seed: 1 }]);
  assert.equal(none.ids.length, 0);
});

test('removing or aborting a sequence leaves the others untouched; reload ends the running ones', async () => {
  const want = await learner.generate(prompts[0], opts[0]);
  const [keep, drop] = await learner.decodeAdd(prompts[0], [opts[0], { ...opts[0], seed: 99 }]);
  const ids: number[] = [];
  for (let step = 0; ; step++) {
    if (step === 4) assert.equal(await learner.decodeRemove(drop), true);
    const toks = await learner.decodeStep();
    if (toks.length === 0) break;
    if (step >= 4)
      assert.ok(
        toks.every((t) => t.seq !== drop),
        'a removed sequence gets no more tokens',
      );
    ids.push(...toks.filter((t) => t.seq === keep).map((t) => t.id));
  }
  assert.deepEqual(Int32Array.from(ids), want.ids);
  assert.equal(await learner.decodeRemove(drop), false, 'unknown sequence');

  const ac = new AbortController();
  const aborted = learner.decoder.generate(prompts[2], [{ maxNewTokens: 100, seed: 1 }], ac.signal);
  const other = learner.decoder.generate(prompts[1], [opts[1]]);
  ac.abort(new Error('client went away')); // while its prompt is being prefilled
  await assert.rejects(aborted, /client went away/);
  same((await other)[0], await learner.generate(prompts[1], opts[1]), 'the sequence beside an aborted one');

  const pending = learner.decoder.generate(prompts[2], [{ maxNewTokens: 150, seed: 2 }]);
  await learner.reload(modelDir);
  await assert.rejects(pending, /reloaded/);
  same(await learner.generate(prompts[0], opts[0]), want, 'after reload');
});

test('batched decoding refuses bad input naming the field', async () => {
  await assert.rejects(learner.decodeAdd(prompts[0], [{ maxNewTokens: 0, seed: 1 }]), /options\[0\]\.maxNewTokens must be >= 1/);
  await assert.rejects(learner.decodeAdd(prompts[0], []), /samples must be a non-empty array/);
  await assert.rejects(learner.decodeAdd(Int32Array.from([3, 300]), [{ maxNewTokens: 2, seed: 1 }]), /promptIds\[1\]=300 is outside the vocabulary/);
  await assert.rejects(learner.decodeAdd(prompts[0], [{ maxNewTokens: 2, seed: 1, topP: 0 }]), /topP must be a finite number in \(0, 1\]/);
  await assert.rejects(learner.decodeRemove(-1), /seq must be a sequence id/);
  assert.equal((await learner.decodeStep()).length, 0, 'nothing running');
});

test('results do not depend on the thread count: generation, batched decoding, log-probs and a training step', async () => {
  const one = await Learner.load(modelDir, { threads: 1 });
  try {
    for (let i = 0; i < prompts.length; i++) same(await one.generate(prompts[i], opts[i]), await learner.generate(prompts[i], opts[i]), `request ${i}, 1 vs 2 threads`);
    const [x, y] = await Promise.all([one.decoder.generate(prompts[0], opts.slice(0, 2)), learner.decoder.generate(prompts[0], opts.slice(0, 2))]);
    same(x[0], y[0], 'batched, 1 vs 2 threads');
    same(x[1], y[1], 'batched, 1 vs 2 threads');
    const ids = Int32Array.from([...prompts[0], ...prompts[2], ...prompts[3]]);
    const offsets = Int32Array.from([0, 6, 76, 80]);
    assert.deepEqual(await one.logprobs({ ids, offsets }), await learner.logprobs({ ids, offsets }));
    // a training step from the same weights: same statistics and the same bytes of every parameter after it
    const batch = { ids, offsets, mask: Float32Array.from(ids, (_, t) => (t % 3 ? 1 : 0)), advantages: Float32Array.from([1, -0.5, 0.25]) };
    const hp = trainHyper({ lMax: 64, microBatchTokens: 40 });
    const two = await Learner.load(modelDir, { threads: 2 });
    try {
      const [s1, s2] = [await one.trainStep(batch, hp), await two.trainStep(batch, hp)];
      assert.deepEqual({ ...s1, seconds: 0 }, { ...s2, seconds: 0 });
      for (const p of await one.paramInfo()) assert.deepEqual(await one.getParam(p.name), await two.getParam(p.name), p.name);
    } finally {
      two.close();
    }
  } finally {
    one.close();
  }
});

// The SIMD variants this CPU runs, each in its own process (the variant is chosen once per process).
const flags = readFileSync('/proc/cpuinfo', 'utf8');
const variants = [
  'baseline',
  ...(/\bavx2\b/.test(flags) && /\bfma\b/.test(flags) ? ['avx2'] : []),
  ...(['avx512f', 'avx512dq', 'avx512bw', 'avx512vl'].every((f) => new RegExp(`\\b${f}\\b`).test(flags)) ? ['avx512'] : []),
];
const driver = new URL('../../gpu-learner/build/gl_driver', import.meta.url).pathname;

test(`run-time dispatch: every SIMD variant this CPU has (${variants.join(', ')}) computes the same log-probs`, () => {
  const run = (v: string | undefined) => spawnSync(driver, ['forward', modelDir, '--threads', '2'], { encoding: 'utf8', env: { ...process.env, GL_SIMD: v ?? '' } });
  const parse = (out: string) =>
    out
      .trim()
      .split('\n')
      .map((l) => Number(l.split(' ')[2]));
  const ref = run(undefined);
  assert.equal(ref.status, 0, ref.stderr);
  const want = parse(ref.stdout);
  assert.equal(want.length, 16);
  for (const v of variants) {
    const r = run(v);
    assert.equal(r.status, 0, r.stderr);
    const got = parse(r.stdout);
    const worst = Math.max(...got.map((g, i) => Math.abs(g - want[i])));
    // The variants differ only in lane counts (4/8/16: the order of fp32 sums in exp/softmax/RMSNorm/decoding
    // reductions, and FMA or not); over two layers that moves a log-prob by a few fp32 ulps of values O(10):
    // bounded by 16·2^-24·|log-prob| ≈ 1e-5 with room.
    console.log(`GL_SIMD=${v}: max |Δ log-prob| vs the default variant ${worst.toExponential(2)}`);
    assert.ok(worst <= 1e-5, `GL_SIMD=${v}: max |Δ log-prob| ${worst}`);
  }
  const bad = run('sse9');
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /GL_SIMD must be avx512, avx2 or baseline, got "sse9"/);
});

test('a later sample of a prompt already prefilled copies its keys and values: the same bits as prefilling it again', async () => {
  const fresh = await Learner.load(modelDir, { threads: 2, promptCacheBytes: 0 });
  const cached = await Learner.load(modelDir, { threads: 2 });
  try {
    const p = prompts[2];
    // two samples of one prompt added at different steps (two rollouts of a group arriving apart)
    const run = async (l: Learner) => {
      const [a] = await l.decodeAdd(p, [{ ...opts[0], seed: 1 }]);
      const toks = new Map<number, number[]>([[a, []]]);
      for (let i = 0; i < 3; i++) for (const t of await l.decodeStep()) toks.get(t.seq)!.push(t.id);
      const [b] = await l.decodeAdd(p, [{ ...opts[0], seed: 2 }]);
      toks.set(b, []);
      while (l.decoder.running === 0 && (toks.get(a)!.length < 40 || toks.get(b)!.length < 40)) {
        const step = await l.decodeStep();
        if (step.length === 0) break;
        for (const t of step) toks.get(t.seq)!.push(t.id);
      }
      return [...toks.values()];
    };
    assert.deepEqual(await run(cached), await run(fresh));
    const t0 = performance.now();
    for (let i = 0; i < 5; i++) await fresh.generate(p, { maxNewTokens: 1, seed: i });
    const prefilling = performance.now() - t0;
    const t1 = performance.now();
    for (let i = 0; i < 5; i++) await cached.generate(p, { maxNewTokens: 1, seed: i });
    console.log(`5 one-token samples of a 70-token prompt: ${prefilling.toFixed(1)} ms prefilling each, ${(performance.now() - t1).toFixed(1)} ms with the cache`);
    // a weight change empties it: the next sample is what the new weights give
    const name = 'model.norm.weight';
    const w = await cached.getParam(name);
    await cached.setParam(
      name,
      w.map((v) => v * 1.5),
    );
    await fresh.setParam(
      name,
      w.map((v) => v * 1.5),
    );
    same(await cached.generate(p, opts[0]), await fresh.generate(p, opts[0]), 'after a weight change');
  } finally {
    fresh.close();
    cached.close();
  }
});
