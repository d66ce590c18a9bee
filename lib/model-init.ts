// Checkpoint 0 of a test preset (lib/presets.ts): a Hugging Face directory (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json, generation_config.json) that gpu-learner and a real transformers install both
// read. Weights come from our own seeded RNG (lib/seed.ts) so the same (preset, seed) always gives the same bytes.
import { mkdir, open, readdir, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { decoderTensorShapes } from './qwen3.ts';
import { getPreset, presetConfig, type PresetName, type Qwen3Config } from './presets.ts';
import { encodeSafetensors, type NamedTensor } from './safetensors.ts';
import { sfc32, xmur3 } from './seed.ts';

/** Fills `out` with normal(0, std) samples (Box-Muller) from the stream named (seed, name). */
export function fillNormal(out: Float32Array, seed: number, name: string, std: number): void {
  const rnd = sfc32(xmur3(`a:${seed}:${name}`), xmur3(`b:${seed}:${name}`), xmur3(`c:${seed}:${name}`), xmur3(`d:${seed}:${name}`));
  for (let i = 0; i < 12; i++) rnd(); // warm-up
  for (let i = 0; i < out.length; i += 2) {
    const u1 = (rnd() + 0.5) / 4294967296;
    const u2 = (rnd() + 0.5) / 4294967296;
    const r = Math.sqrt(-2 * Math.log(u1)) * std;
    out[i] = r * Math.cos(2 * Math.PI * u2);
    if (i + 1 < out.length) out[i + 1] = r * Math.sin(2 * Math.PI * u2);
  }
}

/** Random init as transformers does for Qwen3: matrices normal(0, initializer_range), RMSNorm weights 1. */
export function initWeights(config: Qwen3Config, seed: number): NamedTensor[] {
  return decoderTensorShapes(config)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .map(([name, shape]) => {
      const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
      if (shape.length === 1) data.fill(1);
      else fillNormal(data, seed, name, config.initializer_range);
      return { name, shape, data };
    });
}

export interface WrittenModel {
  dir: string;
  preset: PresetName;
  seed: number;
  config: Qwen3Config;
  parameters: number;
  files: string[];
}

/**
 * Writes checkpoint 0 of `preset` into `dir` (created; must not exist or be an empty directory).
 * Atomic: files go to a sibling temp directory renamed into place, so `dir` exists only when complete.
 */
export async function writeModel(dir: string, preset: PresetName | string, seed = 0): Promise<WrittenModel> {
  const p = getPreset(preset);
  if (!Number.isSafeInteger(seed) || seed < 0) throw new Error(`seed: expected a non-negative integer, got ${String(seed)}`);
  const target = resolve(dir);
  const existing = await stat(target).catch(() => undefined);
  if (existing) {
    if (!existing.isDirectory()) throw new Error(`out: ${target} exists and is not a directory`);
    if ((await readdir(target)).length > 0) throw new Error(`out: ${target} exists and is not empty`);
  }
  const parent = dirname(target);
  try {
    await mkdir(parent, { recursive: true });
  } catch (e) {
    throw new Error(`out: cannot create parent directory ${parent}: ${(e as Error).message}`);
  }
  const tmp = join(parent, `.${basename(target)}.tmp-${process.pid}-${Date.now()}`);
  try {
    await mkdir(tmp);
  } catch (e) {
    throw new Error(`out: cannot write in ${parent}: ${(e as Error).message}`);
  }
  try {
    const tok = p.tokenizer();
    const config = presetConfig(p, tok);
    const tensors = initWeights(config, seed);
    const json = (v: unknown) => JSON.stringify(v, null, 2) + '\n';
    await writeFile(join(tmp, 'config.json'), json(config));
    await writeFile(join(tmp, 'tokenizer.json'), JSON.stringify(tok.tokenizerJson));
    await writeFile(join(tmp, 'tokenizer_config.json'), json(tok.tokenizerConfig));
    await writeFile(
      join(tmp, 'generation_config.json'),
      json({
        bos_token_id: tok.ids.endOfText,
        eos_token_id: [tok.ids.imEnd, tok.ids.endOfText],
        pad_token_id: tok.ids.endOfText,
        do_sample: true,
        temperature: 1.0,
        top_p: 1.0,
        transformers_version: config.transformers_version,
      }),
    );
    const fh = await open(join(tmp, 'model.safetensors'), 'w');
    try {
      for (const buf of encodeSafetensors(tensors, { metadata: { format: 'pt', swerl_preset: p.name, swerl_seed: String(seed) } })) await fh.write(buf);
      await fh.sync();
    } finally {
      await fh.close();
    }
    if (existing) await rmdir(target); // empty, checked above
    await rename(tmp, target);
    return {
      dir: target,
      preset: p.name,
      seed,
      config,
      parameters: tensors.reduce((a, t) => a + t.data.length, 0),
      files: ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'],
    };
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  }
}
