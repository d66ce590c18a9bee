// Starts and stops a local Temporal dev server (`temporal server start-dev`) on a SQLite file.
// Used by `swerl server`, `swerl train` (embedded mode) and the tests. Never lets the SDK download a server.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { existsSync, mkdirSync, openSync, closeSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Connection } from '@temporalio/client';

/** Search attributes the training and evaluation workflows upsert (DESIGN §1). */
export const SEARCH_ATTRIBUTES = { RlIteration: 'Int', RlMeanReward: 'Double', RlPhase: 'Keyword', RlEvalPass1: 'Double', EvalPass1: 'Double', EvalDone: 'Int' } as const;

export interface DevServerOptions {
  /** directory holding temporal.sqlite and temporal.log */
  dir: string;
  /** frontend gRPC port; 0 picks a free one */
  port?: number;
  /** web UI port; 0 picks a free one; null disables the UI (--headless) */
  uiPort?: number | null;
  ip?: string;
  namespace?: string;
  readyTimeoutMs?: number;
}

export interface DevServer {
  address: string;
  port: number;
  uiUrl: string | null;
  dbFile: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** Path of the Temporal CLI: .tools/bin/temporal (scripts/ensure-temporal.sh), else `temporal` on PATH. */
export function temporalBinary(): string {
  const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
  const local = join(root, '.tools', 'bin', 'temporal');
  if (existsSync(local)) return local;
  return 'temporal';
}

export async function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', rej);
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => res(port));
    });
  });
}

export async function startDevServer(opts: DevServerOptions): Promise<DevServer> {
  const dir = resolve(opts.dir);
  mkdirSync(dir, { recursive: true });
  const ip = opts.ip ?? '127.0.0.1';
  const port = opts.port && opts.port > 0 ? opts.port : await freePort(ip);
  const httpPort = await freePort(ip);
  const metricsPort = await freePort(ip);
  const dbFile = join(dir, 'temporal.sqlite');
  const args = ['server', 'start-dev', '--db-filename', dbFile, '--ip', ip, '--port', String(port),
    '--http-port', String(httpPort), '--metrics-port', String(metricsPort), '--log-level', 'warn'];
  let uiUrl: string | null = null;
  if (opts.uiPort === null) {
    args.push('--headless');
  } else {
    const uiPort = opts.uiPort && opts.uiPort > 0 ? opts.uiPort : await freePort(ip);
    args.push('--ui-port', String(uiPort), '--ui-disable-news-fetch');
    uiUrl = `http://${ip}:${uiPort}`;
  }
  if (opts.namespace && opts.namespace !== 'default') args.push('--namespace', opts.namespace);
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) args.push('--search-attribute', `${name}=${type}`);

  const logFd = openSync(join(dir, 'temporal.log'), 'a');
  const child = spawn(temporalBinary(), args, { stdio: ['ignore', logFd, logFd], detached: false });
  closeSync(logFd);
  let exited: number | string | null = null;
  child.on('exit', (code, signal) => { exited = code ?? signal ?? 'exit'; });
  child.on('error', (err) => { exited = String(err); });

  const address = `${ip}:${port}`;
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
  const namespace = opts.namespace ?? 'default';
  for (;;) {
    if (exited !== null) throw new Error(`temporal dev server exited (${exited}); see ${join(dir, 'temporal.log')}`);
    try {
      const conn = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        const sa = await conn.operatorService.listSearchAttributes({ namespace });
        const names = Object.keys(sa.customAttributes ?? {});
        if (Object.keys(SEARCH_ATTRIBUTES).every((n) => names.includes(n))) break;
      } finally {
        await conn.close();
      }
    } catch {
      // not ready yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`temporal dev server at ${address} not ready after ${opts.readyTimeoutMs ?? 60_000} ms; see ${join(dir, 'temporal.log')}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }

  const stop = async (): Promise<void> => {
    if (exited !== null) return;
    const done = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await done;
    clearTimeout(t);
  };
  return { address, port, uiUrl, dbFile, process: child, stop };
}
