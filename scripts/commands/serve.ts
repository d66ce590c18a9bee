// `swerl serve --model DIR [--port N]`: our OpenAI-compatible policy server over gpu-learner.
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';

export const ServeOptionsSchema = z.object({
  model: z.string({ error: 'model: required (--model DIR)' }).min(1, 'model: must not be empty'),
  port: z.coerce.number().int('port: expected an integer').min(0, 'port: 0..65535').max(65535, 'port: 0..65535').default(8000),
  host: z.string().min(1).default('127.0.0.1'),
  name: z.string().min(1).default('policy'),
  checkpoint: z.coerce.number().int().min(0).optional(),
  device: z.enum(['cpu', 'cuda']).default('cpu'),
  threads: z.coerce.number().int().min(1).optional(),
  /** concurrent requests share decode steps (continuous batching); commander's --no-batching sets false */
  batching: z.boolean().default(true),
  maxBatch: z.coerce.number().int('maxBatch: expected an integer').min(1, 'maxBatch: at least 1').max(1024, 'maxBatch: at most 1024').optional(),
});

export function register(program: Command): void {
  program
    .command('serve')
    .description('serve a checkpoint directory over the OpenAI completions API (token ids, log-probs, /update_weights_from_disk)')
    .requiredOption('--model <dir>', 'Hugging Face checkpoint directory (config.json + model.safetensors [+ tokenizer.json])')
    .option('--port <n>', 'port (0 = any free port)', '8000')
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--name <name>', 'model name clients send', 'policy')
    .option('--checkpoint <n>', 'checkpoint index of --model')
    .option('--device <device>', 'cpu or cuda', 'cpu')
    .option('--threads <n>', 'CPU threads for the learner')
    .option('--max-batch <n>', 'sequences one decode step serves at most (default 16)')
    .option('--no-batching', 'one request at a time per model instead of continuous batching')
    .action(async (raw: Record<string, string | boolean>) => {
      const parsed = ServeOptionsSchema.safeParse(raw);
      if (!parsed.success) {
        const i = parsed.error.issues[0]!;
        const field = i.path.join('.');
        console.error(`swerl serve: ${i.message.startsWith(`${field}: `) ? i.message : `${field}: ${i.message}`} (got ${JSON.stringify(raw[String(i.path[0])])})`);
        process.exitCode = 2;
        return;
      }
      const o = parsed.data;
      const { Learner } = await import('../../gpu-learner/index.ts');
      const { loadTokenizer } = await import('../../lib/tokenizer.ts');
      const { startPolicyServer } = await import('../../policy-server/index.ts');
      const loadOpts = { device: o.device, ...(o.threads ? { threads: o.threads } : {}) };
      const learner = await Learner.load(o.model, loadOpts);
      const tokenizer = existsSync(join(o.model, 'tokenizer.json')) ? await loadTokenizer(o.model) : undefined;
      const server = await startPolicyServer({
        learner,
        tokenizer,
        port: o.port,
        host: o.host,
        modelName: o.name,
        checkpoint: o.checkpoint ?? null,
        modelPath: o.model,
        loadModel: (dir) => Learner.load(dir, loadOpts),
        batching: o.batching,
        ...(o.maxBatch ? { maxBatch: o.maxBatch } : {}),
      });
      console.log(`serving ${o.model} as ${JSON.stringify(o.name)} at ${server.url}/v1 (tokenizer: ${tokenizer ? 'yes' : 'no'})`);
      const stop = () => {
        void server.close().then(() => learner.close());
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
}
