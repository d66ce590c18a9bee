// Sharded Hugging Face checkpoints (model.safetensors.index.json + model-0000k-of-0000n.safetensors),
// as real Qwen3 releases ship them: same weights ⇒ bit-identical log-probs; a broken index is
// reported naming the file or tensor.
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { Learner, writeRandomCheckpoint, writeSafetensors } from '../../gpu-learner/index.ts';
import { tinyModelConfig } from '../helpers/tiny-model.ts';

const root = mkdtempSync(join(tmpdir(), 'gl-sharded-'));
const config = tinyModelConfig({
  vocab_size: 40,
  hidden_size: 16,
  intermediate_size: 24,
  num_hidden_layers: 3,
  head_dim: 8,
  max_position_embeddings: 64,
  tie_word_embeddings: false,
});
const single = join(root, 'single');
const batch = { ids: Int32Array.from([1, 7, 3, 39, 0, 12, 5, 5, 20]), offsets: Int32Array.from([0, 5, 9]) };
const tensors: { name: string; shape: number[]; data: Float32Array }[] = [];
let reference: Float32Array;

before(async () => {
  writeRandomCheckpoint(single, config, 4, { std: 0.2, normNoise: 0.2 });
  const l = await Learner.load(single, { threads: 1 });
  try {
    reference = await l.logprobs(batch);
    for (const p of await l.paramInfo()) tensors.push({ name: p.name, shape: p.shape, data: await l.getParam(p.name) });
  } finally {
    l.close();
  }
});
after(() => rmSync(root, { recursive: true, force: true }));

/** Writes `parts` shards (tensors dealt round-robin) and the index; returns the directory. */
function writeSharded(name: string, parts: number, mutateIndex?: (weightMap: Record<string, string>) => void): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(single, 'config.json'), join(dir, 'config.json'));
  const weightMap: Record<string, string> = {};
  for (let k = 0; k < parts; k++) {
    const file = `model-${String(k + 1).padStart(5, '0')}-of-${String(parts).padStart(5, '0')}.safetensors`;
    const mine = tensors.filter((_, i) => i % parts === k);
    writeSafetensors(join(dir, file), mine, 'F32');
    for (const t of mine) weightMap[t.name] = file;
  }
  mutateIndex?.(weightMap);
  const total = tensors.reduce((s, t) => s + 4 * t.data.length, 0);
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2));
  return dir;
}

test('a 3-shard checkpoint loads and gives bit-identical log-probs', async () => {
  const dir = writeSharded('three', 3);
  const l = await Learner.load(dir, { threads: 1 });
  try {
    assert.deepEqual(Array.from(await l.logprobs(batch)), Array.from(reference));
  } finally {
    l.close();
  }
});

test('an index naming a missing shard, or missing a tensor, is refused naming it', async () => {
  const missingShard = writeSharded('missing-shard', 2, (m) => {
    m['model.norm.weight'] = 'model-00009-of-00009.safetensors';
  });
  await assert.rejects(Learner.load(missingShard), /model-00009-of-00009\.safetensors/);

  const dropped = writeSharded('dropped', 2);
  // rewrite shard 2 without one of its tensors, keeping the index as is
  const shard2 = tensors.filter((_, i) => i % 2 === 1);
  const gone = shard2[0].name;
  writeSafetensors(join(dropped, 'model-00002-of-00002.safetensors'), shard2.slice(1), 'F32');
  await assert.rejects(Learner.load(dropped), (e: Error) => e.message.includes(gone));
});
