// A real MLflow tracking server (scripts/python/mlflow.txt, installed by scripts/ensure-monitoring.sh) on
// loopback: SQLite backend and an artifact root in the test's directory; stoppable and restartable on
// the same port and database. Read back through its REST API.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, closeSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../../services/temporal-server.ts';
import { ROOT, waitFor } from './temporal.ts';

export const MLFLOW_BIN = join(ROOT, '.tools', 'venv-mlflow', 'bin', 'mlflow');

export interface MlflowServer {
  uri: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** GET/POST on /api/2.0/mlflow/<path> */
  api<T = any>(path: string, body?: unknown): Promise<T>;
}

export async function startMlflowServer(dir: string): Promise<MlflowServer> {
  if (!existsSync(MLFLOW_BIN)) throw new Error(`${MLFLOW_BIN} is missing: run \`bash scripts/setup.sh --test\` (or bash scripts/ensure-python.sh mlflow)`);
  mkdirSync(dir, { recursive: true });
  let port = await freePort();
  let started = false;
  let child: ChildProcess | null = null;
  const log = join(dir, 'mlflow.log');
  const api = async <T>(path: string, body?: unknown): Promise<T> => {
    const res = await fetch(
      `${server.uri}/api/2.0/mlflow/${path}`,
      body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
    );
    const text = await res.text();
    if (!res.ok) throw new Error(`MLflow ${path}: ${res.status} ${text.slice(0, 300)}`);
    return JSON.parse(text) as T;
  };
  /** One server process on `port`: true once healthy, false if it exited because another process took the port. */
  const startOnce = async (): Promise<boolean> => {
    const logStart = existsSync(log) ? statSync(log).size : 0;
    const fd = openSync(log, 'a');
    // its own process group: `mlflow server` runs uvicorn as a child, and both must go on stop()
    child = spawn(
      MLFLOW_BIN,
      [
        'server',
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--workers',
        '1',
        '--backend-store-uri',
        `sqlite:///${join(dir, 'mlflow.db')}`,
        '--artifacts-destination',
        join(dir, 'artifacts'),
      ],
      { stdio: ['ignore', fd, fd], detached: true, env: { ...process.env, MLFLOW_SERVER_ENABLE_JOB_EXECUTION: 'false' } },
    );
    closeSync(fd);
    const c = child;
    const state = await waitFor(
      `MLflow server at ${server.uri} (log ${log})`,
      async () => {
        if (c.exitCode !== null || c.signalCode !== null) return 'exited';
        return (await fetch(`${server.uri}/health`)).ok && 'healthy';
      },
      240_000,
      250,
    );
    if (state === 'healthy') return true;
    const said = readFileSync(log, 'utf8').slice(logStart);
    if (/address already in use/i.test(said)) return false;
    throw new Error(`mlflow server exited ${c.exitCode ?? c.signalCode} before it served (log ${log}): ${said.trim().split('\n').slice(-3).join(' | ')}`);
  };
  const server: MlflowServer = {
    uri: `http://127.0.0.1:${port}`,
    api,
    // a restart keeps the port (the clients know it); the first start moves to another free port when some other
    // process took this one between freePort() and the server's bind (three test lanes run at once)
    async start() {
      for (let attempt = 1; ; attempt++) {
        if (await startOnce()) break;
        if (started || attempt >= 5) throw new Error(`MLflow server: port ${port} is in use (log ${log})`);
        port = await freePort();
        server.uri = `http://127.0.0.1:${port}`;
      }
      started = true;
    },
    async stop() {
      const c = child;
      if (!c || c.exitCode !== null || c.signalCode !== null) return;
      const exited = new Promise((r) => c.once('exit', r));
      process.kill(-c.pid!, 'SIGTERM');
      const t = setTimeout(() => process.kill(-c.pid!, 'SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
      // the uvicorn child may outlive its parent by a moment
      await waitFor(
        'the MLflow port to close',
        async () =>
          !(await fetch(`${server.uri}/health`).then(
            () => true,
            () => false,
          )),
        20_000,
        100,
      );
      child = null;
    },
  };
  await server.start();
  return server;
}
