// The `swerl` command. Each file in scripts/commands/ exports `register(program)` for its subcommands.
import { Command } from 'commander';
import { readdirSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { join } from 'node:path';

const program = new Command('swerl')
  .description('Durable RL training of coding agents on Temporal')
  .showHelpAfterError()
  // a command's options stop at its subcommand (`eval --config` vs `eval best-of-k --config`); needs the root's too
  .enablePositionalOptions();
const dir = fileURLToPath(new URL('./commands/', import.meta.url));
for (const f of readdirSync(dir)
  .filter((n) => n.endsWith('.ts'))
  .sort()) {
  const mod = (await import(pathToFileURL(join(dir, f)).href)) as { register?: (p: Command) => void };
  mod.register?.(program);
}
await program.parseAsync(process.argv);
