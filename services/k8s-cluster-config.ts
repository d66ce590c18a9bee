// The files and command lines of swerl's local one-node Kubernetes cluster (services/k8s-cluster.ts): pure
// functions of the state directory's layout and the ports picked at `up`. The choices that matter on this
// kind of machine (docs/kubernetes.md, "Choices this machine forces") are said where they are made.
import { join } from 'node:path';
import { DEFAULT_LIMITS } from '../lib/sandbox.ts';

/** The node's name: the kubelet listens on 127.0.0.1 and the API server reaches it by this name (no loopback node IP). */
export const NODE_NAME = 'localhost';
/** The namespace `up` creates for sandboxes (the backend's default). */
export const SANDBOX_NAMESPACE = 'swerl';
/** The bridge the sandboxes' macvlan interfaces hang off: no address and no ports, so frames go nowhere. */
export const SANDBOX_BRIDGE = 'swerl-sbx0';
export const POD_SUBNET = '10.213.0.0/16';
export const SERVICE_SUBNET = '10.214.0.0/24';
/** The first address of SERVICE_SUBNET: the `kubernetes` service, named in the API server's certificate. */
export const SERVICE_IP = '10.214.0.1';
/** Registries whose pulls containerd is pointed at a closed local port: nothing may leave the machine. */
export const BLOCKED_REGISTRIES = ['docker.io', 'registry-1.docker.io', 'registry.k8s.io', 'k8s.gcr.io', 'gcr.io', 'quay.io', 'ghcr.io', 'localhost', '_default'];
/** Where those pulls go: port 9 (discard) on loopback, where nothing listens. */
export const CLOSED_REGISTRY = 'http://127.0.0.1:9';
/** The kubelet rewrites these unless protectKernelDefaults (which makes it refuse to start here): saved at up, restored at down. */
export const KUBELET_SYSCTLS = ['vm/overcommit_memory', 'kernel/panic', 'kernel/panic_on_oops'];

export const COMPONENTS = ['etcd', 'containerd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubelet'] as const;
export type Component = (typeof COMPONENTS)[number];

export interface ClusterLayout {
  stateDir: string;
  pki: string;
  logs: string;
  etcdData: string;
  containerdRoot: string;
  containerdState: string;
  containerdConfig: string;
  containerdSocket: string;
  registryHosts: string;
  cniConf: string;
  cniIpam: string;
  kubeletRoot: string;
  kubeletConfig: string;
  podLogs: string;
  /** the admin kubeconfig: what users, tests and the controller-manager and scheduler use */
  kubeconfig: string;
  nodeKubeconfig: string;
  /** ports, pids and binaries of the running cluster */
  clusterFile: string;
  sysctlsFile: string;
}

export function clusterLayout(stateDir: string): ClusterLayout {
  const c = join(stateDir, 'containerd');
  return {
    stateDir,
    pki: join(stateDir, 'pki'),
    logs: join(stateDir, 'logs'),
    etcdData: join(stateDir, 'etcd'),
    containerdRoot: join(c, 'root'),
    containerdState: join(c, 'state'),
    containerdConfig: join(c, 'config.toml'),
    containerdSocket: join(c, 'containerd.sock'),
    registryHosts: join(c, 'certs.d'),
    cniConf: join(stateDir, 'cni', 'net.d'),
    cniIpam: join(stateDir, 'cni', 'ipam'),
    kubeletRoot: join(stateDir, 'kubelet'),
    kubeletConfig: join(stateDir, 'kubelet-config.json'),
    podLogs: join(stateDir, 'pod-logs'),
    kubeconfig: join(stateDir, 'kubeconfig'),
    nodeKubeconfig: join(stateDir, 'kubelet.kubeconfig'),
    clusterFile: join(stateDir, 'cluster.json'),
    sysctlsFile: join(stateDir, 'sysctls.json'),
  };
}

export interface ClusterPorts {
  etcd: number;
  etcdPeer: number;
  apiserver: number;
  kubelet: number;
}

export interface Binaries {
  /** the multi-call Kubernetes binary (scripts/ensure-k8s.sh) */
  kube: string;
  etcd: string;
  containerd: string;
}

const pki = (l: ClusterLayout, f: string) => join(l.pki, f);

/** containerd 1.6 (config version 2): its own root, state and socket; CRI pulls only through certs.d (BLOCKED_REGISTRIES). */
export function containerdConfig(l: ClusterLayout, pauseImage: string): string {
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  return `version = 2
root = ${JSON.stringify(l.containerdRoot)}
state = ${JSON.stringify(l.containerdState)}
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = ${JSON.stringify(l.containerdSocket)}

[${cri}]
  sandbox_image = ${JSON.stringify(pauseImage)}
  # containerd lowers its containers' oom_score_adj, which root here may not (no CAP_SYS_RESOURCE): runc fails without this
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[${cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[${cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[${cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[${cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = ${JSON.stringify(l.cniConf)}
  max_conf_num = 1

[${cri}.registry]
  config_path = ${JSON.stringify(l.registryHosts)}
`;
}

/** certs.d/<registry>/hosts.toml, the same for every registry: pulls go to a closed local port (containerd 1.6 wants `server` and a host entry). */
export function registryHostsToml(): string {
  return `server = ${JSON.stringify(CLOSED_REGISTRY)}

[host.${JSON.stringify(CLOSED_REGISTRY)}]
  capabilities = ["pull", "resolve"]
`;
}

/**
 * The pods' network: a macvlan interface in private mode on an address-less bridge, an address from
 * POD_SUBNET and no routes. Private macvlans never exchange frames with each other, and a macvlan never
 * reaches its parent: a pod reaches neither another pod, nor the host, nor anything beyond (sandboxes need
 * no network; Docker runs them with --network none). containerd's CRI wants an address on eth0, so the
 * loopback plugin alone would not do.
 */
export function cniConfig(l: ClusterLayout): string {
  return JSON.stringify(
    {
      cniVersion: '0.4.0',
      name: 'swerl-sandbox',
      plugins: [
        {
          type: 'macvlan',
          master: SANDBOX_BRIDGE,
          mode: 'private',
          ipam: { type: 'host-local', ranges: [[{ subnet: POD_SUBNET }]], dataDir: l.cniIpam },
        },
      ],
    },
    null,
    1,
  );
}

/** KubeletConfiguration (JSON is YAML): cgroupfs on cgroup v1, no image GC, eviction only near a full disk. */
export function kubeletConfig(l: ClusterLayout, ports: ClusterPorts): string {
  return JSON.stringify(
    {
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      address: '127.0.0.1',
      port: ports.kubelet,
      readOnlyPort: 0,
      healthzPort: 0,
      authentication: { anonymous: { enabled: false }, webhook: { enabled: false }, x509: { clientCAFile: pki(l, 'ca.crt') } },
      // only holders of a certificate of the cluster's CA (the API server) get past TLS
      authorization: { mode: 'AlwaysAllow' },
      containerRuntimeEndpoint: `unix://${l.containerdSocket}`,
      // containerd 1.6 lacks the CRI RuntimeConfig call: the kubelet takes the driver from here
      cgroupDriver: 'cgroupfs',
      failCgroupV1: false,
      failSwapOn: false,
      // the default -999 needs CAP_SYS_RESOURCE
      oomScoreAdj: 0,
      protectKernelDefaults: false,
      makeIPTablesUtilChains: false,
      hairpinMode: 'none',
      podLogsDir: l.podLogs,
      volumePluginDir: join(l.kubeletRoot, 'volume-plugins'),
      // loaded task images have no registry to come back from: never collect them
      imageGCHighThresholdPercent: 100,
      imageGCLowThresholdPercent: 99,
      evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'nodefs.inodesFree': '1%', 'imagefs.available': '1%', 'imagefs.inodesFree': '1%' },
      evictionPressureTransitionPeriod: '30s',
      // no per-pod field exists: the sandbox default applies to every pod (docs/kubernetes.md)
      podPidsLimit: DEFAULT_LIMITS.pids,
      serializeImagePulls: false,
      maxPods: 110,
      shutdownGracePeriod: '0s',
      registerNode: true,
    },
    null,
    1,
  );
}

export interface KubeconfigUser {
  name: string;
  certFile: string;
  keyFile: string;
}

/** A kubeconfig (JSON, which kubectl and @kubernetes/client-node both read) with the certificates inline. */
export function kubeconfigText(server: string, caPem: string, certPem: string, keyPem: string, user: string): string {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  return JSON.stringify(
    {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'swerl-local', cluster: { server, 'certificate-authority-data': b64(caPem) } }],
      users: [{ name: user, user: { 'client-certificate-data': b64(certPem), 'client-key-data': b64(keyPem) } }],
      contexts: [{ name: 'swerl-local', context: { cluster: 'swerl-local', user, namespace: SANDBOX_NAMESPACE } }],
      'current-context': 'swerl-local',
      preferences: {},
    },
    null,
    1,
  );
}

/** The command line of a component (argv[0] is the executable). Every one names the state directory, which is how `status` tells ours apart. */
export function componentCommand(c: Component, l: ClusterLayout, ports: ClusterPorts, bin: Binaries): string[] {
  const peer = `http://127.0.0.1:${ports.etcdPeer}`;
  const client = `http://127.0.0.1:${ports.etcd}`;
  switch (c) {
    case 'etcd':
      return [
        bin.etcd,
        '--name=swerl',
        `--data-dir=${l.etcdData}`,
        `--listen-client-urls=${client}`,
        `--advertise-client-urls=${client}`,
        `--listen-peer-urls=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
        `--initial-cluster=swerl=${peer}`,
        '--initial-cluster-state=new',
        '--logger=zap',
        '--log-level=warn',
      ];
    case 'containerd':
      return [bin.containerd, `--config=${l.containerdConfig}`, '--log-level=warn'];
    case 'kube-apiserver':
      return [
        bin.kube,
        'kube-apiserver',
        `--etcd-servers=${client}`,
        '--bind-address=127.0.0.1',
        `--secure-port=${ports.apiserver}`,
        `--cert-dir=${join(l.stateDir, 'apiserver')}`,
        `--tls-cert-file=${pki(l, 'apiserver.crt')}`,
        `--tls-private-key-file=${pki(l, 'apiserver.key')}`,
        `--client-ca-file=${pki(l, 'ca.crt')}`,
        '--anonymous-auth=false',
        '--authorization-mode=Node,RBAC',
        '--enable-admission-plugins=NodeRestriction',
        `--service-cluster-ip-range=${SERVICE_SUBNET}`,
        '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
        `--service-account-key-file=${pki(l, 'sa.pub')}`,
        `--service-account-signing-key-file=${pki(l, 'sa.key')}`,
        `--kubelet-client-certificate=${pki(l, 'admin.crt')}`,
        `--kubelet-client-key=${pki(l, 'admin.key')}`,
        // exec and logs go to the node by name (localhost → 127.0.0.1, where the kubelet listens)
        '--kubelet-preferred-address-types=Hostname,InternalIP',
        '--allow-privileged=false',
        '--profiling=false',
        '--v=1',
      ];
    case 'kube-controller-manager':
      return [
        bin.kube,
        'kube-controller-manager',
        `--kubeconfig=${l.kubeconfig}`,
        '--leader-elect=false',
        '--secure-port=0',
        `--service-account-private-key-file=${pki(l, 'sa.key')}`,
        `--root-ca-file=${pki(l, 'ca.crt')}`,
        '--use-service-account-credentials=false',
        `--cluster-name=swerl-${ports.apiserver}`,
        '--profiling=false',
        '--v=1',
      ];
    case 'kube-scheduler':
      return [bin.kube, 'kube-scheduler', `--kubeconfig=${l.kubeconfig}`, '--leader-elect=false', '--secure-port=0', '--profiling=false', '--v=1'];
    case 'kubelet':
      return [
        bin.kube,
        'kubelet',
        `--config=${l.kubeletConfig}`,
        `--kubeconfig=${l.nodeKubeconfig}`,
        `--root-dir=${l.kubeletRoot}`,
        `--cert-dir=${join(l.kubeletRoot, 'pki')}`,
        `--hostname-override=${NODE_NAME}`,
        '--v=1',
      ];
  }
}
