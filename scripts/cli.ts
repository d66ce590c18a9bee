// The `swerl` command. Each file in scripts/commands/ exports `register(program)` for its subcommands.
import { Command } from 'commander';
import { readdirSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { reportFailure } from './cli-log.ts';

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
// a failure ends in one line naming the workflow and the innermost cause, the chain in a log file (scripts/cli-log.ts)
let command = 'swerl';
program.hook('preAction', (_root, action) => {
  const names: string[] = [];
  for (let c: Command | null = action; c && c !== program; c = c.parent) names.unshift(c.name());
  command = names.join(' ');
});
const fail = (e: unknown) => {
  reportFailure(command, e);
  process.exit(1);
};
process.on('unhandledRejection', fail);
process.on('uncaughtException', fail);
await program.parseAsync(process.argv).catch(fail);
