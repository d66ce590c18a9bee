// Kubernetes against Docker, measured in the same run on the same images (`npm run bench:grade -- --backend
// kubernetes`, on swerl's local cluster, started if it is not running and stopped again after):
//   - sandbox start to first command: start(image) until `true` has run in it, interleaved, `reps` times each;
//   - graded patches per minute: the gold patches of the tasks (bench/grade.ts: SWERL_TASKS) graded 2 at a time (one pod or container
//     each, fresh per patch), each backend in turn.
// Pods request 500m CPU here: 2 at a time fit the node's 2 allocatable CPUs beside a terminating one.
import { gradePatch } from '../activities/grade.ts';
import { K8sBackend } from '../activities/sandbox/k8s.ts';
import { mapInLanes } from '../lib/pool.ts';
import type { SandboxBackend } from '../lib/sandbox.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { clusterDown, clusterUp, ensureNamespace } from '../services/k8s-cluster.ts';
import { imagesFor, testBackend } from '../test/helpers/docker.ts';
import { benchTasks } from '../test/helpers/swe-tasks.ts';

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function firstCommand(backend: SandboxBackend, image: string): Promise<number> {
  const t0 = performance.now();
  const sb = await backend.start(image, { cpus: 1, memoryBytes: 1 << 30 });
  try {
    const r = await sb.exec('true', 30);
    if (r.exit !== 0) throw new Error(`true exited ${r.exit}: ${r.stderr}`);
    return (performance.now() - t0) / 1000;
  } finally {
    await sb.stop();
  }
}

/** Gold patches of `tasks`, `concurrency` at a time; patches per minute and the failures. */
async function gradeAll(backend: SandboxBackend, tasks: SweTask[], concurrency: number): Promise<{ perMinute: number; seconds: number; notResolved: string[] }> {
  const t0 = performance.now();
  const notResolved: string[] = [];
  await mapInLanes(tasks, concurrency, async (task) => {
    const g = await gradePatch({ task, patch: task.patch, backend });
    if (!g.resolved) notResolved.push(`${task.instance_id} (${g.reason})`);
  });
  const seconds = (performance.now() - t0) / 1000;
  return { perMinute: (tasks.length / seconds) * 60, seconds, notResolved };
}

export async function compareBackends(o: { reps: number }): Promise<void> {
  const { tasks } = await benchTasks();
  const images = await imagesFor(tasks);
  const up = await clusterUp({ images, log: (s) => console.error(`[cluster] ${s}`) });
  console.log(`cluster ${up.started ? 'started' : 'found running'} in ${up.seconds.toFixed(1)} s (Kubernetes ${up.version})`);
  const namespace = `swerl-bench-${process.pid}`;
  await ensureNamespace(namespace);
  const lib = await import('@kubernetes/client-node');
  const kubeConfig = new lib.KubeConfig();
  kubeConfig.loadFromFile(up.kubeconfig);
  const k8s = new K8sBackend({ kubeConfig, namespace, requests: { cpu: '500m', memory: '256Mi' } });
  const { backend: docker, cleanup } = testBackend();
  try {
    const starts = { docker: [] as number[], kubernetes: [] as number[] };
    await firstCommand(docker, images[0]!); // warm both paths once (client loading, first connection)
    await firstCommand(k8s, images[0]!);
    for (let r = 0; r < o.reps; r++) {
      for (const image of images.slice(0, 4)) {
        starts.docker.push(await firstCommand(docker, image));
        starts.kubernetes.push(await firstCommand(k8s, image));
      }
    }
    const d = median(starts.docker);
    const k = median(starts.kubernetes);
    console.log(`\nsandbox start to first command (median of ${starts.docker.length}, seconds)`);
    console.log(`  docker ${d.toFixed(2)}   kubernetes ${k.toFixed(2)}   kubernetes/docker ${(k / d).toFixed(2)}`);
    console.log(`  docker all: ${starts.docker.map((x) => x.toFixed(2)).join(' ')}`);
    console.log(`  kubernetes all: ${starts.kubernetes.map((x) => x.toFixed(2)).join(' ')}`);

    console.log(`\ngraded gold patches per minute (${tasks.length} tasks, 2 at a time)`);
    const rate = { docker: [] as number[], kubernetes: [] as number[] };
    for (let r = 0; r < o.reps; r++) {
      for (const [name, backend] of [
        ['docker', docker],
        ['kubernetes', k8s],
      ] as const) {
        const g = await gradeAll(backend, tasks, 2);
        rate[name].push(g.perMinute);
        console.log(
          `  ${name.padEnd(10)} ${g.perMinute.toFixed(1)} per minute (${g.seconds.toFixed(1)} s)${g.notResolved.length ? `; not resolved: ${g.notResolved.join(', ')}` : ''}`,
        );
      }
    }
    const rd = median(rate.docker);
    const rk = median(rate.kubernetes);
    console.log(`  median: docker ${rd.toFixed(1)}, kubernetes ${rk.toFixed(1)}, kubernetes/docker ${(rk / rd).toFixed(2)}`);
  } finally {
    await cleanup();
    const core = kubeConfig.makeApiClient(lib.CoreV1Api);
    await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    if (up.started) console.log(`cluster stopped in ${(await clusterDown()).seconds.toFixed(1)} s`);
  }
}
