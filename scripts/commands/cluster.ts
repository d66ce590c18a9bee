// `swerl cluster up|down|status|load|kubectl`: swerl's local one-node Kubernetes cluster
// (services/k8s-cluster.ts; docs/kubernetes.md). Also the `--backend docker|kubernetes`, `--kubeconfig` and
// `--namespace` options `swerl grade`, `swerl validate-tasks` and `swerl eval` share.
import type { Command } from 'commander';
import type { KubeConfig } from '@kubernetes/client-node';
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { z } from 'zod';
import type { SandboxBackend } from '../../lib/sandbox.ts';
import { loadTasks } from '../../lib/swe/task.ts';
import { defaultTasksFile } from './images.ts';
import { checkKubernetesAccess, loadKubeConfig } from '../../activities/sandbox/k8s-access.ts';

const BackendOptionsSchema = z
  .object({
    backend: z.enum(['docker', 'kubernetes'], { error: (i) => `must be docker or kubernetes, got ${JSON.stringify(i.input)}` }).default('docker'),
    kubeconfig: z.string().min(1).optional(),
    namespace: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, { error: (i) => `must be a DNS-1123 label, got ${JSON.stringify(i.input)}` })
      .optional(),
  })
  .refine((o) => o.backend === 'kubernetes' || (o.kubeconfig === undefined && o.namespace === undefined), { error: '--kubeconfig and --namespace go with --backend kubernetes' });
export type BackendCliOptions = z.infer<typeof BackendOptionsSchema>;

/** Adds --backend, --kubeconfig and --namespace to a command. */
export function withBackendOptions(cmd: Command): Command {
  return cmd
    .option('--backend <kind>', 'sandboxes: docker (containers) or kubernetes (pods)', 'docker')
    .option('--kubeconfig <file>', 'with --backend kubernetes: the cluster (default $KUBECONFIG, else ~/.kube/config; `swerl cluster up` prints its own)')
    .option('--namespace <ns>', 'with --backend kubernetes: the namespace of the sandbox pods (default $SWERL_K8S_NAMESPACE, else swerl)');
}

/** The backend options of a command line, validated; an error names the option and the value. */
export function parseBackendOptions(raw: { backend?: unknown; kubeconfig?: unknown; namespace?: unknown }): BackendCliOptions {
  const r = BackendOptionsSchema.safeParse({ backend: raw.backend, kubeconfig: raw.kubeconfig, namespace: raw.namespace });
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new Error(i.path.length ? `--${String(i.path[0])}: ${i.message}` : i.message);
  }
  return { ...r.data, ...(r.data.kubeconfig ? { kubeconfig: resolve(r.data.kubeconfig) } : {}) };
}

/** The kubeconfig of these options, once its cluster has answered: a cluster that cannot work stops the command before its first task. */
export async function checkedKubeConfig(o: Pick<BackendCliOptions, 'kubeconfig' | 'namespace'>): Promise<KubeConfig> {
  const { kubeConfig, source } = await loadKubeConfig(o.kubeconfig);
  await checkKubernetesAccess(kubeConfig, source, o.namespace ?? process.env.SWERL_K8S_NAMESPACE ?? 'swerl');
  return kubeConfig;
}

/**
 * The sandbox backend of these options. On swerl's own cluster (the kubeconfig's server is the local
 * cluster's), an image a pod needs is loaded from Docker first: that cluster cannot pull.
 */
export async function sandboxBackendFrom(o: BackendCliOptions): Promise<SandboxBackend> {
  const { createSandboxBackend } = await import('../../activities/sandbox/index.ts');
  if (o.backend === 'docker') return createSandboxBackend('docker');
  const kubeConfig = await checkedKubeConfig(o);
  const backend = await createSandboxBackend('kubernetes', { kubernetes: { kubeConfig, ...(o.namespace ? { namespace: o.namespace } : {}) } });
  const { clusterStatus, loadImages } = await import('../../services/k8s-cluster.ts');
  const st = await clusterStatus();
  if (!st.running || kubeConfig.getCurrentCluster()?.server !== st.server) return backend;
  const loading = new Map<string, Promise<unknown>>();
  const start = backend.start.bind(backend);
  backend.start = async (image, limits, labels) => {
    if (!loading.has(image)) loading.set(image, loadImages([image]));
    await loading.get(image);
    return start(image, limits, labels);
  };
  return backend;
}

/** Images of the tasks in `tasksFile` that Docker holds (what `cluster up` and `cluster load --tasks` load). */
async function taskImagesInDocker(tasksFile: string | undefined): Promise<string[]> {
  if (!tasksFile) return [];
  const { taskImageName } = await import('../../activities/images.ts');
  const { imageExists } = await import('../../services/docker.ts');
  const { tasks } = await loadTasks(tasksFile);
  const names = await Promise.all(tasks.map((t) => taskImageName(t).catch(() => null)));
  const out: string[] = [];
  for (const n of names) if (n && (await imageExists(n).catch(() => false))) out.push(n);
  return out;
}

/**
 * For `swerl eval --backend kubernetes`: with the embedded worker, stops at once when its cluster cannot work
 * (a worker of a server has its own kubeconfig). On swerl's own cluster, builds the images of `taskIds` (all tasks
 * when empty) and loads them, since the worker's pods cannot pull; does nothing more for another cluster.
 */
export async function prepareLocalClusterImages(
  tasksFile: string,
  taskIds: string[],
  sandboxes: Pick<BackendCliOptions, 'kubeconfig' | 'namespace'>,
  embeddedWorker: boolean,
  log: (s: string) => void,
): Promise<void> {
  const { clusterStatus, loadImages } = await import('../../services/k8s-cluster.ts');
  const kc = embeddedWorker ? await checkedKubeConfig(sandboxes) : (await loadKubeConfig(sandboxes.kubeconfig).catch(() => null))?.kubeConfig;
  if (!kc) return;
  const st = await clusterStatus();
  if (!st.running || kc.getCurrentCluster()?.server !== st.server) return;
  const { buildImages, taskImageName } = await import('../../activities/images.ts');
  const { imageExists } = await import('../../services/docker.ts');
  const { tasks } = await loadTasks(tasksFile);
  const chosen = taskIds.length ? tasks.filter((t) => taskIds.includes(t.instance_id)) : tasks;
  await buildImages(
    chosen.filter((t) => !t.image),
    { concurrency: 2 },
  );
  const images: string[] = [];
  for (const image of await Promise.all(chosen.map((t) => taskImageName(t)))) {
    // a record naming an image Docker lacks: its episodes fail as infrastructure, naming it
    if (await imageExists(image)) images.push(image);
    else log(`image ${image} is not in Docker: not loaded into the local cluster`);
  }
  const r = await loadImages(images, { log });
  if (r.loaded.length) log(`loaded ${r.loaded.length} image(s) into the local cluster in ${r.seconds.toFixed(1)} s`);
}

export function register(program: Command): void {
  const cluster = program.command('cluster').description("swerl's local one-node Kubernetes cluster (etcd, containerd, the Kubernetes components) for sandbox pods");
  const stateOpt = '--state-dir <dir>';
  const stateHelp = 'state directory (default $SWERL_K8S_STATE, else ~/.local/state/swerl/k8s)';
  const log = (s: string) => console.error(`[cluster] ${s}`);

  cluster
    .command('up')
    .description('start the cluster (or find it running) and load task images from Docker; prints the kubeconfig')
    .option(stateOpt, stateHelp)
    .option('--tasks <file>', 'load the images of these tasks that Docker holds (default: the default tasks file)')
    .option('--image <name...>', 'also load these Docker images')
    .option('--no-images', 'load no images')
    .action(async (o: { stateDir?: string; tasks?: string; image?: string[]; images: boolean }) => {
      const { clusterUp } = await import('../../services/k8s-cluster.ts');
      const images = o.images ? [...(await taskImagesInDocker(o.tasks ?? defaultTasksFile())), ...(o.image ?? [])] : [];
      const info = await clusterUp({ ...(o.stateDir ? { stateDir: resolve(o.stateDir) } : {}), images, log });
      console.log(`${info.started ? 'started' : 'running'}: Kubernetes ${info.version} at ${info.server} (${info.seconds.toFixed(1)} s), sandbox namespace ${info.namespace}`);
      console.log(`export KUBECONFIG=${info.kubeconfig}`);
    });

  cluster
    .command('down')
    .description("stop the cluster: its processes, the pods' containers and network, the sysctls the kubelet changed restored")
    .option(stateOpt, stateHelp)
    .option('--purge', 'also remove the state directory (certificates and loaded images)')
    .action(async (o: { stateDir?: string; purge?: boolean }) => {
      const { clusterDown } = await import('../../services/k8s-cluster.ts');
      const r = await clusterDown({ ...(o.stateDir ? { stateDir: resolve(o.stateDir) } : {}), purge: !!o.purge, log });
      console.log(r.stopped.length ? `stopped ${r.stopped.join(', ')} in ${r.seconds.toFixed(1)} s` : 'nothing was running');
    });

  cluster
    .command('status')
    .description('which components run; exit 0 when the cluster is up')
    .option(stateOpt, stateHelp)
    .option('--json', 'as JSON')
    .action(async (o: { stateDir?: string; json?: boolean }) => {
      const { clusterStatus } = await import('../../services/k8s-cluster.ts');
      const st = await clusterStatus(o.stateDir ? { stateDir: resolve(o.stateDir) } : {});
      if (o.json) console.log(JSON.stringify(st, null, 1));
      else {
        console.log(`${st.running ? 'running' : 'not running'}: ${st.stateDir}${st.server ? ` (${st.server}, Kubernetes ${st.version})` : ''}`);
        for (const c of st.components) console.log(`  ${c.name.padEnd(24)} ${c.alive ? `pid ${c.pid}` : 'stopped'}`);
        if (st.running) console.log(`export KUBECONFIG=${st.kubeconfig}`);
      }
      process.exitCode = st.running ? 0 : 1;
    });

  cluster
    .command('load [images...]')
    .description('load Docker images into the cluster (those it lacks); pods can only use loaded images')
    .option(stateOpt, stateHelp)
    .option('--tasks <file>', 'also the images of these tasks that Docker holds')
    .action(async (images: string[], o: { stateDir?: string; tasks?: string }) => {
      const { loadImages } = await import('../../services/k8s-cluster.ts');
      const all = [...images, ...(await taskImagesInDocker(o.tasks))];
      if (!all.length) throw new Error('name images to load, or --tasks FILE');
      const r = await loadImages(all, { ...(o.stateDir ? { stateDir: resolve(o.stateDir) } : {}), log });
      console.log(`${r.loaded.length} loaded, ${r.present.length} already there (${r.seconds.toFixed(1)} s)`);
    });

  cluster
    .command('kubectl')
    .description('kubectl (built into the cluster binary) on the cluster: swerl cluster kubectl -- get pods -A')
    .option(stateOpt, stateHelp)
    .allowUnknownOption()
    .argument('[args...]')
    .action(async (args: string[], o: { stateDir?: string }) => {
      const { clusterStatus, ensureK8sBinaries } = await import('../../services/k8s-cluster.ts');
      const st = await clusterStatus(o.stateDir ? { stateDir: resolve(o.stateDir) } : {});
      const { kube } = await ensureK8sBinaries();
      const r = spawnSync(kube, ['kubectl', `--kubeconfig=${st.kubeconfig}`, ...args], { stdio: 'inherit' });
      process.exitCode = r.status ?? 1;
    });
}
