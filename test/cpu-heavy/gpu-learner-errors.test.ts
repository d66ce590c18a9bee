// gpu-learner rejects bad input with an Error naming the field/file and the value, and the process
// (and the model) keep working afterwards.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { Learner, writeRandomCheckpoint, type QwenConfig } from '../../gpu-learner/index.ts';
import { tinyModelConfig, trainHyper } from '../helpers/tiny-model.ts';

const root = mkdtempSync(join(tmpdir(), 'gl-err-'));
const config = tinyModelConfig({
  vocab_size: 32,
  hidden_size: 16,
  intermediate_size: 24,
  num_hidden_layers: 1,
  num_attention_heads: 2,
  num_key_value_heads: 1,
  head_dim: 8,
  max_position_embeddings: 64,
  tie_word_embeddings: false,
});
const hp = trainHyper();
const good = join(root, 'good');
let learner: Learner;
before(async () => {
  writeRandomCheckpoint(good, config, 1);
  learner = await Learner.load(good, { threads: 1 });
});
after(() => {
  learner?.close();
  rmSync(root, { recursive: true, force: true });
});

const ids = Int32Array.from([1, 2, 3, 4, 5, 6]);
const offsets = Int32Array.from([0, 2, 6]);
const batch = () => ({ ids, offsets, mask: new Float32Array(6).fill(1), advantages: Float32Array.from([1, -1]) });

test('logprobs: inconsistent offsets and out-of-vocabulary ids', async () => {
  await assert.rejects(learner.logprobs({ ids, offsets: Int32Array.from([0, 2, 5]) }), /offsets\[2\]=5 must equal ids.length=6/);
  await assert.rejects(learner.logprobs({ ids, offsets: Int32Array.from([0, 4, 2, 6]) }), /offsets must be non-decreasing: offsets\[2\]=2 < offsets\[1\]=4/);
  await assert.rejects(learner.logprobs({ ids, offsets: Int32Array.from([1, 6]) }), /offsets\[0\] must be 0, got 1/);
  await assert.rejects(learner.logprobs({ ids: Int32Array.from([1, 99, 2]), offsets: Int32Array.from([0, 3]) }), /ids\[1\]=99 is outside the vocabulary \[0, 32\)/);
  await assert.rejects(learner.logprobs({ ids: Int32Array.from([1, -4]), offsets: Int32Array.from([0, 2]) }), /ids\[1\]=-4/);
  await assert.rejects(learner.logprobs({ ids: [1, 2] as unknown as Int32Array, offsets }), /batch.ids must be an Int32Array/);
});

test('trainStep: mismatched lengths and bad hyperparameters', async () => {
  await assert.rejects(learner.trainStep({ ...batch(), mask: new Float32Array(5) }, hp), /batch.mask.length=5 must equal batch.ids.length=6/);
  await assert.rejects(learner.trainStep({ ...batch(), advantages: new Float32Array(3) }, hp), /batch.advantages.length=3 must equal the number of sequences 2/);
  await assert.rejects(learner.trainStep({ ...batch(), oldLogprobs: new Float32Array(4) }, hp), /batch.oldLogprobs.length=4 must equal batch.ids.length=6/);
  await assert.rejects(learner.trainStep({ ...batch(), advantages: Float32Array.from([1, NaN]) }, hp), /advantages\[1\]=nan is not finite/);
  await assert.rejects(learner.trainStep({ ...batch(), mask: Float32Array.from([1, 1, -1, 1, 1, 1]) }, hp), /mask\[2\]=-1 must be finite and >= 0/);
  await assert.rejects(learner.trainStep(batch(), { ...hp, lr: NaN }), /lr must be a finite number in \[0, inf\), got nan/);
  await assert.rejects(learner.trainStep(batch(), { ...hp, clipLow: 1.5 }), /clipLow must be a finite number in \[0, 1\), got 1.5/);
  await assert.rejects(learner.trainStep(batch(), { ...hp, beta2: 1 }), /beta2/);
  await assert.rejects(learner.trainStep(batch(), { ...hp, lMax: 0 }), /lMax must be a finite number in \(0, inf\), got 0/);
  await assert.rejects(learner.trainStep(batch(), { ...hp, mode: 'ppo' as 'grpo' }), /mode must be "grpo\+\+" or "grpo", got "ppo"/);
  await assert.rejects(learner.trainStep(batch(), { ...hp, microBatchTokens: 0 }), /microBatchTokens must be an integer >= 1/);
  await assert.rejects(learner.trainStep(batch(), { ...hp, maxGradNorm: undefined as unknown as number }), /maxGradNorm is required/);
  assert.equal(learner.step, 0, 'nothing stepped');
});

test('generate: bad prompt and options', async () => {
  await assert.rejects(learner.generate(Int32Array.from([1, 40]), { maxNewTokens: 2, seed: 1 }), /promptIds\[1\]=40 is outside the vocabulary/);
  await assert.rejects(learner.generate(new Int32Array(0), { maxNewTokens: 2, seed: 1 }), /promptIds must not be empty/);
  await assert.rejects(learner.generate(Int32Array.from([1]), { maxNewTokens: 2, seed: 1, topP: 0 }), /topP must be a finite number in \(0, 1\], got 0/);
  await assert.rejects(learner.generate(Int32Array.from([1]), { maxNewTokens: 2, seed: 1, temperature: -1 }), /temperature/);
  await assert.rejects(learner.generate(Int32Array.from([1]), { maxNewTokens: 2, seed: 1, allowedIds: [3, 77] }), /allowedIds\[1\]=77 is outside the vocabulary/);
  await assert.rejects(learner.generate(Int32Array.from([1]), { maxNewTokens: -1, seed: 1 }), /maxNewTokens must be an integer >= 0, got -1/);
  await assert.rejects(learner.generate(Int32Array.from([1]), { maxNewTokens: 1, seed: 1, stopIds: [1.5] }), /stopIds\[0\]=1.5 is not an integer/);
  await assert.rejects(learner.generate(Int32Array.from(new Array(64).fill(1)), { maxNewTokens: 1, seed: 1 }), /max_position_embeddings=64/);
  // generation stops at max_position_embeddings with 'length'
  const g = await learner.generate(Int32Array.from(new Array(60).fill(1)), { maxNewTokens: 10, seed: 1 });
  assert.equal(g.ids.length, 4);
  assert.equal(g.finishReason, 'length');
});

test('emulateHalf: an unknown type is named; such a learner computes log-probs and refuses to train, generate or run on CUDA', async (t) => {
  await assert.rejects(Learner.load(good, { threads: 1, emulateHalf: 'int8' as 'bf16' }), /emulateHalf must be 'bf16' or 'fp16', got "int8"/);
  await assert.rejects(Learner.load(good, { device: 'cuda', emulateHalf: 'bf16' }), /emulateHalf: the CPU engine's option \(device "cpu"\), got device "cuda"/);
  const half = await Learner.load(good, { threads: 1, emulateHalf: 'bf16' });
  t.after(() => half.close());
  const lp = await half.logprobs({ ids, offsets });
  assert.ok(lp.every(Number.isFinite), 'log-probs computed');
  await assert.rejects(half.trainStep(batch(), hp), /trainStep: this learner was loaded with emulateHalf, which computes log-probs only/);
  await assert.rejects(half.generate(Int32Array.from([1]), { maxNewTokens: 1, seed: 1 }), /generate: this learner was loaded with emulateHalf/);
  assert.equal(half.step, 0);
});

test('load: missing config field, truncated file, header garbage, wrong shape, missing tensor, no CUDA', async () => {
  const mk = (name: string, c: QwenConfig = config) => {
    const d = join(root, name);
    writeRandomCheckpoint(d, c, 2);
    return d;
  };
  const noHeadDim = mk('no-head-dim');
  const cfg = JSON.parse(readFileSync(join(noHeadDim, 'config.json'), 'utf8'));
  delete cfg.head_dim;
  writeFileSync(join(noHeadDim, 'config.json'), JSON.stringify(cfg));
  await assert.rejects(Learner.load(noHeadDim), /no-head-dim\/config.json: missing required field "head_dim"/);

  const truncated = mk('truncated');
  const st = join(truncated, 'model.safetensors');
  truncateSync(st, statSync(st).size - 100);
  await assert.rejects(Learner.load(truncated), (e: Error) =>
    /truncated\/model.safetensors: tensor "[^"]+": data ends at byte \d+ but the file has only \d+ bytes \(truncated file\)/.test(e.message),
  );

  const garbage = mk('garbage');
  const buf = Buffer.alloc(24);
  buf.writeBigUInt64LE(16n);
  buf.write('{"not": json!!!}', 8);
  writeFileSync(join(garbage, 'model.safetensors'), buf);
  await assert.rejects(Learner.load(garbage), /garbage\/model.safetensors \(safetensors header\): JSON parse error at byte/);
  writeFileSync(join(garbage, 'model.safetensors'), Buffer.from('hello'));
  await assert.rejects(Learner.load(garbage), /truncated safetensors file \(5 bytes, no header\)/);

  const shape = mk('shape');
  writeFileSync(join(shape, 'config.json'), JSON.stringify({ ...config, model_type: 'qwen3', intermediate_size: 20 }));
  await assert.rejects(Learner.load(shape), /shape\/model.safetensors: tensor "model.layers.0.mlp.gate_proj.weight" has shape \[24, 16\], expected \[20, 16\]/);

  const missing = mk('missing', { ...config, tie_word_embeddings: true });
  writeFileSync(join(missing, 'config.json'), JSON.stringify({ ...config, model_type: 'qwen3', tie_word_embeddings: false }));
  await assert.rejects(Learner.load(missing), /tensor "lm_head.weight" missing \(expected shape \[32, 16\]\)/);

  await assert.rejects(Learner.load(join(root, 'nowhere')), /nowhere\/config.json: file not found/);
  await assert.rejects(Learner.load(good, { device: 'cuda' }), /CUDA backend not built \(no nvcc found at build time\)/);
  await assert.rejects(Learner.load(good, { device: 'tpu' as 'cpu' }), /device must be 'cpu' or 'cuda'/);
});

test('non-finite gradient norm skips the update; the model keeps working; closed learner rejects', async () => {
  const l = await Learner.load(good, { threads: 1 });
  const w = await l.getParam('model.norm.weight');
  const emb = await l.getParam('model.embed_tokens.weight');
  await l.setParam(
    'model.norm.weight',
    Float32Array.from(w, (v, i) => (i === 0 ? Infinity : v)),
  );
  const st = await l.trainStep(batch(), hp);
  assert.equal(st.skipped, true);
  assert.equal(st.step, 0);
  assert.ok(!Number.isFinite(st.gradNorm));
  assert.deepEqual(await l.getParam('model.embed_tokens.weight'), emb, 'weights untouched');
  await l.setParam('model.norm.weight', w);
  const ok = await l.trainStep(batch(), hp);
  assert.equal(ok.skipped, false);
  assert.equal(ok.step, 1);
  l.close();
  await assert.rejects(l.logprobs({ ids, offsets }), /Learner is closed/);
  // the shared learner still answers after all the rejected calls
  const lp = await learner.logprobs({ ids, offsets });
  assert.equal(lp.length, 6);
});

test('config.json as transformers 5 writes it: rope_parameters read, other RoPE types refused, dtype float32 on save', async () => {
  const mk = (name: string, edit: (c: Record<string, unknown>) => void, dtype: 'F32' | 'BF16' = 'F32') => {
    const d = join(root, name);
    writeRandomCheckpoint(d, config, 3, { dtype });
    const c = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8'));
    edit(c);
    writeFileSync(join(d, 'config.json'), JSON.stringify(c, null, 2));
    return d;
  };
  // transformers 5: no top-level rope_theta, rope_parameters {rope_type, rope_theta}, "dtype", layer_types
  const v5 = mk(
    'v5',
    (c) => {
      delete c.rope_theta;
      delete c.torch_dtype;
      Object.assign(c, { rope_parameters: { rope_theta: 10000, rope_type: 'default' }, dtype: 'bfloat16', layer_types: ['full_attention'] });
    },
    'BF16',
  );
  const v4 = mk('v4', (c) => Object.assign(c, { rope_scaling: null }), 'BF16');
  const a = await Learner.load(v5, { threads: 1 });
  const b = await Learner.load(v4, { threads: 1 });
  assert.deepEqual(await a.logprobs({ ids, offsets }), await b.logprobs({ ids, offsets }), 'same RoPE from rope_parameters as from rope_theta');
  const saved = join(root, 'v5-saved');
  await a.save(saved);
  a.close();
  b.close();
  const out = JSON.parse(readFileSync(join(saved, 'config.json'), 'utf8'));
  assert.equal(out.dtype, 'float32', 'F32 weights are not labelled bfloat16');
  assert.deepEqual(out.rope_parameters, { rope_theta: 10000, rope_type: 'default' }, 'the rest is kept');
  const header = readFileSync(join(saved, 'model.safetensors'));
  assert.match(header.subarray(8, 8 + Number(header.readBigUInt64LE(0))).toString(), /"dtype":"F32"/);

  const yarn = mk('yarn', (c) => {
    delete c.rope_theta;
    c.rope_parameters = { rope_type: 'yarn', rope_theta: 1e6, factor: 4 };
  });
  await assert.rejects(Learner.load(yarn), /yarn\/config.json: field "rope_parameters.rope_type" is "yarn": this RoPE type is not implemented \(only "default" RoPE\)/);
  const linear = mk('linear', (c) => (c.rope_scaling = { type: 'linear', factor: 2 }));
  await assert.rejects(Learner.load(linear), /field "rope_scaling.rope_type" is "linear": this RoPE type is not implemented/);
  const noTheta = mk('no-theta', (c) => delete c.rope_theta);
  await assert.rejects(Learner.load(noTheta), /missing required field "rope_theta" \(or "rope_parameters.rope_theta"\)/);
  const sliding = mk('sliding', (c) => (c.layer_types = ['sliding_attention']));
  await assert.rejects(Learner.load(sliding), /field "layer_types" holds "sliding_attention": only "full_attention" layers are supported/);
});

test('architecture from config.json: Llama, Qwen2 and Mistral load with their switches; what is not implemented is refused by name', async () => {
  // writes a random checkpoint of `c`, then applies `edit` to its config.json (the weights stay those of `c`)
  const mk = (name: string, c: QwenConfig, edit: (j: Record<string, unknown>) => void = () => {}) => {
    const d = join(root, name);
    writeRandomCheckpoint(d, c, 4);
    const j = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8'));
    edit(j);
    writeFileSync(join(d, 'config.json'), JSON.stringify(j));
    return d;
  };
  const llama = mk('llama', { ...config, model_type: 'llama', tie_word_embeddings: true }, (j) => delete j.head_dim);
  const l = await Learner.load(llama, { threads: 1 });
  assert.equal(l.config.model_type, 'llama');
  assert.equal(l.config.head_dim, 8, 'head_dim derived as hidden/heads');
  assert.equal(l.config.qk_norm, false);
  assert.ok(!(await l.paramInfo()).some((p) => p.name.includes('q_norm')));
  l.close();
  const qwen2 = mk('qwen2', { ...config, model_type: 'qwen2' });
  const q = await Learner.load(qwen2, { threads: 1 });
  const names = (await q.paramInfo()).map((p) => p.name);
  assert.ok(names.includes('model.layers.0.self_attn.v_proj.bias') && !names.includes('model.layers.0.self_attn.o_proj.bias'));
  assert.deepEqual([q.config.qkv_bias, q.config.o_bias], [true, false]);
  q.close();
  // Mistral: transformers' default sliding_window (4096) acts below max_position_embeddings; null is full attention
  const mistral = { ...config, model_type: 'mistral' as const, max_position_embeddings: 8192 };
  (
    await Learner.load(
      mk('mistral', mistral, (j) => (j.sliding_window = null)),
      { threads: 1 },
    )
  ).close();
  await assert.rejects(Learner.load(mk('mistral-window', mistral)), /field "sliding_window" is 4096 \(the mistral default\), below max_position_embeddings=8192/);

  const refused: [string, QwenConfig, (j: Record<string, unknown>) => void, RegExp][] = [
    [
      'gemma',
      config,
      (j) => ((j.model_type = 'gemma'), delete j.architectures),
      /field "model_type" is "gemma": architecture not implemented \(supported: qwen3, qwen2, llama, mistral\)/,
    ],
    ['no-arch', config, (j) => (delete j.model_type, delete j.architectures), /missing required field "model_type" \(or "architectures"\)/],
    ['mismatch', config, (j) => (j.architectures = ['LlamaForCausalLM']), /field "architectures" is \["LlamaForCausalLM"\] but "model_type" is "qwen3"/],
    ['mlp-bias', { ...config, model_type: 'llama' }, (j) => (j.mlp_bias = true), /field "mlp_bias"=true is not supported/],
    ['qwen2-attn-bias', { ...config, model_type: 'qwen2' }, (j) => (j.attention_bias = true), /field "attention_bias"=true is not a setting of qwen2/],
    ['gelu', config, (j) => (j.hidden_act = 'gelu'), /field "hidden_act" is "gelu": only "silu"/],
    [
      'partial-rope',
      { ...config, model_type: 'llama' },
      (j) => (j.rope_scaling = { rope_type: 'default', partial_rotary_factor: 0.5 }),
      /field "rope_scaling.partial_rotary_factor" is 0.5/,
    ],
    [
      'llama3-rope',
      { ...config, model_type: 'llama' },
      (j) => (j.rope_scaling = { rope_type: 'llama3', factor: 8 }),
      /"rope_scaling.rope_type" is "llama3": this RoPE type is not implemented/,
    ],
    ['dropout', config, (j) => (j.attention_dropout = 0.1), /field "attention_dropout" is 0.1: dropout is not implemented/],
    ['qwen2-window', { ...config, model_type: 'qwen2' }, (j) => (j.use_sliding_window = true), /field "use_sliding_window"=true is not supported/],
    // weights the config does not describe: Qwen3 with attention bias read as Qwen2 (o_proj bias and q/k norms left over)
    [
      'stray-tensor',
      { ...config, attention_bias: true },
      (j) => ((j.model_type = 'qwen2'), (j.architectures = ['Qwen2ForCausalLM']), delete j.attention_bias),
      /tensor "model.layers.0.self_attn.[\w.]+" is not part of a qwen2 model as config.json describes it/,
    ],
    // tie mismatch: an untied checkpoint whose config says tied
    ['tie-mismatch', config, (j) => (j.tie_word_embeddings = true), /"tie_word_embeddings"=true but the checkpoint's "lm_head.weight" differs from "model.embed_tokens.weight"/],
  ];
  for (const [name, c, edit, re] of refused) await assert.rejects(Learner.load(mk(name, c, edit)), re, name);
});
