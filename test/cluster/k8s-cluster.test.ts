// swerl's local one-node Kubernetes cluster (services/k8s-cluster.ts, `swerl cluster`): up through the same
// code as `swerl cluster up`, its kubeconfig read by @kubernetes/client-node and by kubectl, a second `up`
// finding it, and `down` leaving nothing running: no process, no pod's container, no network namespace or
// mount, the bridge gone and the sysctls the kubelet rewrites restored.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { KUBELET_SYSCTLS, clusterLayout } from '../../services/k8s-cluster-config.ts';
import { clusterDown, clusterStatus, clusterUp, kubeConfigOf, leftovers, normalizeImageRef, stopComponent } from '../../services/k8s-cluster.ts';
import { useK8sCluster, type TestCluster } from '../helpers/k8s.ts';
import { ROOT, waitFor } from '../helpers/temporal.ts';

const run = promisify(execFile);
let cluster: TestCluster;
useK8sCluster((c) => (cluster = c));

const swerl = (...args: string[]) => run(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts/cli.ts'), ...args], { cwd: ROOT, encoding: 'utf8' });
const netns = () => (existsSync('/run/netns') ? readdirSync('/run/netns').filter((n) => n.startsWith('cni-')) : []);
const sysctls = () => Object.fromEntries(KUBELET_SYSCTLS.map((k) => [k, readFileSync(`/proc/sys/${k}`, 'utf8').trim()]));

test('image references as containerd names them (what `load` compares)', () => {
  assert.equal(normalizeImageRef('swerl-task-x:abc'), 'docker.io/library/swerl-task-x:abc');
  assert.equal(normalizeImageRef('debian'), 'docker.io/library/debian:latest');
  assert.equal(normalizeImageRef('org/img:1'), 'docker.io/org/img:1');
  assert.equal(normalizeImageRef('localhost/swerl-pause:1'), 'localhost/swerl-pause:1');
  assert.equal(normalizeImageRef('registry.example:5000/a/b:2'), 'registry.example:5000/a/b:2');
});

test('the cluster runs; its kubeconfig serves client-node and kubectl; a second up finds it', async () => {
  const st = await clusterStatus();
  assert.equal(st.running, true);
  assert.deepEqual(
    st.components.map((c) => [c.name, c.alive]),
    [
      ['etcd', true],
      ['containerd', true],
      ['kube-apiserver', true],
      ['kube-controller-manager', true],
      ['kube-scheduler', true],
      ['kubelet', true],
    ],
  );
  const lib = await import('@kubernetes/client-node');
  const kc = await kubeConfigOf();
  const nodes = await kc.makeApiClient(lib.CoreV1Api).listNode();
  assert.deepEqual(
    nodes.items.map((n) => n.metadata?.name),
    ['localhost'],
  );
  const node = nodes.items[0]!;
  assert.ok(node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
  // the version is stamped (unstamped components say v0.0.0-master)
  assert.equal(node.status?.nodeInfo?.kubeletVersion, cluster.version);
  assert.equal(node.status?.allocatable?.cpu, '2');
  const version = await kc.makeApiClient(lib.VersionApi).getCode();
  assert.equal(version.gitVersion, cluster.version);

  const again = await clusterUp();
  assert.equal(again.started, false);
  assert.equal(again.server, cluster.server);
  assert.ok(again.seconds < 10, `found in ${again.seconds} s`);

  // the CLI: `up` finds it, `status` exits 0, kubectl (built into the cluster binary) reads the kubeconfig
  const up = await swerl('cluster', 'up', '--no-images');
  assert.match(up.stdout, new RegExp(`^running: Kubernetes ${cluster.version} at ${cluster.server.replace(/[.]/g, '\\.')}`, 'm'));
  assert.match(up.stdout, new RegExp(`^export KUBECONFIG=${cluster.kubeconfig}$`, 'm'));
  const status = await swerl('cluster', 'status');
  assert.match(status.stdout, /^running: /);
  const kubectl = await swerl('cluster', 'kubectl', '--', 'get', 'nodes', '-o', 'name');
  assert.equal(kubectl.stdout.trim(), 'node/localhost');
});

test('down after the kubelet died leaves nothing running: processes, pods’ containers, network namespaces, mounts, cgroups; sysctls restored', async () => {
  const l = clusterLayout(cluster.stateDir);
  const originals = JSON.parse(readFileSync(l.sysctlsFile, 'utf8')) as Record<string, string>;
  const netnsBefore = new Set(netns());
  // a pod running when the cluster goes down (the pause image is always there)
  const lib = await import('@kubernetes/client-node');
  const core = (await kubeConfigOf()).makeApiClient(lib.CoreV1Api);
  const st = await clusterStatus();
  const pauseImage = JSON.parse(readFileSync(l.clusterFile, 'utf8')).pauseImage as string;
  await core.createNamespacedPod({
    namespace: cluster.testNamespace,
    body: {
      metadata: { name: 'left-running' },
      spec: { containers: [{ name: 'c', image: pauseImage, imagePullPolicy: 'Never' }], terminationGracePeriodSeconds: 0, automountServiceAccountToken: false },
    },
  });
  await waitFor(
    'the pod running',
    async () => (await core.readNamespacedPod({ name: 'left-running', namespace: cluster.testNamespace })).status?.phase === 'Running',
    120_000,
    200,
  );
  assert.ok(
    netns().some((n) => !netnsBefore.has(n)),
    'the pod has its network namespace',
  );
  const pids = st.components.map((c) => c.pid!);
  // the worst case: a kubelet that died leaves its pods' containers running, and nobody to stop them
  await stopComponent('kubelet', { kill: true });

  const r = await clusterDown();
  console.log(`# down in ${r.seconds.toFixed(1)} s (${r.stopped.join(', ')})`);
  assert.deepEqual([...r.stopped].sort(), ['containerd', 'etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler']);
  const left = leftovers();
  assert.deepEqual(left.pids, [], 'no process names the state directory (components, shims, pods)');
  for (const pid of pids) assert.equal(existsSync(`/proc/${pid}/cmdline`) && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(cluster.stateDir), false, `pid ${pid}`);
  assert.equal(left.bridge, false, 'the sandbox bridge is gone');
  assert.deepEqual(left.mounts, [], 'no mount under the state directory');
  assert.deepEqual(
    netns().filter((n) => !netnsBefore.has(n)),
    [],
    'no network namespace of a pod left',
  );
  assert.deepEqual(sysctls(), originals, 'the sysctls the kubelet rewrites are back');
  assert.deepEqual(
    readdirSync('/sys/fs/cgroup').filter((h) => existsSync(join('/sys/fs/cgroup', h, 'kubepods'))),
    [],
    'no kubepods cgroup left',
  );
  assert.equal((await clusterStatus()).running, false);
  // images stay in the state directory for the next up
  assert.ok(existsSync(l.containerdRoot));

  if (!cluster.started) await clusterUp(); // it was running before this file: leave it so
});
