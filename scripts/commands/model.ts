// `swerl model init --out DIR --preset tiny|frozenlake [--seed N]`: writes a random checkpoint 0.
import type { Command } from 'commander';
import { z } from 'zod';
import { PRESET_NAMES, PRESETS, writeModel, type WrittenModel } from '../../lib/presets.ts';

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
}
