// A GRPO group's shared prompt forwarded once (gpu-learner/src/row_plan.h): log-probs, the GRPO++ loss and every
// gradient equal those of the sequences run one by one (fp32, sums in another order: the oracle's tolerances,
// gpu-learner/fsdp/crosscheck.ts), on Qwen3, Llama and Qwen2 shapes, with groups split across micro-batches, a
// response of no tokens, a lone sequence and two groups sharing only a system prompt.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { TOLERANCE } from '../../gpu-learner/fsdp/crosscheck.ts';
import { Learner, writeRandomCheckpoint, type QwenConfig, type TrainBatch } from '../../gpu-learner/index.ts';
import { tinyModelConfig, trainHyper } from '../helpers/tiny-model.ts';

const root = mkdtempSync(join(tmpdir(), 'gl-prefix-'));
after(() => rmSync(root, { recursive: true, force: true }));

const base = tinyModelConfig({ vocab_size: 61, head_dim: 8, max_position_embeddings: 512, tie_word_embeddings: false });

/** groups of [prompt, responses]; the batch lists each group's sequences prompt + response, masks 0 on prompts */
function groupedBatch(vocab: number): { batch: TrainBatch; rows: number } {
  let s = 7;
  const tok = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % vocab;
  const toks = (n: number) => Array.from({ length: n }, tok);
  const system = toks(40);
  const groups: [number[], number[][]][] = [
    [
      [...system, ...toks(30)],
      [toks(25), toks(0), toks(50), toks(7)],
    ],
    [[...system, ...toks(20)], [toks(33)]], // alone: shares only the system prompt with its neighbours
    [
      [...system, ...toks(60)],
      [toks(12), toks(40), toks(3)],
    ],
  ];
  const ids: number[] = [],
    offsets = [0],
    mask: number[] = [],
    advantages: number[] = [];
  for (const [g, [prompt, responses]] of groups.entries())
    for (const [i, r] of responses.entries()) {
      ids.push(...prompt, ...r);
      mask.push(...prompt.map(() => 0), ...r.map(() => 1));
      offsets.push(ids.length);
      advantages.push([1, -0.5, 0.25, -1][(g + i) % 4]);
    }
  const batch = { ids: Int32Array.from(ids), offsets: Int32Array.from(offsets), mask: Float32Array.from(mask), advantages: Float32Array.from(advantages) };
  return { batch, rows: ids.length };
}

const relL2 = (a: Float32Array, b: Float32Array) => {
  let d = 0,
    n = 0;
  for (let i = 0; i < a.length; i++) [d, n] = [d + (a[i] - b[i]) ** 2, n + b[i] ** 2];
  return Math.sqrt(d) / Math.max(Math.sqrt(n), 1e-30);
};

for (const [name, config] of [
  ['qwen3', base],
  ['llama', { ...base, model_type: 'llama', tie_word_embeddings: true }],
  ['qwen2', { ...base, model_type: 'qwen2', rope_theta: 1e6 }],
] as [string, QwenConfig][]) {
  test(`${name}: shared prompts forwarded once give the log-probs, loss and gradients of the sequences one by one`, async () => {
    const dir = join(root, name);
    writeRandomCheckpoint(dir, config, 5, { std: 0.1, normNoise: 0.1 });
    const plain = await Learner.load(dir, { threads: 2, minSharedPrefix: 0 });
    const shared = await Learner.load(dir, { threads: 2, minSharedPrefix: 16 });
    try {
      const { batch } = groupedBatch(config.vocab_size);
      const want = await plain.logprobs(batch);
      const got = await shared.logprobs(batch);
      let lp = 0;
      for (let i = 0; i < want.length; i++) lp = Math.max(lp, Math.abs(got[i] - want[i]));
      assert.ok(lp <= TOLERANCE.logprobs, `log-probs differ by ${lp}`);
      assert.ok(want.some((v, i) => i > 0 && v !== 0));
      batch.oldLogprobs = Float32Array.from(want, (v, t) => Math.min(0, v - [0.3, -0.3, 0][t % 3]));
      for (const microBatchTokens of [4096, 150]) {
        // 150 rows: groups split across micro-batches, each part forwarding the prompt again
        const hp = trainHyper({ weightDecay: 0, lMax: 64, microBatchTokens });
        const a = await plain.debugGradients(batch, hp);
        const b = await shared.debugGradients(batch, hp);
        assert.ok(Math.abs(a.loss - b.loss) <= TOLERANCE.loss * Math.abs(a.loss), `loss ${b.loss} vs ${a.loss}`);
        for (const [p, g] of a.grads) assert.ok(relL2(b.grads.get(p)!, g) <= TOLERANCE.gradient, `${p}: rel-L2 ${relL2(b.grads.get(p)!, g)} (micro-batch ${microBatchTokens})`);
      }
      // the prompts really were shared: a step forwards fewer rows than the batch has tokens
      const hp = trainHyper({ weightDecay: 0, lMax: 64 });
      const st = await shared.trainStep(batch, hp);
      assert.equal((await plain.trainStep(batch, hp)).rows, batch.ids.length);
      // group 1: 70-token prompt, 4 members: 3 × 69 rows saved; group 3: 100-token prompt, 3 members: 2 × 99
      assert.equal(st.rows, batch.ids.length - 3 * 69 - 2 * 99);
    } finally {
      plain.close();
      shared.close();
    }
  });
}

test("a step reports each trained token's log-prob on the weights before it, from its own forward", async () => {
  const dir = join(root, 'step-logprobs');
  writeRandomCheckpoint(dir, base, 6, { std: 0.1, normNoise: 0.1 });
  for (const minSharedPrefix of [0, 16]) {
    const learner = await Learner.load(dir, { threads: 2, minSharedPrefix });
    try {
      const { batch } = groupedBatch(base.vocab_size);
      batch.mask[batch.offsets[1] - 3] = 0; // an untrained response token
      batch.advantages[2] = 0; // a sequence whose tokens add 0 (still asked: its mask is 1)
      const before = await learner.logprobs(batch);
      // 150 rows: groups split across micro-batches
      const st = await learner.trainStep(batch, trainHyper({ lMax: 64, microBatchTokens: 150 }));
      assert.equal(st.logprobs.length, batch.ids.length);
      let trained = 0;
      for (let t = 0; t < batch.ids.length; t++) {
        if (batch.mask[t] === 0) {
          assert.ok(Number.isNaN(st.logprobs[t]), `token ${t} is not trained, yet has ${st.logprobs[t]}`);
          continue;
        }
        trained++;
        assert.ok(Math.abs(st.logprobs[t] - before[t]) <= TOLERANCE.logprobs, `token ${t}: ${st.logprobs[t]} vs ${before[t]} (shared prefix ${minSharedPrefix})`);
      }
      assert.equal(
        trained,
        batch.mask.reduce((n, m) => n + (m !== 0 ? 1 : 0), 0),
      );
      // they are the weights' before the step: after it, the log-probs moved
      const after = await learner.logprobs(batch);
      assert.ok(
        after.some((v, t) => batch.mask[t] !== 0 && Math.abs(v - before[t]) > 100 * TOLERANCE.logprobs),
        'the step changed no log-prob',
      );
    } finally {
      learner.close();
    }
  }
});
