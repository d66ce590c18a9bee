// `swerl model export-gguf`: a Hugging Face checkpoint directory (an import, or a checkpoint our learners saved)
// → one GGUF file that llama-server serves. The conversion is llama.cpp's own convert_hf_to_gguf.py, unpacked by
// scripts/ensure-llama.sh from the same sources as the server binary (so the file's format and its tokenizer
// metadata are what that server reads), run with the torch venv's python. What it cannot convert, such as a
// tokenizer whose pre-tokenizer llama.cpp does not know (our presets'), is refused with a ModelImportError.
import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { fsdpPython } from '../../gpu-learner/fsdp/index.ts';
import { ensureLlama } from '../../services/llama-server.ts';
import { ModelImportError, type ProgressFn } from './python.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export const GGUF_OUT_TYPES = ['f32', 'f16', 'bf16', 'q8_0'] as const;

export const GgufExportOptionsSchema = z.object({
  model: z.string({ error: 'model: required (--model DIR)' }).min(1, 'model: must not be empty'),
  out: z
    .string({ error: 'out: required (--out FILE.gguf)' })
    .refine((s) => s.endsWith('.gguf'), { error: (i) => `out: expected a file name ending in .gguf, got ${JSON.stringify(i.input)}` }),
  outtype: z
    .enum(GGUF_OUT_TYPES, { error: (i) => `outtype: expected one of ${GGUF_OUT_TYPES.join(', ')}, got ${JSON.stringify(i.input)}` })
    .default('f32')
    .describe('f32 keeps the checkpoint as trained; f16, bf16 and q8_0 are smaller and round it'),
});
export type GgufExportOptions = z.input<typeof GgufExportOptionsSchema> & {
  /** the torch venv's python (default: scripts/ensure-python.sh torch) */
  python?: string;
  /** the directory holding convert_hf_to_gguf.py (default: .tools/llama/convert from scripts/ensure-llama.sh) */
  converter?: string;
  onProgress?: ProgressFn;
};

export interface GgufExport {
  file: string;
  bytes: number;
  outtype: (typeof GGUF_OUT_TYPES)[number];
  seconds: number;
}

function parseOptions(raw: GgufExportOptions) {
  const parsed = GgufExportOptionsSchema.safeParse(raw);
  if (!parsed.success) {
    const i = parsed.error.issues[0]!;
    throw new ModelImportError('bad_option', i.message.includes(':') ? i.message : `${i.path.join('.')}: ${i.message}`);
  }
  const o = parsed.data;
  const model = resolve(o.model);
  for (const f of ['config.json', 'tokenizer.json']) {
    if (!existsSync(join(model, f))) throw new ModelImportError('bad_option', `model: ${model} has no ${f}: expected a Hugging Face checkpoint directory`);
  }
  const out = resolve(o.out);
  if (existsSync(out)) throw new ModelImportError('out_exists', `out: ${out} exists`);
  return { ...o, model, out };
}

/** The converter's failure as a named ModelImportError when its message says what it is. */
function classify(stderr: string, code: number | null): Error {
  const last = stderr.trim().split('\n').slice(-12).join('\n');
  if (/BPE pre-tokenizer was not recognized/.test(stderr)) {
    return new ModelImportError(
      'unsupported_tokenizer',
      "model: llama.cpp does not know this tokenizer's pre-tokenizer (it identifies one by hashing how it splits a test text); an imported real model's tokenizer converts, a preset's does not",
    );
  }
  const arch = /Model (\S+) is not supported/.exec(stderr);
  if (arch) return new ModelImportError('unsupported_architecture', `model: architecture ${arch[1]} is not one llama.cpp's converter supports`);
  if (/No space left on device|Errno 28/.test(stderr)) return new ModelImportError('no_space', `no space left on the device while writing the GGUF: ${last.split('\n').at(-1)}`);
  return new Error(`convert_hf_to_gguf.py failed (exit ${code}):\n${last}`);
}

/** Converts `model` to `out` (written under a temporary name, renamed when complete). */
export async function exportGguf(raw: GgufExportOptions): Promise<GgufExport> {
  const t0 = Date.now();
  const o = parseOptions(raw);
  const converter = raw.converter ?? ensureLlama(ROOT).converter;
  const python = raw.python ?? fsdpPython('cpu');
  await mkdir(dirname(o.out), { recursive: true });
  const tmp = `${o.out}.export-${process.pid}`;
  const phases: [RegExp, string][] = [
    [/Exporting model/, 'reading the checkpoint'],
    [/Set model tokenizer/, 'converting the tokenizer'],
    [/Writing the following files/, 'writing the GGUF'],
  ];
  try {
    await new Promise<void>((done, fail) => {
      const child = spawn(python, [join(converter, 'convert_hf_to_gguf.py'), o.model, '--outfile', tmp, '--outtype', o.outtype], {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...process.env, HF_HUB_OFFLINE: '1', TQDM_DISABLE: '1', PYTHONUNBUFFERED: '1' },
      });
      let stderr = '';
      let seen = 0;
      child.stderr.on('data', (b: Buffer) => {
        stderr += b.toString('utf8');
        if (stderr.length > 400_000) stderr = stderr.slice(-200_000);
        for (; seen < phases.length && phases[seen]![0].test(stderr); seen++) raw.onProgress?.({ phase: phases[seen]![1], done: seen + 1, total: phases.length });
      });
      child.once('error', fail);
      child.once('exit', (code) => (code === 0 ? done() : fail(classify(stderr, code))));
    });
    await rename(tmp, o.out);
    return { file: o.out, bytes: statSync(o.out).size, outtype: o.outtype, seconds: (Date.now() - t0) / 1000 };
  } finally {
    await rm(tmp, { force: true });
  }
}
