// Which Kubernetes cluster a sandbox backend talks to, and whether it answers, checked before the first task
// (docs/kubernetes.md): with nothing configured client-node falls back to http://localhost:8080, and every
// sandbox would then fail on its own with a TLS error that names neither the cause nor the fix.
import type * as k8s from '@kubernetes/client-node';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';

/** What a user does when no cluster is configured or the configured one does not answer. */
export const CLUSTER_FIX =
  "set KUBECONFIG or pass --kubeconfig FILE for your cluster, or start swerl's own one-node cluster with `swerl cluster up` (it prints the KUBECONFIG to export)";

/** Where the kubeconfig comes from: --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster; null when none is there. */
export function kubeconfigSource(file: string | undefined, env: NodeJS.ProcessEnv = process.env, home = homedir()): string | null {
  if (file) return `--kubeconfig ${file}`;
  const listed = (env.KUBECONFIG ?? '').split(delimiter).filter((f) => f && existsSync(f));
  if (listed.length) return `KUBECONFIG=${env.KUBECONFIG}`;
  const own = join(home, '.kube', 'config');
  if (existsSync(own)) return own;
  if (env.KUBERNETES_SERVICE_HOST && existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token')) return 'in-cluster service account';
  return null;
}

/** The kubeconfig of `file` or the default places; throws, naming the fix, when there is none. */
export async function loadKubeConfig(file?: string): Promise<{ kubeConfig: k8s.KubeConfig; source: string }> {
  if (file && !existsSync(file)) throw new Error(`--kubeconfig ${file}: no such file; ${CLUSTER_FIX}`);
  const source = kubeconfigSource(file);
  if (!source) {
    const env = process.env.KUBECONFIG ? `KUBECONFIG=${process.env.KUBECONFIG} names no existing file, ` : 'KUBECONFIG is not set, ';
    throw new Error(`--backend kubernetes: no Kubernetes cluster is configured (${env}no --kubeconfig, no ~/.kube/config): ${CLUSTER_FIX}`);
  }
  const lib = await import('@kubernetes/client-node');
  const kubeConfig = new lib.KubeConfig();
  if (file) kubeConfig.loadFromFile(file);
  else kubeConfig.loadFromDefault();
  if (!kubeConfig.getCurrentCluster())
    throw new Error(`${source}: the kubeconfig has no current cluster (current-context ${JSON.stringify(kubeConfig.getCurrentContext())}); ${CLUSTER_FIX}`);
  return { kubeConfig, source };
}

/** One API call the backend needs anyway (list the namespace's pods), within `timeoutMs`; throws naming the cluster and the fix. */
export async function checkKubernetesAccess(kubeConfig: k8s.KubeConfig, source: string, namespace: string, timeoutMs = 15_000): Promise<void> {
  const lib = await import('@kubernetes/client-node');
  const server = kubeConfig.getCurrentCluster()?.server ?? '?';
  const core = kubeConfig.makeApiClient(lib.CoreV1Api);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${timeoutMs / 1000} s`)), timeoutMs);
  });
  try {
    await Promise.race([core.listNamespacedPod({ namespace, limit: 1 }), timeout]);
  } catch (e) {
    const code = (e as { code?: number }).code;
    const why = code === 401 || code === 403 ? `refuses these credentials (HTTP ${code}) to list pods in namespace ${namespace}` : `does not answer (${(e as Error).message})`;
    throw new Error(`--backend kubernetes: the cluster at ${server} (${source}) ${why}: ${CLUSTER_FIX}`);
  } finally {
    clearTimeout(timer);
  }
}
