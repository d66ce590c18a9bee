// Sandbox backend factory (DESIGN §3): Docker on one machine, Kubernetes pods on a cluster.
// SWERL_SANDBOX_BACKEND=docker|kubernetes picks the default; the Kubernetes client loads only when used.
import { z } from 'zod';
import type { SandboxBackend } from '../../lib/sandbox.ts';
import { DockerBackend, type DockerBackendOptions } from './docker.ts';
import type { K8sBackendOptions } from './k8s.ts';
import { timedSandboxStart } from '../../lib/metrics.ts';

export { DockerBackend, DockerSandbox, removeSandboxContainers } from './docker.ts';
export { SandboxDeadError, SandboxPathError, SANDBOX_LABEL, filterPatch } from './common.ts';

export const BackendKind = z.enum(['docker', 'kubernetes']);
export type BackendKind = z.infer<typeof BackendKind>;

export interface BackendOptions {
  docker?: DockerBackendOptions;
  kubernetes?: K8sBackendOptions;
}

export function backendKindFromEnv(env: NodeJS.ProcessEnv = process.env): BackendKind {
  const v = env.SWERL_SANDBOX_BACKEND ?? 'docker';
  const r = BackendKind.safeParse(v);
  if (!r.success) throw new Error(`SWERL_SANDBOX_BACKEND must be docker or kubernetes, got ${JSON.stringify(v)}`);
  return r.data;
}

const cache = new Map<BackendKind, SandboxBackend>();

/** The kinds whose shared backend this process has created (the sweeper covers them too). */
export function sharedBackendKinds(): BackendKind[] {
  return [...cache.keys()];
}

/** A backend of the given kind (default from the environment); one instance per kind per process when no options are given. */
export async function createSandboxBackend(kind: BackendKind = backendKindFromEnv(), opts: BackendOptions = {}): Promise<SandboxBackend> {
  const shared = opts.docker === undefined && opts.kubernetes === undefined;
  if (shared && cache.has(kind)) return cache.get(kind)!;
  let b: SandboxBackend;
  if (kind === 'docker') b = new DockerBackend(opts.docker);
  else {
    const { K8sBackend } = await import('./k8s.ts');
    b = new K8sBackend(opts.kubernetes);
  }
  const start = b.start.bind(b);
  b.start = (image, limits, labels) => timedSandboxStart(kind, () => start(image, limits, labels));
  if (shared) cache.set(kind, b);
  return b;
}
