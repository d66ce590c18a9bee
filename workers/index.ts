// Wires workflows and activities to task queues. One process may serve both queues; the learner
// queue also runs the workflows and owns the Learner and its policy server.
import { NativeConnection, Worker, bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { LearnerContext, createActivities, createRolloutActivities, type LearnerWorkerOptions } from '../activities/index.ts';
import { TASK_QUEUES } from '../lib/training/shapes.ts';
import { Connection } from '@temporalio/client';
import { failOrphanedActivities, workerIdentity } from './orphans.ts';

export type QueueName = keyof typeof TASK_QUEUES;

/** how long a workflow's next task waits on a dead worker's sticky queue before any worker may take it */
export const STICKY_QUEUE_TIMEOUT = '3s';
/**
 * Heartbeats reach the server at least this often (the SDK's default throttle is 80% of the heartbeat
 * timeout, which leaves a 5 s timeout one second of slack for an event-loop stall; this leaves three).
 */
const HEARTBEAT_THROTTLE = '2s';

export const WORKFLOWS_PATH = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

export interface StartWorkersOptions {
  address: string;
  namespace?: string;
  queues: QueueName[];
  learner?: LearnerWorkerOptions;
  /** a pre-built bundle (tests build it once per file) */
  workflowBundle?: WorkflowBundleWithSourceMap;
  /** rollouts run at once in this process */
  maxConcurrentRollouts?: number;
  /** after a restart, serve the newest checkpoint of this run from this store at once */
  resume?: { storeUrl: string; runId: string };
  /** rollout workers sweep leftover sandboxes at start and then every this many seconds (default 60; 0: never) */
  sandboxSweepSeconds?: number;
  /** how long to keep trying the first connection to the frontend (a worker started beside its server, or
   * rescheduled before it on a cluster); default 60; 0: one try */
  connectWaitSeconds?: number;
}

export interface RunningWorkers {
  workers: Worker[];
  ctx: LearnerContext;
  /** resolves when every worker stopped */
  done: Promise<void>;
  shutdown(): Promise<void>;
}

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** What the workflow bundle is made of: workflow and lib sources, and the locked dependencies. */
function bundleKey(): string {
  const h = createHash('sha256');
  for (const d of ['workflows', 'lib']) {
    const files = (readdirSync(join(ROOT, d), { recursive: true }) as string[]).filter((f) => f.endsWith('.ts')).sort();
    for (const f of files)
      h.update(`${d}/${f}\0`)
        .update(readFileSync(join(ROOT, d, f)))
        .update('\0');
  }
  for (const f of ['package-lock.json', 'package.json']) if (existsSync(join(ROOT, f))) h.update(readFileSync(join(ROOT, f)));
  return h.digest('hex').slice(0, 16);
}

/**
 * The workflows bundled for the worker, cached under .tools/cache by the hash of their sources: a restarted
 * worker (crash recovery) starts without bundling again, which takes seconds to tens of seconds on a busy host.
 */
export async function buildWorkflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  const file = join(ROOT, '.tools', 'cache', `workflow-bundle-${bundleKey()}.json`);
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as WorkflowBundleWithSourceMap;
  } catch {
    // not cached yet (or unreadable): bundle
  }
  const bundle = await bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error: console.error } as never });
  try {
    mkdirSync(dirname(file), { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify({ code: bundle.code, sourceMap: bundle.sourceMap }));
    renameSync(tmp, file);
    // bundles of older sources, untouched for a day, go
    for (const f of readdirSync(dirname(file))) {
      const p = join(dirname(file), f);
      if (f.startsWith('workflow-bundle-') && p !== file && Date.now() - statSync(p).mtimeMs > 86_400_000) rmSync(p, { force: true });
    }
  } catch {
    // a read-only checkout bundles each time
  }
  return bundle;
}

/** The first connection, tried again every second until `waitS` has passed; says once that it is waiting. */
async function connectWaiting(address: string, waitS: number): Promise<NativeConnection> {
  const deadline = Date.now() + waitS * 1000;
  for (let said = false; ;) {
    try {
      return await NativeConnection.connect({ address });
    } catch (e) {
      if (Date.now() >= deadline) throw new Error(`Temporal frontend ${address} unreachable${waitS > 0 ? ` for ${waitS} s` : ''}: ${(e as Error).message}`);
      if (!said) console.error(`waiting for the Temporal frontend at ${address} (up to ${waitS} s)…`);
      said = true;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/**
 * Until the namespace answers on this connection, both where workflows are listed (the frontend) and where tasks are
 * polled (the matching service): a dev server just started may know it in one service and not yet in the other, and a
 * worker polling then gets "Namespace not found". Says so when it had to wait; gives up after `waitS`.
 */
async function namespaceReady(connection: NativeConnection, namespace: string, taskQueue: string, waitS: number): Promise<void> {
  const started = Date.now();
  for (let last = ''; ;) {
    try {
      await connection.workflowService.describeNamespace({ namespace });
      await connection.workflowService.describeTaskQueue({ namespace, taskQueue: { name: taskQueue }, taskQueueType: 1 });
      if (last) console.warn(`[worker] namespace ${JSON.stringify(namespace)} answered after ${((Date.now() - started) / 1000).toFixed(1)} s (${last})`);
      return;
    } catch (e) {
      last = (e as Error).message;
      if (!/namespace/i.test(last) || Date.now() - started > waitS * 1000) throw new Error(`namespace ${JSON.stringify(namespace)}: ${last}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

export async function startWorkers(o: StartWorkersOptions): Promise<RunningWorkers> {
  // first of all: a restarted worker removes what its dead predecessor left on this host
  const sweeper = o.queues.includes('rollout') && o.sandboxSweepSeconds !== 0 ? startSandboxSweeper(o.sandboxSweepSeconds ?? 60) : null;
  const connection = await connectWaiting(o.address, o.connectWaitSeconds ?? 60);
  const namespace = o.namespace ?? 'default';
  await namespaceReady(connection, namespace, o.queues.includes('learner') ? TASK_QUEUES.learner : TASK_QUEUES.rollout, o.connectWaitSeconds ?? 60);
  const ctx = new LearnerContext(o.learner);
  const workers: Worker[] = [];
  const identity = workerIdentity();
  const common = { connection, namespace, identity, maxHeartbeatThrottleInterval: HEARTBEAT_THROTTLE };
  const workflowSource = o.workflowBundle ? { workflowBundle: o.workflowBundle } : { workflowBundle: await buildWorkflowBundle() };
  if (o.queues.includes('learner')) {
    workers.push(
      await Worker.create({
        ...common,
        taskQueue: TASK_QUEUES.learner,
        ...workflowSource,
        activities: createActivities(ctx),
        maxConcurrentActivityTaskExecutions: 4,
        // a worker that died holds its workflows' next tasks on its sticky queue this long (default 10 s):
        // short, so a restarted worker takes them over within seconds (a healthy worker picks them up in ms)
        stickyQueueScheduleToStartTimeout: STICKY_QUEUE_TIMEOUT,
      }),
    );
  }
  if (o.queues.includes('rollout')) {
    workers.push(
      await Worker.create({
        ...common,
        taskQueue: TASK_QUEUES.rollout,
        activities: createRolloutActivities(),
        maxConcurrentActivityTaskExecutions: o.maxConcurrentRollouts ?? 16,
      }),
    );
  }
  // what a dead predecessor on this host was running is retried now, not after its heartbeat timeout
  const orphans = recoverOrphans(o.address, namespace);
  if (o.resume && o.queues.includes('learner')) {
    const { openStore } = await import('../lib/store.ts');
    await ctx.resume(openStore(o.resume.storeUrl), o.resume.runId).catch((e) => console.error(`[worker] resume: ${(e as Error).message}`));
  }
  const done = Promise.all(workers.map((w) => w.run())).then(async () => {
    await orphans;
    sweeper?.stop();
    await ctx.close();
    await connection.close();
  });
  return {
    workers,
    ctx,
    done,
    async shutdown() {
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
      await done;
    },
  };
}

async function recoverOrphans(address: string, namespace: string): Promise<void> {
  try {
    const connection = await Connection.connect({ address });
    try {
      const failed = await failOrphanedActivities(connection, namespace, Object.values(TASK_QUEUES));
      for (const a of failed)
        console.warn(`[worker] ${a.activityType} ${a.activityId} of ${a.workflowId} was running on dead worker ${a.identity.split(' ')[0]}: failed it so it is retried now`);
    } finally {
      await connection.close();
    }
  } catch (e) {
    console.warn(`[worker] looking for activities of dead workers: ${(e as Error).message}`);
  }
}

/**
 * Sandboxes of dead workers on this host are removed at start, expired ones and failed removals every
 * `everyS` seconds (DESIGN §2). A host without a sandbox engine (FrozenLake only) stays quiet.
 */
export function startSandboxSweeper(everyS: number): { stop(): void; first: Promise<void> } {
  const engineSeen = new Set<string>();
  const sweep = async (): Promise<void> => {
    const { backendKindFromEnv, createSandboxBackend, sharedBackendKinds } = await import('../activities/sandbox/index.ts');
    // SWERL_SANDBOX_BACKEND's kind from the start, and every kind this worker's rollouts have used (env.backend)
    for (const kind of new Set([backendKindFromEnv(), ...sharedBackendKinds()])) {
      try {
        const r = (await (await createSandboxBackend(kind)).sweep?.()) ?? { removed: 0, failed: 0 };
        engineSeen.add(kind);
        if (r.removed || r.failed) console.warn(`[sandbox] sweep (${kind}): removed ${r.removed} leftover sandbox(es)${r.failed ? `, ${r.failed} could not be removed yet` : ''}`);
      } catch (e) {
        if (engineSeen.has(kind)) console.warn(`[sandbox] sweep (${kind}) failed: ${(e as Error).message}`);
      }
    }
  };
  const first = sweep();
  const t = setInterval(() => void sweep(), everyS * 1000);
  t.unref();
  return { stop: () => clearInterval(t), first };
}
