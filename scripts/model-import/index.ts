// `swerl model import`: a real pretrained model (a catalog name or any GGUF file) → a Hugging Face checkpoint
// directory (config.json, model.safetensors, tokenizer.json, tokenizer_config.json with the chat template,
// generation_config.json, a model card) that transformers, vLLM, the native engine and the FSDP engine load as
// it is. The GGUF's weights are dequantized: the model is the quantized model, in float32 or bfloat16.
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';
import { z } from 'zod';
import { catalogModel, CATALOG_NAMES, type CatalogModel } from '../../lib/model-catalog.ts';
import { autoToolFormat } from '../../lib/tokenizer.ts';
import { fsdpPython } from '../../gpu-learner/fsdp/index.ts';
import { ensureCatalogGguf, sha256File } from './fetch.ts';
import { ModelImportError, runImportScript, type ProgressFn } from './python.ts';

export { ModelImportError, type ImportProgress } from './python.ts';

export const ModelImportOptionsSchema = z.object({
  from: z.string({ error: 'from: required (--from NAME|FILE.gguf)' }).min(1, 'from: must not be empty'),
  out: z.string({ error: 'out: required (--out DIR)' }).min(1, 'out: must not be empty'),
  dtype: z.enum(['float32', 'bfloat16'], { error: (i) => `dtype: expected float32 or bfloat16, got ${JSON.stringify(i.input)}` }).default('float32'),
});
export type ModelImportOptions = z.input<typeof ModelImportOptionsSchema> & {
  /** downloads and assembled GGUFs (default $SWERL_MODEL_CACHE or ~/.cache/swerl/models) */
  cacheDir?: string;
  /** the torch venv's python (default: scripts/ensure-python.sh torch) */
  python?: string;
  onProgress?: ProgressFn;
};

/** What gguf_import.py convert reports. */
interface ConvertResult {
  architecture: string;
  name: string | null;
  license: string | null;
  /** general.file_type as llama.cpp names it (Q4_K_M), when the file says */
  quantization: string | null;
  preTokenizer: string | null;
  preTokenizerChecked: boolean;
  hasChatTemplate: boolean;
  tensorTypes: Record<string, number>;
  modelType: string;
  parameters: number;
  tied: boolean;
  vocabSize: number;
}

/** swerl-import.json: where an imported model came from, beside its weights. */
export interface ImportRecord {
  source: string;
  catalog: string | null;
  gguf: { file: string; bytes: number; sha256: string; quantization: string; tensorTypes: Record<string, number>; name: string | null };
  dtype: 'float32' | 'bfloat16';
  dequantized: true;
  architecture: string;
  parameters: number;
  tiedEmbeddings: boolean;
  /** what `toolFormat: "auto"` picks: `openai` when the chat template renders tools and `<tool_call>` calls, else swerl's `text` format */
  toolFormat: 'openai' | 'text';
  preTokenizer: string | null;
  importedAt: string;
  seconds: number;
}

export interface ImportedModel extends ImportRecord {
  dir: string;
}

function parseOptions(raw: ModelImportOptions) {
  const parsed = ModelImportOptionsSchema.safeParse(raw);
  if (!parsed.success) {
    const i = parsed.error.issues[0]!;
    throw new ModelImportError('bad_option', i.message.includes(':') ? i.message : `${i.path.join('.')}: ${i.message}`);
  }
  return parsed.data;
}

const isGgufPath = (from: string) => from.endsWith('.gguf') || from.includes('/') || existsSync(from);

/** Imports `from` into `out` (which must not exist, or be empty); the directory appears only when complete. */
export async function importModel(raw: ModelImportOptions): Promise<ImportedModel> {
  const t0 = Date.now();
  const opts = parseOptions(raw);
  const out = resolve(opts.out);
  if (existsSync(out) && (await readdir(out)).length > 0) throw new ModelImportError('out_exists', `out: ${out} exists and is not empty`);
  let entry: CatalogModel | null = null;
  if (!isGgufPath(opts.from)) {
    try {
      entry = catalogModel(opts.from);
    } catch (e) {
      throw new ModelImportError('unknown_model', (e as Error).message);
    }
  }
  const python = raw.python ?? fsdpPython('cpu');
  let gguf: string;
  let sha256: string;
  if (entry) {
    gguf = await ensureCatalogGguf(entry, python, { ...(raw.cacheDir ? { cacheDir: raw.cacheDir } : {}), ...(raw.onProgress ? { onProgress: raw.onProgress } : {}) });
    sha256 = entry.gguf.sha256;
  } else {
    gguf = resolve(opts.from);
    if (!existsSync(gguf)) throw new ModelImportError('unknown_model', `from: ${opts.from} is neither a file nor one of ${CATALOG_NAMES.join(', ')}`);
    sha256 = await sha256File(gguf, raw.onProgress, `sha256 ${basename(gguf)}`);
  }
  await mkdir(dirname(out), { recursive: true });
  const tmp = `${out}.import-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  try {
    // a catalog model's quantization is the file's published name (Q4_K_M); any other file's comes from general.file_type
    const card = { source: entry ? `${entry.name} (${entry.provenance})` : gguf, sha256, quantization: entry?.gguf.quantization ?? null, eosTokenIds: entry?.eosTokenIds ?? [] };
    const r = await runImportScript<ConvertResult>(python, ['convert', gguf, tmp, '--dtype', opts.dtype, '--card', JSON.stringify(card)], raw.onProgress);
    const quant = entry?.gguf.quantization ?? r.quantization ?? Object.keys(r.tensorTypes).join('+');
    const tokenizerConfig = JSON.parse(await readFile(`${tmp}/tokenizer_config.json`, 'utf8')) as { chat_template?: string };
    const record: ImportRecord = {
      source: entry ? entry.name : gguf,
      catalog: entry?.name ?? null,
      gguf: { file: basename(gguf), bytes: (await stat(gguf)).size, sha256, quantization: quant, tensorTypes: r.tensorTypes, name: r.name },
      dtype: opts.dtype,
      dequantized: true,
      architecture: r.architecture,
      parameters: r.parameters,
      tiedEmbeddings: r.tied,
      toolFormat: autoToolFormat(tokenizerConfig.chat_template ?? ''),
      preTokenizer: r.preTokenizer,
      importedAt: new Date().toISOString(),
      seconds: (Date.now() - t0) / 1000,
    };
    await writeFile(`${tmp}/swerl-import.json`, JSON.stringify(record, null, 2) + '\n');
    await writeFile(`${tmp}/README.md`, modelCard(record, entry, r));
    if (existsSync(out)) await rm(out, { recursive: true });
    await rename(tmp, out);
    return { ...record, dir: out };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOSPC') throw new ModelImportError('no_space', `no space left on the device while writing ${tmp}`);
    throw e;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** README.md in Hugging Face's model-card form; it says first that the weights are dequantized. */
export function modelCard(r: ImportRecord, entry: CatalogModel | null, c: Pick<ConvertResult, 'preTokenizer' | 'preTokenizerChecked' | 'vocabSize'>): string {
  const title = entry?.title ?? r.gguf.name ?? r.gguf.file;
  const types = Object.entries(r.gguf.tensorTypes)
    .map(([t, n]) => `${t} ×${n}`)
    .join(', ');
  return `---
${entry ? `license: ${entry.license}\nbase_model: ${entry.upstream}\n` : ''}tags:
  - swerl
  - gguf-dequantized
  - ${r.gguf.quantization}
---
# ${title} (${r.gguf.quantization} GGUF, dequantized to ${r.dtype})

**The weights are the dequantized values of a ${r.gguf.quantization} GGUF, not the original release's weights.** Every figure
measured on this checkpoint (log-probs, pass rates, training curves) is a figure of the ${r.gguf.quantization}-quantized model.

- Source: ${entry ? `${entry.provenance}.` : `the file ${r.gguf.file}.`} GGUF \`${r.gguf.file}\`, ${r.gguf.bytes} bytes, sha256 \`${r.gguf.sha256}\`${r.gguf.name ? `, general.name "${r.gguf.name}"` : ''}.
- Tensor types in the GGUF: ${types}.
- Architecture \`${r.architecture}\`, ${r.parameters.toLocaleString('en-US')} parameters, vocabulary ${c.vocabSize}, ${r.tiedEmbeddings ? 'tied input and output embeddings' : 'a separate output head'}.
- Tokenizer rebuilt from the GGUF's vocabulary and merges (pre-tokenizer \`${c.preTokenizer ?? 'none'}\`${c.preTokenizerChecked ? ', split as llama.cpp splits it' : ', not checked against llama.cpp by swerl'}); chat template from the GGUF.
- Tools: ${r.toolFormat === 'openai' ? 'the chat template renders tool definitions, calls as `<tool_call>` JSON and results (swerl\'s `toolFormat: "auto"` uses it).' : "the chat template renders no tools: swerl's agents use their text format (`<function=NAME>...`)."}
- Imported by \`swerl model import --from ${r.catalog ?? r.gguf.file} --dtype ${r.dtype}\` on ${r.importedAt.slice(0, 10)} (transformers and gguf from PyPI); \`swerl-import.json\` holds the same facts.
`;
}
