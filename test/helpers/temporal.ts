// Test harness: a real `temporal server start-dev` on free ports in a temp dir, one workflow bundle
// per test file, workers in-process or as `swerl worker` child processes.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, openSync, closeSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { DefaultLogger, Runtime, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { startDevServer, type DevServer } from '../../services/temporal-server.ts';
import { after, before } from 'node:test';
import { buildWorkflowBundle, startWorkers, type RunningWorkers } from '../../workers/index.ts';
import { fileStoreUrl } from '../../lib/store.ts';
import type { TrainingConfigInput } from '../../lib/config.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface TestTemporal {
  dir: string;
  server: DevServer;
  client: Client;
  connection: Connection;
  bundle: WorkflowBundleWithSourceMap;
  /** restarts the server on the same SQLite file and port */
  restartServer(): Promise<void>;
  close(): Promise<void>;
}

let runtimeInstalled = false;

/** `ui`: serve the Temporal web UI too (server.uiUrl). */
export async function startTestTemporal(prefix = 'swerl-test-', o: { ui?: boolean } = {}): Promise<TestTemporal> {
  if (!runtimeInstalled && !process.env.SWERL_TEST_VERBOSE) {
    Runtime.install({ logger: new DefaultLogger('WARN') });
    runtimeInstalled = true;
  }
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const uiPort = o.ui ? 0 : null;
  // a CI run at full load (3 lanes on 2 cores, vLLM starting) saw two servers not ready in 60 s: wait longer here
  const readyTimeoutMs = 240_000;
  const [server, bundle] = await Promise.all([startDevServer({ dir, uiPort, readyTimeoutMs }), buildWorkflowBundle()]);
  const connection = await Connection.connect({ address: server.address });
  const t: TestTemporal = {
    dir,
    server,
    client: new Client({ connection }),
    connection,
    bundle,
    async restartServer() {
      await t.server.stop();
      t.server = await startDevServer({ dir, uiPort, port: t.server.port, readyTimeoutMs });
    },
    async close() {
      await connection.close().catch(() => undefined);
      await t.server.stop();
      if (!process.env.KEEP_TEST_DIRS) rmSync(dir, { recursive: true, force: true });
    },
  };
  return t;
}

/**
 * A dev server and one in-process worker serving both task queues; close() stops both. The history recorders
 * (scripts/record-*-histories.ts) run on it too, so the histories they record are made by the code the tests run.
 */
export async function startTemporalWithWorker(prefix = 'swerl-test-', o: { ui?: boolean } = {}): Promise<TestTemporal & { workers: RunningWorkers }> {
  const t = await startTestTemporal(prefix, o);
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  // a worker that stops before the file's end leaves its tests waiting: say why at once
  let closing = false;
  workers.done.then(
    () => {
      if (!closing) console.error(`[test] the workers of ${t.server.address} stopped before the tests ended`);
    },
    (e: unknown) => console.error(`[test] the workers of ${t.server.address} failed: ${(e as Error).message}`),
  );
  const closeServer = t.close.bind(t);
  return Object.assign(t, {
    workers,
    async close() {
      closing = true;
      await workers.shutdown();
      await closeServer();
    },
  });
}

/**
 * The usual file set-up: startTemporalWithWorker before the file's tests (after `prepare`), stopped after
 * them; `onReady` receives the server.
 */
export function useTemporalWithWorker(onReady: (t: TestTemporal) => void, prepare?: () => Promise<void>, o: { ui?: boolean } = {}): void {
  let t: TestTemporal | undefined;
  before(async () => {
    await prepare?.();
    t = await startTemporalWithWorker('swerl-test-', o);
    onReady(t);
  });
  after(async () => {
    await t?.close();
  });
}

/** The run ids of a workflow's continue-as-new chain, oldest first. */
export async function runChain(client: Client, workflowId: string): Promise<string[]> {
  const runs: string[] = [];
  for await (const w of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) runs.push(w.runId);
  const chain = await Promise.all(runs.map(async (r) => ({ r, start: (await client.workflow.getHandle(workflowId, r).describe()).startTime.getTime() })));
  return chain.sort((a, b) => a.start - b.start).map((x) => x.r);
}

/** Writes a workflow run's history as JSON to `file` (test/histories/, for test/unit/replay.test.ts). */
export async function saveHistory(client: Client, file: string, workflowId: string, runId?: string): Promise<number> {
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  writeFileSync(file, historyToJSON(history));
  return history.events?.length ?? 0;
}

/** A small FrozenLake config for tests, storing under `dir`. */
export type TestConfig = TrainingConfigInput & { store: { url: string } };

export function tinyConfig(dir: string, over: Partial<TrainingConfigInput> = {}): TestConfig {
  return {
    seed: 7,
    iterations: 2,
    batch: { tasks: 4, samples: 2 },
    maxInflightRollouts: 8,
    rollout: { startToCloseMinutes: 5, heartbeatSeconds: 2, heartbeatTimeoutSeconds: 10, maxAttempts: 5 },
    episode: { maxSteps: 8, responseBudget: 64, maxTokensPerTurn: 4, temperature: 1, topP: 1, timeoutMinutes: 5 },
    algorithm: { lr: 1e-3, lMax: 64 },
    model: { preset: 'frozenlake', seed: 1 },
    store: { url: fileStoreUrl(join(dir, 'store')) },
    env: { kind: 'frozenlake', size: 4, maxSteps: 8 },
    learner: { device: 'cpu', threads: 1, timeoutMinutes: 10 },
    ...over,
  } as TestConfig;
}

/**
 * A small SWE config on the tiny preset, storing under `dir`: one iteration of 1 task × 2 samples, three steps of
 * at most 128 tokens, 384 in all, lr 1e-6; `over` replaces whole sections.
 */
export function tinySweConfig(dir: string, tasksFile: string, over: Partial<TrainingConfigInput> = {}): TestConfig {
  return {
    seed: 1,
    iterations: 1,
    batch: { tasks: 1, samples: 2 },
    maxInflightRollouts: 2,
    episode: { maxSteps: 3, responseBudget: 384, maxTokensPerTurn: 128, temperature: 1, topP: 1, timeoutMinutes: 10 },
    algorithm: { lr: 1e-6, lMax: 384 },
    model: { preset: 'tiny', seed: 1 },
    store: { url: fileStoreUrl(join(dir, 'store')) },
    env: { kind: 'swe', tasksFile, maxSteps: 3 },
    learner: { device: 'cpu', threads: 1, timeoutMinutes: 10 },
    ...over,
  } as TestConfig;
}

/** `swerl worker` as a child process (so a test can SIGKILL it). */
export function spawnWorker(args: string[], logFile: string, env: NodeJS.ProcessEnv = process.env): ChildProcess {
  const fd = openSync(logFile, 'a');
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts', 'cli.ts'), 'worker', ...args], {
    cwd: ROOT,
    stdio: ['ignore', fd, fd],
    env,
  });
  closeSync(fd);
  return child;
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined | null | false>, timeoutMs = 120_000, everyMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v) return v as T;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
