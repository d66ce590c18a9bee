// Kubernetes backend without a cluster: pod spec, retry classification, exec stream/status handling.
// Against swerl's local cluster: test/cluster/k8s-sandbox.test.ts.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Writable } from 'node:stream';
import type { V1Status } from '@kubernetes/client-node';
import { spawn } from 'node:child_process';
import { OWNER_LABELS, ownerLabels } from '../../activities/sandbox/common.ts';
import { processStartTicks } from '../../lib/process-identity.ts';
import { SweTools } from '../../lib/swe/tools.ts';
import { SandboxDeadError } from '../../lib/sandbox.ts';
import {
  K8sSandbox,
  buildPodSpec,
  sweepPods,
  type PodSweepApi,
  classifyK8sError,
  denyAllNetworkPolicy,
  labelValue,
  parseExecStatus,
  requestsFromEnv,
  runOverTransport,
  toExecResult,
  withRetries,
  type ExecTransport,
} from '../../activities/sandbox/k8s.ts';

describe('pod spec', () => {
  const pod = buildPodSpec({
    name: 'swerl-sbx-abc',
    namespace: 'swerl',
    image: 'swerl-task-x:1',
    limits: { cpus: 2, memoryBytes: 4 * 2 ** 30 },
    labels: { 'swerl.task': 'Some/Task id!' },
  });
  const c = pod.spec!.containers[0]!;
  test('isolation: no token, no host namespaces, no volumes, never restarted', () => {
    assert.equal(pod.spec!.automountServiceAccountToken, false);
    assert.equal(pod.spec!.hostNetwork, false);
    assert.equal(pod.spec!.hostPID, false);
    assert.equal(pod.spec!.restartPolicy, 'Never');
    assert.deepEqual(pod.spec!.volumes, []);
    assert.equal(c.volumeMounts, undefined);
    assert.equal(c.securityContext!.allowPrivilegeEscalation, false);
    assert.equal(c.securityContext!.privileged, false);
    assert.deepEqual(c.securityContext!.capabilities!.drop, ['ALL']);
    assert.equal(pod.spec!.terminationGracePeriodSeconds, 0);
  });
  test('requests 1 CPU / 1 GiB by default, limits from the sandbox limits; ephemeral storage limited to diskMiB', () => {
    assert.deepEqual(c.resources!.requests, { cpu: '1000m', memory: String(1 << 30), 'ephemeral-storage': '256Mi' });
    assert.deepEqual(c.resources!.limits, { cpu: '2000m', memory: String(4 * 2 ** 30), 'ephemeral-storage': '2048Mi' });
    const small = buildPodSpec({ name: 'a', namespace: 'n', image: 'i', limits: { cpus: 0.5, memoryBytes: 256 << 20, diskMiB: 100 } });
    assert.deepEqual(small.spec!.containers[0]!.resources!.requests, { cpu: '500m', memory: String(256 << 20), 'ephemeral-storage': '100Mi' });
    assert.equal(small.spec!.containers[0]!.resources!.limits!['ephemeral-storage'], '100Mi');
    const unlimited = buildPodSpec({ name: 'a', namespace: 'n', image: 'i', limits: { diskMiB: 0 } });
    assert.equal(unlimited.spec!.containers[0]!.resources!.limits!['ephemeral-storage'], undefined);
  });
  test('labels: sandbox label set, values made valid', () => {
    assert.equal(pod.metadata!.labels!['swerl.sandbox'], '1');
    assert.equal(pod.metadata!.labels!['swerl.task'], 'Some_Task_id');
    assert.equal(labelValue('x'.repeat(80)).length, 63);
  });
  test('bad names and limits are refused with the value', () => {
    assert.throws(() => buildPodSpec({ name: 'Bad_Name', namespace: 'n', image: 'i' }), /Bad_Name/);
    assert.throws(() => buildPodSpec({ name: 'ok', namespace: 'n', image: 'i', limits: { cpus: 0 } }), /cpus must be > 0, got 0/);
  });
  test('requests from SWERL_K8S_CPU_REQUEST / SWERL_K8S_MEMORY_REQUEST; a bad value names the variable and the value', () => {
    assert.equal(requestsFromEnv({}), undefined);
    assert.deepEqual(requestsFromEnv({ SWERL_K8S_CPU_REQUEST: '250m' }), { cpu: '250m', memory: '1Gi' });
    assert.deepEqual(requestsFromEnv({ SWERL_K8S_CPU_REQUEST: '0.1', SWERL_K8S_MEMORY_REQUEST: '128Mi' }), { cpu: '0.1', memory: '128Mi' });
    assert.throws(() => requestsFromEnv({ SWERL_K8S_MEMORY_REQUEST: 'lots' }), /SWERL_K8S_MEMORY_REQUEST: memory quantity "lots" not understood/);
    const spec = buildPodSpec({ name: 'a', namespace: 'n', image: 'i', requests: requestsFromEnv({ SWERL_K8S_CPU_REQUEST: '100m', SWERL_K8S_MEMORY_REQUEST: '128Mi' })! });
    assert.deepEqual(spec.spec!.containers[0]!.resources!.requests, { cpu: '100m', memory: String(128 << 20), 'ephemeral-storage': '256Mi' });
  });
  test('deny-all NetworkPolicy selects sandbox pods, both directions', () => {
    const np = denyAllNetworkPolicy('swerl');
    assert.deepEqual(np.spec?.podSelector?.matchLabels, { 'swerl.sandbox': '1' });
    assert.deepEqual(np.spec!.policyTypes, ['Ingress', 'Egress']);
    assert.deepEqual(np.spec!.egress, []);
  });
});

describe('sweep by label', () => {
  test('pods of dead owners on this host and expired pods are deleted; live owners, other hosts and unexpired pods stay', async () => {
    // a process that has exited: its pid is (for now) not running
    const gone = spawn(process.execPath, ['-e', '']);
    await new Promise((r) => gone.once('exit', r));
    const me = ownerLabels();
    const now = Date.now();
    const future = String(Math.ceil(now / 1000) + 3600);
    const pods: { name: string; labels: Record<string, string>; created?: Date }[] = [
      { name: 'mine-alive', labels: { ...me, [OWNER_LABELS.expires]: future } },
      { name: 'mine-dead', labels: { ...me, [OWNER_LABELS.pid]: String(gone.pid), [OWNER_LABELS.pidStart]: '1', [OWNER_LABELS.expires]: future } },
      { name: 'pid-reused', labels: { ...me, [OWNER_LABELS.pidStart]: String(Number(processStartTicks(process.pid)) + 1), [OWNER_LABELS.expires]: future } },
      { name: 'other-host', labels: { ...me, [OWNER_LABELS.host]: 'elsewhere', [OWNER_LABELS.pid]: String(gone.pid), [OWNER_LABELS.expires]: future } },
      { name: 'other-host-expired', labels: { ...me, [OWNER_LABELS.host]: 'elsewhere', [OWNER_LABELS.expires]: String(Math.floor(now / 1000) - 1) } },
      { name: 'no-expiry-old', labels: { [OWNER_LABELS.host]: 'elsewhere' }, created: new Date(now - 4 * 3600_000) },
      { name: 'no-expiry-new', labels: { [OWNER_LABELS.host]: 'elsewhere' }, created: new Date(now - 60_000) },
    ];
    const deleted: string[] = [];
    const api: PodSweepApi = {
      listNamespacedPod: async ({ labelSelector }) => {
        assert.equal(labelSelector, 'swerl.sandbox=1');
        return { items: pods.map((p) => ({ metadata: { name: p.name, labels: p.labels, creationTimestamp: p.created ?? new Date(now) } })) };
      },
      deleteNamespacedPod: async ({ name }) => {
        deleted.push(name);
      },
    };
    const r = await sweepPods(api, 'swerl', { now });
    assert.deepEqual(r.deadOwner.sort(), ['mine-dead', 'pid-reused']);
    assert.deepEqual(r.expired.sort(), ['no-expiry-old', 'other-host-expired']);
    assert.deepEqual(deleted.sort(), ['mine-dead', 'no-expiry-old', 'other-host-expired', 'pid-reused']);
  });
});

describe('a sandbox pod under faults (fake API)', () => {
  /** A K8sSandbox over a fake API: every command exits 137 (killed), the pod reads as `pod`, deletions fail while `down`. */
  function fakePodSandbox(pod: () => unknown, state: { down: boolean; deleted: string[] }): K8sSandbox {
    const core = {
      readNamespacedPod: async () => pod(),
      deleteNamespacedPod: async ({ name }: { name: string }) => {
        if (state.down) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
        state.deleted.push(name);
      },
    };
    const exec = {
      exec: async (_ns: string, _pod: string, _c: string, _cmd: string[], _o: Writable, _e: Writable, _i: unknown, _tty: boolean, onStatus: (s: V1Status) => void) => {
        setImmediate(() => onStatus({ status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '137' }] } } as V1Status));
        return { close() {} };
      },
    };
    return new K8sSandbox(core as never, exec as never, 'swerl', 'swerl-sbx-fake', { cpus: 1, memoryBytes: 1 << 30, pids: 512, diskMiB: 64 }, { attempts: 2, baseMs: 1, maxMs: 1 });
  }

  test('evicted for ephemeral storage: the agent’s doing, the episode ends with error and says why; a pod gone otherwise is infrastructure', async () => {
    const state = { down: false, deleted: [] as string[] };
    const message = 'Pod ephemeral local storage usage exceeds the total limit of containers 64Mi.';
    const evicted = fakePodSandbox(() => ({ status: { phase: 'Failed', reason: 'Evicted', message } }), state);
    const r = await new SweTools(evicted).run({ name: 'execute_bash', args: { cmd: 'dd if=/dev/zero of=/testbed/big bs=1M count=1024' } });
    assert.equal(r.end, 'error');
    assert.match(r.observation, /^ERROR: sandbox swerl-sbx-fake was evicted: Pod ephemeral local storage usage exceeds/);
    assert.equal(r.info?.reason, 'disk_limit');
    assert.match(String(r.info?.error), /limit 64 MiB/);
    const deleted = fakePodSandbox(() => Promise.reject(Object.assign(new Error('not found'), { code: 404 })), state);
    await assert.rejects(new SweTools(deleted).run({ name: 'execute_bash', args: { cmd: 'sleep 6' } }), SandboxDeadError);
  });

  test('a deletion that fails while the API is down is done by the next sweep', async () => {
    const state = { down: true, deleted: [] as string[] };
    const sb = fakePodSandbox(() => ({ status: { phase: 'Running' } }), state);
    await sb.stop(); // retried, then left to the sweep; never the episode's failure
    assert.deepEqual(state.deleted, []);
    state.down = false;
    const api: PodSweepApi = {
      listNamespacedPod: async () => ({ items: [] }),
      deleteNamespacedPod: async ({ name }) => void state.deleted.push(name),
    };
    assert.deepEqual((await sweepPods(api, 'other-namespace')).retried, [], 'only its own namespace');
    const r = await sweepPods(api, 'swerl');
    assert.deepEqual(r.retried, ['swerl-sbx-fake']);
    assert.deepEqual(state.deleted, ['swerl-sbx-fake']);
    assert.deepEqual((await sweepPods(api, 'swerl')).retried, [], 'once');
  });
});

describe('retries', () => {
  test('classification', () => {
    for (const code of [409, 429, 500, 503]) assert.equal(classifyK8sError({ code }), 'retry', String(code));
    for (const code of [400, 401, 403, 404, 422]) assert.equal(classifyK8sError({ code }), 'fatal', String(code));
    assert.equal(classifyK8sError({ code: 'ECONNRESET' }), 'retry');
    assert.equal(classifyK8sError({ cause: { code: 'ETIMEDOUT' } }), 'retry');
    assert.equal(classifyK8sError(new Error('bad')), 'fatal');
  });
  test('bounded backoff: retries transient errors, stops at fatal ones and at the bound', async () => {
    const sleeps: number[] = [];
    const sleep = async (ms: number) => void sleeps.push(ms);
    let n = 0;
    assert.equal(await withRetries('op', async () => (++n < 3 ? Promise.reject({ code: 429, message: 'slow down' }) : 'ok'), { sleep }), 'ok');
    assert.equal(n, 3);
    n = 0;
    await assert.rejects(
      withRetries('create pod', async () => (++n, Promise.reject({ code: 403, message: 'forbidden' })), { sleep }),
      /create pod failed \(HTTP 403\): forbidden/,
    );
    assert.equal(n, 1);
    n = 0;
    await assert.rejects(
      withRetries('op', async () => (++n, Promise.reject({ code: 503, message: 'down' })), { sleep, attempts: 4, maxMs: 100 }),
      /HTTP 503/,
    );
    assert.equal(n, 4);
    assert.ok(sleeps.every((s) => s <= 10_000));
  });
});

describe('exec status channel', () => {
  test('Success / NonZeroExitCode / other failures', () => {
    assert.deepEqual(parseExecStatus({ metadata: {}, status: 'Success' }), { exit: 0 });
    assert.deepEqual(
      parseExecStatus({
        metadata: {},
        status: 'Failure',
        message: 'command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3',
        reason: 'NonZeroExitCode',
        details: { causes: [{ reason: 'ExitCode', message: '3' }] },
      }),
      { exit: 3 },
    );
    const f = parseExecStatus({ metadata: {}, status: 'Failure', message: 'exec: "nope": executable file not found in $PATH', reason: 'InternalError' } as V1Status);
    assert.equal(f.exit, -1);
    assert.match(f.error!, /executable file not found/);
    assert.equal(parseExecStatus(undefined).exit, -1);
  });

  /** A fake transport delivering channel frames as the client's Exec does: 1 → stdout, 2 → stderr, 3 → status JSON. */
  function fakeTransport(frames: [number, string][], opts: { neverEnds?: boolean; seenStdin?: Buffer[] } = {}): ExecTransport {
    return async (_cmd, stdout: Writable, stderr: Writable, stdin, onStatus) => {
      const closers: (() => void)[] = [];
      if (stdin) stdin.on('data', (b: Buffer) => opts.seenStdin?.push(b));
      setImmediate(() => {
        for (const [ch, text] of frames) {
          if (ch === 1) stdout.write(Buffer.from(text));
          else if (ch === 2) stderr.write(Buffer.from(text));
          else if (ch === 3) onStatus(JSON.parse(text) as V1Status);
        }
        if (!opts.neverEnds) closers.forEach((c) => c());
      });
      return { close() {}, on: (_e: 'close', cb: () => void) => void closers.push(cb) };
    };
  }

  test('stdout/stderr split, exit code from the status channel', async () => {
    const t = fakeTransport([
      [1, 'out 1\n'],
      [2, 'err ✓\n'],
      [1, 'out 2\n'],
      [3, JSON.stringify({ metadata: {}, status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '2' }] } })],
    ]);
    const r = await runOverTransport(t, ['x'], 5);
    assert.equal(r.exit, 2);
    assert.equal(r.stdout.text(), 'out 1\nout 2\n');
    assert.equal(r.stderr.text(), 'err ✓\n');
    assert.deepEqual(toExecResult(r, 10, 0.1), { exit: 2, stdout: 'out 1\nout 2\n', stderr: 'err ✓\n', timedOut: false, truncated: false });
  });

  test('exit 124 from the timeout wrapper → timedOut; output cap marks truncated', async () => {
    const t = fakeTransport([
      [1, 'x'.repeat(100)],
      [3, JSON.stringify({ metadata: {}, status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '124' }] } })],
    ]);
    const r = toExecResult(await runOverTransport(t, ['x'], 5, { maxOutputBytes: 10 }), 2, 2.1);
    assert.equal(r.timedOut, true);
    assert.equal(r.stdout, 'x'.repeat(10));
    assert.equal(r.truncated, true);
  });

  test('a stream that never answers ends at the host limit as timed out', async () => {
    const r = await runOverTransport(fakeTransport([[1, 'partial']], { neverEnds: true }), ['x'], 0.2);
    assert.equal(r.hostTimedOut, true);
    assert.equal(toExecResult(r, 0.1, 0.2).timedOut, true);
  });

  test('closed without a status → exit -1 with a reason', async () => {
    const r = await runOverTransport(fakeTransport([[1, 'hi']]), ['x'], 5);
    assert.equal(r.exit, -1);
    assert.match(toExecResult(r, 5, 0.1).stderr, /no status/);
  });

  test('stdin (tar copy) reaches the transport', async () => {
    const seen: Buffer[] = [];
    await runOverTransport(fakeTransport([[3, '{"status":"Success"}']], { seenStdin: seen }), ['tar'], 5, { stdin: Buffer.from('TARDATA') });
    await new Promise((r) => setImmediate(r));
    assert.equal(Buffer.concat(seen).toString(), 'TARDATA');
  });
});
