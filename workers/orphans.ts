// Activities orphaned by a dead worker on this host are failed (retryably) by its restarted successor, so they
// run again at once instead of after their heartbeat timeout: seconds for FrozenLake, a minute for SWE rollouts
// and learner steps. Only a predecessor proven dead is touched: same host, same PID namespace (containers that
// share a hostname have their own), and its pid gone or reused by a process started at another time.
import { hostname } from 'node:os';
import { Client, type Connection } from '@temporalio/client';
import { pidNamespace, processAlive, processStartTicks } from '../lib/process-identity.ts';
import { FailureType, retryable } from '../lib/failures.ts';

/** This process's worker identity: the SDK's `pid@host`, and what proves later that the process is gone. */
export function workerIdentity(): string {
  return `${process.pid}@${hostname()} swerl:${processStartTicks(process.pid)}:${pidNamespace()}`;
}

const IDENTITY = /^(\d+)@(\S+) swerl:(\d*):(\d*)$/;

/** Is `identity` a swerl worker of this host and PID namespace that no longer runs? */
export function identityOfDeadLocalWorker(identity: string): boolean {
  const m = IDENTITY.exec(identity);
  if (!m) return false;
  const [, pid, host, start, ns] = m;
  if (host !== hostname() || !ns || ns !== pidNamespace() || Number(pid) === process.pid) return false;
  return !processAlive(Number(pid), start || undefined);
}

export interface OrphanedActivity {
  workflowId: string;
  activityId: string;
  activityType: string;
  identity: string;
}

/**
 * Fails, as retryable, every started activity of a running workflow on `taskQueues` whose worker was a dead
 * swerl worker of this host. The retry policy then runs it again at once.
 */
export async function failOrphanedActivities(connection: Connection, namespace: string, taskQueues: string[]): Promise<OrphanedActivity[]> {
  const client = new Client({ connection, namespace });
  const query = `ExecutionStatus = "Running" AND (${taskQueues.map((q) => `TaskQueue = "${q}"`).join(' OR ')})`;
  const failed: OrphanedActivity[] = [];
  for await (const wf of client.workflow.list({ query })) {
    const description = await client.workflow
      .getHandle(wf.workflowId, wf.runId)
      .describe()
      .catch(() => null);
    for (const a of description?.raw.pendingActivities ?? []) {
      const identity = a.lastWorkerIdentity ?? '';
      // 2 = PENDING_ACTIVITY_STATE_STARTED: running (as far as the server knows) on that worker
      if (Number(a.state) !== 2 || !a.activityId || !identityOfDeadLocalWorker(identity)) continue;
      const id = { workflowId: wf.workflowId, runId: wf.runId, activityId: a.activityId };
      const ok = await client.activity.fail(id, retryable(FailureType.WorkerDied, `worker ${identity.split(' ')[0]} died while running it`)).then(
        () => true,
        () => false,
      ); // completed or timed out meanwhile: nothing to do
      if (ok) failed.push({ workflowId: wf.workflowId, activityId: a.activityId, activityType: a.activityType?.name ?? '', identity });
    }
  }
  return failed;
}
