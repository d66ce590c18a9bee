// `swerl server [--dir DIR] [--port 7233] [--ui-port 8233] [--headless]`: a local Temporal dev server
// on a SQLite file, with the training search attributes registered. Refuses a port or database another
// server holds (naming its pid); the server process dies with this one, even when this one is SIGKILLed.
import type { Command } from 'commander';
import { z } from 'zod';
import { ServerInUseError, startDevServer, type DevServer } from '../../services/temporal-server.ts';
import { uiViewsScript } from '../../lib/temporal-ui.ts';

const ServerOptionsSchema = z.object({
  dir: z.string().min(1),
  port: z.coerce.number().int().min(1).max(65535),
  uiPort: z.coerce.number().int().min(1).max(65535),
  ip: z.string().min(1),
  headless: z.boolean().default(false),
});

export function register(program: Command): void {
  program
    .command('server')
    .description(
      'run a local Temporal dev server (SQLite) with the search attributes of runs and evaluations (RlIteration, RlMeanReward, RlPhase, RlEvalPass1, EvalPass1, EvalDone)',
    )
    .option('--dir <dir>', 'directory for temporal.sqlite and temporal.log', '.runs/temporal')
    .option('--port <port>', 'frontend gRPC port', '7233')
    .option('--ui-port <port>', 'web UI port', '8233')
    .option('--ip <ip>', 'address to bind', '127.0.0.1')
    .option('--headless', 'no web UI')
    .action(async (raw: Record<string, unknown>) => {
      const parsed = ServerOptionsSchema.safeParse(raw);
      if (!parsed.success) {
        const i = parsed.error.issues[0]!;
        console.error(`swerl server: --${String(i.path[0])}: ${i.message}, got ${JSON.stringify(raw[String(i.path[0])])}`);
        process.exitCode = 2;
        return;
      }
      const o = parsed.data;
      let server: DevServer;
      try {
        server = await startDevServer({ dir: o.dir, port: o.port, uiPort: o.headless ? null : o.uiPort, ip: o.ip });
      } catch (e) {
        if (!(e instanceof ServerInUseError)) throw e;
        console.error(`swerl server: ${e.message}`);
        process.exitCode = 1;
        return;
      }
      console.log(`Temporal dev server at ${server.address} (db ${server.dbFile})${server.uiUrl ? `, web UI ${server.uiUrl}` : ''}`);
      if (server.uiUrl) console.log("the run dashboard views and columns: `swerl ui-views`, pasted into the web UI's browser console (docs/monitoring.md)");
      const stop = () => void server.stop().then(() => process.exit(0));
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      await new Promise<void>((r) => server.process.once('exit', () => r()));
    });

  program
    .command('ui-views')
    .description('print JavaScript that adds the training-run saved views and columns to the Temporal web UI (paste into its browser console)')
    .option('--namespace <ns>', 'Temporal namespace', process.env.TEMPORAL_NAMESPACE ?? 'default')
    .action((o: { namespace: string }) => {
      console.log(uiViewsScript(o.namespace));
    });
}
