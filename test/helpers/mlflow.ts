// A real MLflow tracking server (scripts/python/mlflow.txt, installed by scripts/ensure-monitoring.sh) on
// loopback: SQLite backend and an artifact root in the test's directory; stoppable and restartable on
// the same port and database. Read back through its REST API.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, closeSync } from 'node:fs';
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
  const port = await freePort();
  const uri = `http://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;
  const api = async <T>(path: string, body?: unknown): Promise<T> => {
    const res = await fetch(
      `${uri}/api/2.0/mlflow/${path}`,
      body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
    );
    const text = await res.text();
    if (!res.ok) throw new Error(`MLflow ${path}: ${res.status} ${text.slice(0, 300)}`);
    return JSON.parse(text) as T;
  };
  const server: MlflowServer = {
    uri,
    api,
    async start() {
      const fd = openSync(join(dir, 'mlflow.log'), 'a');
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
      await waitFor(
        `MLflow server at ${uri} (log ${join(dir, 'mlflow.log')})`,
        async () => {
          if (c.exitCode !== null) throw new Error(`mlflow server exited ${c.exitCode}`);
          return (await fetch(`${uri}/health`)).ok;
        },
        240_000,
        250,
      );
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
          !(await fetch(`${uri}/health`).then(
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
