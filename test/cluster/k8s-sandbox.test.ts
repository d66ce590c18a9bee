// The Kubernetes backend in pods of swerl's local cluster (started like `swerl cluster up`): exec and files, a
// missing image, memory/CPU/pids limits, ephemeral-storage eviction with the agent told, and network isolation
// between pods and from the host. Without a cluster: test/unit/k8s-pod-spec.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer, connect, type AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { K8sBackend, type K8sSandbox } from '../../activities/sandbox/k8s.ts';
import { DEFAULT_LIMITS, SandboxUnavailableError, type SandboxLimits } from '../../lib/sandbox.ts';
import { SweTools } from '../../lib/swe/tools.ts';
import { SERVICE_IP } from '../../services/k8s-cluster-config.ts';
import { kubeConfigOf } from '../../services/k8s-cluster.ts';
import { imagesFor, requireDocker } from '../helpers/docker.ts';
import { sweTask, TASK } from '../helpers/swe-tasks.ts';
import { useK8sCluster, type TestCluster } from '../helpers/k8s.ts';

describe('against the local cluster (swerl cluster up)', () => {
  let cluster: TestCluster;
  let image: string;
  let backend: K8sBackend;
  const started: K8sSandbox[] = [];
  /** small requests: allocatable is 2 CPUs and several pods run at once */
  const start = async (limits: Partial<SandboxLimits> = {}, img = image) => {
    const sb = await backend.start(img, { cpus: 1, memoryBytes: 512 << 20, ...limits });
    started.push(sb);
    return sb;
  };
  useK8sCluster((c) => (cluster = c), {
    images: async () => {
      await requireDocker();
      [image] = await imagesFor([await sweTask(TASK.srcLayout)]);
      return [image!];
    },
  });
  before(() => {
    backend = new K8sBackend({ namespace: cluster.testNamespace, requests: { cpu: '100m', memory: '64Mi' } });
  });
  after(async () => {
    await Promise.all(started.map((sb) => sb.stop()));
  });

  test('exec, timeouts and files in a pod of a task image', async () => {
    const sb = await start();
    const r = await sb.exec('pwd; git status --porcelain | wc -l; echo err >&2; exit 3', 30);
    assert.deepEqual([r.exit, r.stdout, r.stderr], [3, '/testbed\n0\n', 'err\n']);
    assert.equal((await sb.exec('echo "$PWD $FOO"', 10, { cwd: '/tmp', env: { FOO: 'bar baz' } })).stdout, '/tmp bar baz\n');
    const t0 = Date.now();
    const t = await sb.exec('sleep 1000', 2);
    assert.equal(t.timedOut, true);
    assert.ok(Date.now() - t0 < 15_000, `took ${Date.now() - t0} ms`);
    // a command that leaves a process behind returns when its own part ends
    const t1 = Date.now();
    assert.equal((await sb.exec('sleep 60 >/dev/null 2>&1 & echo started', 20)).stdout, 'started\n');
    assert.ok(Date.now() - t1 < 10_000, `took ${Date.now() - t1} ms`);
    const nowhere = await sb.exec('echo never', 10, { cwd: '/nope' });
    assert.equal(nowhere.exit, 1);
    assert.match(nowhere.stderr, /\/nope: No such file or directory/);
    await sb.writeFile('/tmp/ü.txt', 'héllo ✓\n');
    assert.equal(await sb.readFile('/tmp/ü.txt'), 'héllo ✓\n');
    await assert.rejects(sb.copyIn([{ path: '../x', content: 'x' }], '/tmp'), /refused/);
    const caps = await sb.exec("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status", 10);
    assert.match(caps.stdout, /CapEff:\s+0000000000000000/);
    assert.match(caps.stdout, /NoNewPrivs:\s+1/);
  });

  test('a missing image is a clear error naming it, infrastructure (retried, never scored); the pull never leaves the machine', async () => {
    const t0 = Date.now();
    const missing = 'swerl-no-such-image:nope';
    await assert.rejects(backend.start(missing), (e: unknown) => {
      assert.ok(e instanceof SandboxUnavailableError, `${(e as Error).name}: ${(e as Error).message}`);
      assert.match((e as Error).message, /image "swerl-no-such-image:nope" is not on the node and could not be pulled/);
      // containerd was sent to the closed local port, not to Docker Hub
      assert.match((e as Error).message, /127\.0\.0\.1:9/);
      return true;
    });
    console.log(`# missing image reported in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const lib = await import('@kubernetes/client-node');
    const core = (await kubeConfigOf()).makeApiClient(lib.CoreV1Api);
    const pods = await core.listNamespacedPod({ namespace: cluster.testNamespace });
    assert.deepEqual(
      pods.items.filter((p) => p.spec?.containers[0]?.image === missing && !p.metadata?.deletionTimestamp).map((p) => p.metadata?.name),
      [],
      'its pod was deleted',
    );
  });

  test('limits: memory (OOM-killed, reported), CPU (the quota holds), pids (the pod pids limit)', async () => {
    const sb = await start({ memoryBytes: 256 << 20, cpus: 0.5 });
    const oom = await sb.exec(`python3 -c "b = bytearray(1024 * 1024 * 1024); print('allocated')"`, 60);
    assert.equal(oom.exit, 137, JSON.stringify(oom));
    assert.equal(oom.oomKilled, true);
    assert.match(oom.stderr, /killed: out of memory \(limit 256 MiB\)/);
    assert.equal((await sb.exec('echo alive', 10)).stdout, 'alive\n');

    const quota = await sb.exec('cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us', 10);
    assert.equal(quota.stdout, '50000\n100000\n');
    // two busy loops for 3 s: without the quota they could take up to 6 CPU-seconds on 2 cores
    const burn = await sb.exec(
      "u() { cat /sys/fs/cgroup/cpuacct/cpuacct.usage; }; a=$(u); t0=$(date +%s%N); timeout 3 sh -c 'while :; do :; done' & timeout 3 sh -c 'while :; do :; done' & wait; b=$(u); t1=$(date +%s%N); echo $((b - a)) $((t1 - t0)); grep nr_throttled /sys/fs/cgroup/cpu/cpu.stat",
      30,
    );
    const [usedNs, wallNs] = burn.stdout.split('\n')[0]!.split(' ').map(Number);
    const used = usedNs! / 1e9;
    const wall = wallNs! / 1e9;
    console.log(`# 0.5 CPU limit: ${used.toFixed(2)} CPU-s in ${wall.toFixed(2)} s wall (${burn.stdout.split('\n')[1]})`);
    assert.ok(used <= 0.5 * wall * 1.2 + 0.1, `${used.toFixed(2)} CPU-s in ${wall.toFixed(2)} s is more than the 0.5 CPU limit allows`);

    const pids = await sb.exec(
      `python3 -c "
import subprocess
ps, err = [], None
try:
    for i in range(700):
        ps.append(subprocess.Popen(['sleep', '30']))
except OSError as e:
    err = e.errno
print(len(ps), err)
for p in ps:
    p.kill()
    p.wait()
"`,
      120,
    );
    const [n, errno] = pids.stdout.trim().split(' ');
    assert.ok(Number(n) < DEFAULT_LIMITS.pids, `${n} processes started: the pod pids limit is ${DEFAULT_LIMITS.pids}`);
    assert.equal(errno, '11', 'EAGAIN from fork');
    assert.equal((await sb.exec('echo alive', 10)).stdout, 'alive\n');
  });

  test('ephemeral storage: a writer past diskMiB is evicted and the agent told (disk_limit, the agent’s doing)', async () => {
    const sb = await start({ diskMiB: 64 });
    const t0 = Date.now();
    const r = await new SweTools(sb).run({ name: 'execute_bash', args: { cmd: 'dd if=/dev/zero of=/testbed/big bs=1M count=200 status=none; sleep 80; echo never' } });
    console.log(`# evicted after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    assert.equal(r.end, 'error');
    assert.match(r.observation, /^ERROR: sandbox swerl-sbx-\S+ was evicted: .*ephemeral local storage/);
    assert.equal(r.info?.reason, 'disk_limit');
    assert.match(String(r.info?.error), /limit 64 MiB/);
  });

  test('network: a pod reaches no other pod, not the host, not the API server', async (t) => {
    const [a, b] = await Promise.all([start(), start()]);
    const lib = await import('@kubernetes/client-node');
    const core = (await kubeConfigOf()).makeApiClient(lib.CoreV1Api);
    const ipOf = async (sb: K8sSandbox) => (await core.readNamespacedPod({ name: sb.id, namespace: cluster.testNamespace })).status!.podIP!;
    const [ipA, ipB] = await Promise.all([ipOf(a), ipOf(b)]);
    assert.notEqual(ipA, ipB);
    await a.exec('setsid nohup python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1 < /dev/null & sleep 1.5', 20);
    // a listener of the host on every address, and the API server: the host itself reaches them
    const host = createServer((s) => s.end());
    await new Promise<void>((r) => host.listen(0, '0.0.0.0', () => r()));
    const hostPort = (host.address() as AddressInfo).port;
    const apiPort = Number(new URL(cluster.server).port);
    // every IPv4 address of the host but loopback (an interface that is down too: its address is the host's)
    const { stdout: addrs } = await run('ip', ['-o', '-4', 'addr', 'show']);
    const hostIps = [...addrs.matchAll(/\binet (\d+\.\d+\.\d+\.\d+)\//g)].map((m) => m[1]!).filter((ip) => !ip.startsWith('127.'));
    assert.ok(hostIps.length > 0);
    try {
      for (const ip of hostIps) {
        await new Promise<void>((res, rej) => {
          const s = connect(hostPort, ip, () => (s.end(), res()));
          s.once('error', rej);
        });
      }
      await b.writeFile('/tmp/probe.py', PROBE);
      await a.writeFile('/tmp/probe.py', PROBE);
      const targets = [`${ipA}:8000`, ...hostIps.flatMap((ip) => [`${ip}:${hostPort}`, `${ip}:${apiPort}`]), `${SERVICE_IP}:443`, `127.0.0.1:${apiPort}`];
      const fromB = (await b.exec(`python3 /tmp/probe.py ${targets.join(' ')}`, 120)).stdout.trim().split('\n');
      const fromA = (await a.exec(`python3 /tmp/probe.py ${ipA}:8000`, 30)).stdout.trim();
      assert.equal(fromA, `${ipA}:8000 open`, 'the listener answers inside its own pod');
      for (const line of fromB) assert.match(line, / blocked /, `from pod ${ipB}: ${line}`);
      assert.equal(fromB.length, targets.length);
      const routes = await b.exec('cat /proc/net/route; ls /sys/class/net', 10);
      assert.doesNotMatch(routes.stdout, /^\S+\s+00000000\s/m, 'no default route');
      assert.deepEqual(routes.stdout.trim().split('\n').slice(-2).sort(), ['eth0', 'lo']);
      t.diagnostic(`from pod ${ipB}: ${fromB.join('; ')}`);
      t.diagnostic(
        'NetworkPolicy is NOT enforced on this cluster (no policy engine runs on this kernel): the isolation above is the CNI (private macvlan, no routes). ' +
          'On your own cluster isolation is the deny-all NetworkPolicy, enforced only if your CNI enforces policies (docs/kubernetes.md).',
      );
    } finally {
      host.close();
    }
  });
});

const run = promisify(execFile);

/** Connects to each HOST:PORT argument (3 s each): prints `HOST:PORT open`, or `HOST:PORT blocked <why>`. */
const PROBE = `import socket, sys
for t in sys.argv[1:]:
    h, p = t.rsplit(':', 1)
    try:
        socket.create_connection((h, int(p)), timeout=3).close()
        print(t, 'open')
    except OSError as e:
        print(t, 'blocked', type(e).__name__, e.errno)
`;
