// The local Kubernetes cluster for a test file: started before its tests through the code of `swerl cluster
// up` (or found running), stopped after them when this file started it. Its kubeconfig becomes KUBECONFIG
// and the file's own namespace SWERL_K8S_NAMESPACE, so the Kubernetes backend of an in-process or child
// worker (createSandboxBackend('kubernetes')) uses them.
import { after, before } from 'node:test';
import { clusterDown, clusterUp, ensureNamespace, kubeConfigOf, type ClusterInfo } from '../../services/k8s-cluster.ts';

export interface TestCluster extends ClusterInfo {
  /** this file's sandbox namespace */
  testNamespace: string;
}

/**
 * `images()` names the images the file's pods use (loaded from Docker before the tests). A cluster that was
 * running before the file is left running; one the file started is stopped (SWERL_K8S_KEEP=1 keeps it).
 */
export function useK8sCluster(onReady: (c: TestCluster) => void, o: { images?: () => Promise<string[]>; namespace?: string } = {}): void {
  let info: ClusterInfo | undefined;
  let testNamespace = '';
  before(async () => {
    const images = (await o.images?.()) ?? [];
    info = await clusterUp({ images, log: process.env.SWERL_TEST_VERBOSE ? (s) => console.error(`[cluster] ${s}`) : undefined });
    console.log(
      `# cluster ${info.started ? 'started' : 'found running'} in ${info.seconds.toFixed(1)} s (Kubernetes ${info.version}, ${images.length} image(s) loaded or present)`,
    );
    testNamespace = o.namespace ?? `swerl-test-${process.pid}`;
    await ensureNamespace(testNamespace);
    process.env.KUBECONFIG = info.kubeconfig;
    process.env.SWERL_K8S_NAMESPACE = testNamespace;
    onReady({ ...info, testNamespace });
  });
  after(async () => {
    if (info?.started && process.env.SWERL_K8S_KEEP !== '1') {
      const r = await clusterDown();
      console.log(`# cluster stopped in ${r.seconds.toFixed(1)} s`);
    } else if (info && testNamespace) {
      const lib = await import('@kubernetes/client-node');
      const core = (await kubeConfigOf()).makeApiClient(lib.CoreV1Api);
      await core.deleteNamespace({ name: testNamespace }).catch(() => undefined);
    }
  });
}
