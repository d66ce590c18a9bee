// `swerl validate-tasks --tasks FILE [--concurrency N] [--address HOST:PORT] [--quality [--strength-k K]
// [--seed S] [--min-strength F] [--quality-out FILE]]`: a line per task, then `N valid, M invalid`; exit 0 only
// when all are valid. With --quality each task's tests are measured too (lib/swe/quality.ts: gold twice, the
// strength from K wrong fixes graded like any patch) and tasks below --min-strength are flagged WEAK;
// --quality-out writes {instance_id, quality} lines that env.taskFilter.qualityFile and evaluations read.
// With --address it runs as the Temporal workflow `validateTasks` (a worker must serve the rollout queue),
// else in-process.
import type { Command } from 'commander';
import { resolve } from 'node:path';
import { formatLoadError, loadTasks } from '../../lib/swe/task.ts';
import type { SandboxBackend } from '../../lib/sandbox.ts';
import { defaultTasksFile } from './images.ts';
import { mapInLanes } from '../../lib/pool.ts';
import { parseBackendOptions, sandboxBackendFrom, withBackendOptions } from './cluster.ts';
import { DEFAULT_MIN_STRENGTH, isStrong, type TaskQuality } from '../../lib/swe/quality.ts';
import { writeFileSync } from 'node:fs';
import { followResult } from '../cli-log.ts';
import type { TaskValidation } from '../../activities/swe.ts';

/** one task's validation, as the activity reports it */
type Line = TaskValidation;

/** `F2P n, gold p/r, strength j/k (score)` and WEAK below `minStrength`. */
export function qualityText(q: TaskQuality, minStrength: number): string {
  const s = q.strength;
  const strength = s.tried ? `strength ${s.rejected}/${s.tried}` : 'strength unmeasured (no wrong fix could be made)';
  const weak = isStrong(q, minStrength) ? '' : ` WEAK (below ${minStrength}${s.accepted.length ? `; the tests accept: ${s.accepted.slice(0, 3).join('; ')}` : ''})`;
  return `FAIL_TO_PASS ${q.failToPass}, gold ${q.gold.passed}/${q.gold.runs}, ${strength}, tests ${q.testSeconds.toFixed(1)} s, key ${q.dedupeKey}${weak}`;
}

const mutantsText = (r: Line) => (r.mutants === undefined ? '' : `, ${r.mutants} answer-mutant canar${r.mutants === 1 ? 'y' : 'ies'}`);

function printer(minStrength: number): (r: Line) => void {
  return (r) =>
    console.log(
      `${r.valid ? 'VALID  ' : 'INVALID'} ${r.instanceId} (${r.durationS.toFixed(1)} s${mutantsText(r)})${r.quality ? `: ${qualityText(r.quality, minStrength)}` : ''}${r.problems.length ? (r.quality ? '; ' : ': ') + r.problems.join('; ') : ''}`,
    );
}
const print = printer(DEFAULT_MIN_STRENGTH);

export async function validateTasksLocally(
  tasksFile: string,
  concurrency: number,
  onResult: (r: Line) => void = print,
  sandboxes?: SandboxBackend,
  quality?: { k: number; seed: number },
): Promise<{ results: Line[]; loadErrors: string[] }> {
  const { validateTask } = await import('../../activities/grade.ts');
  const { measureTaskQuality } = await import('../../activities/task-quality.ts');
  const { createSandboxBackend } = await import('../../activities/sandbox/index.ts');
  const { buildImages } = await import('../../activities/images.ts');
  const { tasks, errors } = await loadTasks(tasksFile);
  const backend = sandboxes ?? (await createSandboxBackend());
  await buildImages(tasks, { concurrency: Math.min(concurrency, 4) });
  const results: Line[] = [];
  await mapInLanes(tasks, Math.max(1, concurrency), async (task) => {
    let r: Line;
    try {
      if (quality) {
        const t0 = Date.now();
        const m = await measureTaskQuality(task, { backend, ...quality });
        const v = m.validation;
        r = { instanceId: task.instance_id, valid: v.valid, problems: v.problems, durationS: (Date.now() - t0) / 1000, mutants: v.mutants, quality: m.quality };
      } else {
        const v = await validateTask({ task, backend });
        r = { instanceId: v.instanceId, valid: v.valid, problems: v.problems, durationS: v.durationS, mutants: v.mutants };
      }
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
      .option('--address <host:port>', 'run as the Temporal workflow validateTasks on this server')
      .option('--quality', 'also measure the quality of each task’s tests: gold twice, strength from wrong fixes, FAIL_TO_PASS count, test time, dedupe key')
      .option('--strength-k <k>', 'wrong fixes graded per task for its strength (with --quality)', '5')
      .option('--seed <s>', 'seed of the wrong fixes (with --quality)', '0')
      .option('--min-strength <f>', `flag tasks whose strength is below this as WEAK (with --quality)`, String(DEFAULT_MIN_STRENGTH))
      .option('--quality-out <file>', 'write {instance_id, quality} lines (JSONL) for env.taskFilter.qualityFile and evaluations (with --quality)'),
  ).action(
    async (o: {
      tasks?: string;
      concurrency: string;
      address?: string;
      backend: string;
      kubeconfig?: string;
      namespace?: string;
      quality?: boolean;
      strengthK: string;
      seed: string;
      minStrength: string;
      qualityOut?: string;
    }) => {
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
      const k = Number(o.strengthK);
      const seed = Number(o.seed);
      const minStrength = Number(o.minStrength);
      if (!Number.isInteger(k) || k < 0 || k > 100) throw new Error(`--strength-k must be an integer in 0..100, got ${o.strengthK}`);
      if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed must be a non-negative integer, got ${o.seed}`);
      if (!(minStrength >= 0 && minStrength <= 1)) throw new Error(`--min-strength must be in [0, 1], got ${o.minStrength}`);
      if (o.qualityOut && !o.quality) throw new Error('--quality-out needs --quality');
      const quality = o.quality ? { k, seed } : undefined;
      const show = printer(minStrength);
      let results: Line[];
      let loadErrors: string[];
      if (o.address) {
        const { Client, Connection } = await import('@temporalio/client');
        const connection = await Connection.connect({ address: o.address });
        const client = new Client({ connection });
        const id = `validate-tasks-${Date.now()}`;
        const handle = await client.workflow.start('validateTasks', {
          taskQueue: 'learner',
          workflowId: id,
          args: [{ tasksFile: resolve(file), concurrency, ...(quality ? { quality } : {}) }],
        });
        // a failed run ends in one line naming the workflow and the innermost cause (scripts/cli-log.ts)
        const r = await followResult<{ results: Line[]; loadErrors: string[] }>(handle, id).finally(() => connection.close());
        ({ results, loadErrors } = r);
        results.forEach(show);
      } else {
        ({ results, loadErrors } = await validateTasksLocally(file, concurrency, show, await sandboxBackendFrom(sandboxes), quality));
      }
      for (const e of loadErrors) console.log(`INVALID record ${e}`);
      // the tasks whose FAIL_TO_PASS tests admit no answer-mutant: their graders have the copy canaries only
      const none = results.filter((r) => r.valid && r.mutants === 0).map((r) => r.instanceId);
      if (none.length) console.log(`no answer-mutant canary (FAIL_TO_PASS tests without a checkable literal answer): ${none.join(', ')}`);
      if (quality) {
        const measured = results.filter((r) => r.quality);
        const weak = measured.filter((r) => !isStrong(r.quality, minStrength));
        console.log(
          `quality: ${measured.length} measured, ${weak.length} weak (strength below ${minStrength})${weak.length ? `: ${weak.map((r) => r.instanceId).join(', ')}` : ''}`,
        );
        if (o.qualityOut) {
          writeFileSync(o.qualityOut, measured.map((r) => JSON.stringify({ instance_id: r.instanceId, quality: r.quality })).join('\n') + (measured.length ? '\n' : ''));
          console.log(`quality written to ${o.qualityOut}`);
        }
      }
      const valid = results.filter((r) => r.valid).length;
      const invalid = results.length - valid + loadErrors.length;
      console.log(`${valid} valid, ${invalid} invalid`);
      process.exitCode = invalid === 0 ? 0 : 1;
    },
  );
}
