// Wires workflows and activities to task queues. One process may serve both queues; the learner
// queue also runs the workflows and owns the Learner and its policy server.
import { NativeConnection, Worker, bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import { LearnerContext, createActivities, createRolloutActivities, type LearnerWorkerOptions } from '../activities/index.ts';
import { TASK_QUEUES } from '../workflows/shapes.ts';

export type QueueName = keyof typeof TASK_QUEUES;

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
}

export interface RunningWorkers {
  workers: Worker[];
  ctx: LearnerContext;
  /** resolves when every worker stopped */
  done: Promise<void>;
  shutdown(): Promise<void>;
}

export function buildWorkflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  return bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error: console.error } as never });
}

export async function startWorkers(o: StartWorkersOptions): Promise<RunningWorkers> {
  const connection = await NativeConnection.connect({ address: o.address });
  const namespace = o.namespace ?? 'default';
  const ctx = new LearnerContext(o.learner);
  const workers: Worker[] = [];
  const workflowSource = o.workflowBundle ? { workflowBundle: o.workflowBundle } : { workflowBundle: await buildWorkflowBundle() };
  if (o.queues.includes('learner')) {
    workers.push(
      await Worker.create({
        connection,
        namespace,
        taskQueue: TASK_QUEUES.learner,
        ...workflowSource,
        activities: createActivities(ctx),
        maxConcurrentActivityTaskExecutions: 4,
      }),
    );
  }
  if (o.queues.includes('rollout')) {
    workers.push(
      await Worker.create({
        connection,
        namespace,
        taskQueue: TASK_QUEUES.rollout,
        activities: createRolloutActivities(),
        maxConcurrentActivityTaskExecutions: o.maxConcurrentRollouts ?? 16,
      }),
    );
  }
  if (o.resume && o.queues.includes('learner')) {
    const { openStore } = await import('../lib/store.ts');
    await ctx.resume(openStore(o.resume.storeUrl), o.resume.runId).catch((e) => console.error(`[worker] resume: ${(e as Error).message}`));
  }
  const done = Promise.all(workers.map((w) => w.run())).then(async () => {
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
