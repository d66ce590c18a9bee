import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile, mkdir, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { decoderTensorShapes, type Qwen3Config } from '../../lib/presets.ts';
import { writeModel } from '../../lib/model-init.ts';
import { modelInit } from '../../scripts/commands/model.ts';

const root = await mkdtemp(join(tmpdir(), 'swerl-init-'));
test.after(() => rm(root, { recursive: true, force: true }));
const repo = fileURLToPath(new URL('../..', import.meta.url));

interface Tensor {
  dtype: string;
  shape: number[];
  data: Float32Array;
}
async function readSafetensors(path: string): Promise<Map<string, Tensor>> {
  const buf = await readFile(path);
  const n = Number(buf.readBigUInt64LE(0));
  assert.equal((8 + n) % 8, 0, 'data starts 8-byte aligned');
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const out = new Map<string, Tensor>();
  let end = 0;
  for (const [name, h] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [a, b] = h.data_offsets;
    const bytes = buf.subarray(8 + n + a, 8 + n + b);
    const copy = new Uint8Array(bytes); // aligned copy
    out.set(name, { dtype: h.dtype, shape: h.shape, data: new Float32Array(copy.buffer) });
    end = Math.max(end, b);
  }
  assert.equal(8 + n + end, buf.length, 'no trailing bytes');
  return out;
}

test('same seed gives identical files; a different seed gives different weights only', async () => {
  const a = await writeModel(join(root, 'a'), 'tiny', 7);
  const b = await writeModel(join(root, 'b'), 'tiny', 7);
  const c = await writeModel(join(root, 'c'), 'tiny', 8);
  assert.deepEqual((await readdir(a.dir)).sort(), a.files);
  for (const f of a.files) assert.ok((await readFile(join(a.dir, f))).equals(await readFile(join(b.dir, f))), `${f} identical for the same seed`);
  for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) {
    assert.ok((await readFile(join(a.dir, f))).equals(await readFile(join(c.dir, f))), `${f} independent of the seed`);
  }
  const wa = await readSafetensors(join(a.dir, 'model.safetensors'));
  const wc = await readSafetensors(join(c.dir, 'model.safetensors'));
  const ea = wa.get('model.embed_tokens.weight')!.data;
  const ec = wc.get('model.embed_tokens.weight')!.data;
  assert.notDeepEqual(ea.subarray(0, 16), ec.subarray(0, 16));
  assert.deepEqual(wa.get('model.norm.weight')!.data, wc.get('model.norm.weight')!.data);
});

for (const [preset, expect] of [
  [
    'tiny',
    { vocab_size: 512, hidden_size: 128, num_hidden_layers: 4, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32, intermediate_size: 384, tie_word_embeddings: true },
  ],
  [
    'frozenlake',
    { vocab_size: 117, hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, intermediate_size: 192, tie_word_embeddings: false },
  ],
] as const) {
  test(`${preset}: config fields and tensors`, async () => {
    const m = await writeModel(join(root, `cfg-${preset}`), preset, 1);
    const config = JSON.parse(await readFile(join(m.dir, 'config.json'), 'utf8')) as Qwen3Config;
    assert.deepEqual(config, m.config);
    for (const [k, v] of Object.entries(expect)) assert.equal(config[k as keyof Qwen3Config], v, k);
    assert.deepEqual(config.architectures, ['Qwen3ForCausalLM']);
    assert.equal(config.model_type, 'qwen3');
    assert.equal(config.rope_theta, 1e6);
    assert.equal(config.rms_norm_eps, 1e-6);
    assert.equal(config.max_position_embeddings, 4096);
    assert.equal(config.attention_bias, false);
    assert.equal(config.torch_dtype, 'float32');
    const tokCfg = JSON.parse(await readFile(join(m.dir, 'tokenizer_config.json'), 'utf8')) as { eos_token: string };
    const tokJson = JSON.parse(await readFile(join(m.dir, 'tokenizer.json'), 'utf8')) as { added_tokens: { id: number; content: string }[] };
    assert.equal(tokJson.added_tokens.find((t) => t.content === tokCfg.eos_token)!.id, config.eos_token_id);
    const gen = JSON.parse(await readFile(join(m.dir, 'generation_config.json'), 'utf8')) as { eos_token_id: number[] };
    assert.equal(gen.eos_token_id[0], config.eos_token_id);

    const w = await readSafetensors(join(m.dir, 'model.safetensors'));
    const shapes = decoderTensorShapes(config);
    assert.equal(w.size, shapes.length);
    assert.equal(w.has('lm_head.weight'), !config.tie_word_embeddings);
    for (const [name, shape] of shapes) {
      const t = w.get(name);
      assert.ok(t, `${name} present`);
      assert.equal(t.dtype, 'F32');
      assert.deepEqual(t.shape, shape, name);
      if (shape.length === 1)
        assert.ok(
          t.data.every((x) => x === 1),
          `${name} is ones`,
        );
      else {
        let s = 0,
          s2 = 0;
        for (const x of t.data) {
          s += x;
          s2 += x * x;
        }
        const mean = s / t.data.length,
          std = Math.sqrt(s2 / t.data.length - mean * mean);
        assert.ok(Math.abs(mean) < 0.002 && Math.abs(std - 0.02) < 0.002, `${name}: mean ${mean}, std ${std}`);
      }
    }
    assert.equal(
      m.parameters,
      shapes.reduce((a, [, s]) => a + s.reduce((x, y) => x * y, 1), 0),
    );
  });
}

test('bad preset, bad seed and bad --out fail with clear errors', async () => {
  await assert.rejects(
    modelInit({ out: join(root, 'x'), preset: 'huge' }),
    /preset: expected one of tiny, frozenlake, frozenlake32, frozenlake32-tied, frozenlake-rows, got "huge"/,
  );
  await assert.rejects(modelInit({ out: join(root, 'x'), preset: 'tiny', seed: 'abc' }), /seed/);
  await assert.rejects(modelInit({ out: join(root, 'x'), preset: 'tiny', seed: -1 }), /seed/);
  await assert.rejects(modelInit({ out: '', preset: 'tiny' }), /out: must not be empty/);
  await writeFile(join(root, 'afile'), 'x');
  await assert.rejects(modelInit({ out: join(root, 'afile'), preset: 'tiny' }), /out: .*afile exists and is not a directory/);
  await mkdir(join(root, 'full'));
  await writeFile(join(root, 'full', 'keep.txt'), 'x');
  await assert.rejects(modelInit({ out: join(root, 'full'), preset: 'tiny' }), /out: .*full exists and is not empty/);
  assert.deepEqual(await readdir(join(root, 'full')), ['keep.txt'], 'existing directory untouched');
  await assert.rejects(modelInit({ out: join(root, 'afile', 'sub'), preset: 'tiny' }), /out: cannot create parent directory/);
  // an empty existing directory is fine
  await mkdir(join(root, 'empty'));
  const m = await modelInit({ out: join(root, 'empty'), preset: 'frozenlake', seed: '3' });
  assert.equal(m.seed, 3);
  assert.ok(!(await readdir(root)).some((n) => n.includes('.tmp-')), 'no temp directories left behind');
});

test('swerl model init on the command line', async () => {
  const run = promisify(execFile);
  const out = join(root, 'cli');
  const { stdout } = await run(process.execPath, ['scripts/swerl.mjs', 'model', 'init', '--out', out, '--preset', 'frozenlake', '--seed', '5'], { cwd: repo });
  assert.match(stdout, /wrote frozenlake model \(seed 5/);
  assert.ok(existsSync(join(out, 'model.safetensors')));
  await assert.rejects(
    run(process.execPath, ['scripts/swerl.mjs', 'model', 'init', '--out', join(root, 'cli2'), '--preset', 'big'], { cwd: repo }),
    (e: { code: number; stderr: string }) => {
      assert.equal(e.code, 2);
      assert.match(e.stderr, /preset: expected one of tiny, frozenlake, frozenlake32, frozenlake32-tied, frozenlake-rows, got "big"/);
      return true;
    },
  );
});

test('checkpoints load in the native learner', async () => {
  const index = join(repo, 'gpu-learner', 'index.ts');
  const { Learner } = (await import(index)) as typeof import('../../gpu-learner/index.ts');
  for (const preset of ['tiny', 'frozenlake'] as const) {
    const m = await writeModel(join(root, `native-${preset}`), preset, 11);
    const learner = await Learner.load(m.dir, { device: 'cpu', threads: 1 });
    try {
      assert.equal(learner.config.vocab_size, m.config.vocab_size);
      const lp = await learner.logprobs({ ids: new Int32Array([1, 2, 3, 4]), offsets: new Int32Array([0, 4]) });
      assert.ok(lp.length >= 3 && Array.from(lp).every((x) => Number.isFinite(x) && x <= 0), `finite log-probs for ${preset}`);
      // random init at std 0.02 is close to uniform
      const uniform = -Math.log(m.config.vocab_size);
      assert.ok(
        Array.from(lp)
          .slice(1)
          .every((x) => Math.abs(x - uniform) < 0.5),
        `near-uniform for ${preset}: ${Array.from(lp)}`,
      );
    } finally {
      learner.close();
    }
  }
});
