// `swerl validate-tasks --tasks FILE [--concurrency N] [--address HOST:PORT]`: a line per task,
// then `N valid, M invalid`; exit 0 only when all are valid. With --address it runs as the
// Temporal workflow `validateTasks` (a worker must serve the rollout queue), else in-process.
import type { Command } from 'commander';
import { resolve } from 'node:path';
import { formatLoadError, loadTasks } from '../../lib/swe/task.ts';
import type { SandboxBackend } from '../../lib/sandbox.ts';
import { defaultTasksFile } from './images.ts';
import { mapInLanes } from '../../lib/pool.ts';
import { parseBackendOptions, sandboxBackendFrom, withBackendOptions } from './cluster.ts';

interface Line {
  instanceId: string;
  valid: boolean;
  problems: string[];
  durationS: number;
  /** answer-mutant canaries verified for the task (lib/swe/answer-mutants.ts) */
  mutants?: number;
}

function print(r: Line): void {
  const mutants = r.mutants === undefined ? '' : `, ${r.mutants} answer-mutant canar${r.mutants === 1 ? 'y' : 'ies'}`;
  console.log(`${r.valid ? 'VALID  ' : 'INVALID'} ${r.instanceId} (${r.durationS.toFixed(1)} s${mutants})${r.problems.length ? ': ' + r.problems.join('; ') : ''}`);
}

export async function validateTasksLocally(
  tasksFile: string,
  concurrency: number,
  onResult: (r: Line) => void = print,
  sandboxes?: SandboxBackend,
): Promise<{ results: Line[]; loadErrors: string[] }> {
  const { validateTask } = await import('../../activities/grade.ts');
  const { createSandboxBackend } = await import('../../activities/sandbox/index.ts');
  const { buildImages } = await import('../../activities/images.ts');
  const { tasks, errors } = await loadTasks(tasksFile);
  const backend = sandboxes ?? (await createSandboxBackend());
  await buildImages(tasks, { concurrency: Math.min(concurrency, 4) });
  const results: Line[] = [];
  await mapInLanes(tasks, Math.max(1, concurrency), async (task) => {
    let r: Line;
    try {
      const v = await validateTask({ task, backend });
      r = { instanceId: v.instanceId, valid: v.valid, problems: v.problems, durationS: v.durationS, mutants: v.mutants };
    } catch (e) {
      r = { instanceId: task.instance_id, valid: false, problems: [`validation failed: ${(e as Error).message}`], durationS: 0 };
    }
    results.push(r);
    onResult(r);
  });
  return { results, loadErrors: errors.map(formatLoadError) };
}

export function register(program: Command): void {
  withBackendOptions(
    program
      .command('validate-tasks')
      .description('check every task: FAIL_TO_PASS fail and PASS_TO_PASS pass with test_patch only; all pass with the gold patch')
      .option('--tasks <file>', 'tasks file (.jsonl or .parquet)')
      .option('--concurrency <n>', 'tasks validated at once (two sandboxes each)', '2')
      .option('--address <host:port>', 'run as the Temporal workflow validateTasks on this server'),
  ).action(async (o: { tasks?: string; concurrency: string; address?: string; backend: string; kubeconfig?: string; namespace?: string }) => {
    const sandboxes = parseBackendOptions(o);
    // on a server, the worker's SWERL_SANDBOX_BACKEND, KUBECONFIG and SWERL_K8S_NAMESPACE decide
    if (o.address && (o.backend !== 'docker' || o.kubeconfig || o.namespace))
      throw new Error(
        '--backend, --kubeconfig and --namespace apply to an in-process run; with --address, set SWERL_SANDBOX_BACKEND (and KUBECONFIG, SWERL_K8S_NAMESPACE) where the worker runs',
      );
    const file = o.tasks ?? defaultTasksFile();
    if (!file) throw new Error('--tasks FILE is required (no default tasks file found)');
    const concurrency = Number(o.concurrency);
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new Error(`--concurrency must be a positive integer, got ${o.concurrency}`);
    let results: Line[];
    let loadErrors: string[];
    if (o.address) {
      const { Client, Connection } = await import('@temporalio/client');
      const connection = await Connection.connect({ address: o.address });
      const client = new Client({ connection });
      // workflows run on the learner queue (a `swerl worker` registers none on rollout); its activities go to rollout
      const r = await client.workflow.execute('validateTasks', {
        taskQueue: 'learner',
        workflowId: `validate-tasks-${Date.now()}`,
        args: [{ tasksFile: resolve(file), concurrency }],
      });
      await connection.close();
      ({ results, loadErrors } = r as { results: Line[]; loadErrors: string[] });
      results.forEach(print);
    } else {
      ({ results, loadErrors } = await validateTasksLocally(file, concurrency, print, await sandboxBackendFrom(sandboxes)));
    }
    for (const e of loadErrors) console.log(`INVALID record ${e}`);
    // the tasks whose FAIL_TO_PASS tests admit no answer-mutant: their graders have the copy canaries only
    const none = results.filter((r) => r.valid && r.mutants === 0).map((r) => r.instanceId);
    if (none.length) console.log(`no answer-mutant canary (FAIL_TO_PASS tests without a checkable literal answer): ${none.join(', ')}`);
    const valid = results.filter((r) => r.valid).length;
    const invalid = results.length - valid + loadErrors.length;
    console.log(`${valid} valid, ${invalid} invalid`);
    process.exitCode = invalid === 0 ? 0 : 1;
  });
}
