// Kubernetes sandbox backend (DESIGN §3, §7): one pod per sandbox, exec over the API (websocket
// channels: 1 stdout, 2 stderr, 3 status JSON), files through `tar` over exec. Network isolation is the
// cluster's: swerl's local cluster gives pods a private macvlan with no routes (services/k8s-cluster-config.ts);
// on another cluster the deny-all NetworkPolicy (`denyAllNetworkPolicy`), if its CNI enforces it (docs/kubernetes.md).
import type * as k8s from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import { Readable, type Writable } from 'node:stream';
import { DEFAULT_LIMITS, type ExecOptions, type ExecResult, type Sandbox, type SandboxBackend, type SandboxLimits } from '../../lib/sandbox.ts';
import {
  CappedSink,
  DEFAULT_MAX_OUTPUT,
  DEFAULT_SANDBOX_LIFETIME_S,
  OWNER_LABELS,
  SANDBOX_LABEL,
  SandboxDeadError,
  TESTBED,
  buildTar,
  checkDestDir,
  checkEntryName,
  computePatch,
  expiresLabel,
  omittedOf,
  ownerLabels,
  sandboxPath,
  sweepReason,
  type TarFile,
} from './common.ts';
import { DEFAULT_MAX_PATCH_BYTES, SandboxDiskLimitError, SandboxUnavailableError } from '../../lib/sandbox.ts';
import { shq } from '../../lib/shell.ts';

export const CONTAINER_NAME = 'sandbox';
const KILL_AFTER_S = 2;
const HOST_GRACE_S = 30;

export interface K8sBackendOptions {
  kubeConfig?: k8s.KubeConfig;
  namespace?: string;
  /** scheduling requests; DESIGN §3: 1 CPU / 1 GiB */
  requests?: { cpu: string; memory: string };
  imagePullPolicy?: 'Always' | 'IfNotPresent' | 'Never';
  runtimeClassName?: string;
  nodeSelector?: Record<string, string>;
  startTimeoutS?: number;
  retry?: RetryOptions;
}

// ---------------------------------------------------------------------------------------------
// Pod spec (pure)

/** Label values: ≤ 63 chars of [A-Za-z0-9_.-], alphanumeric at both ends. Labels are metadata, so they are trimmed to fit. */
export function labelValue(v: string): string {
  return v
    .replace(/[^A-Za-z0-9_.-]/g, '_')
    .slice(0, 63)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
}

export interface PodSpecInput {
  name: string;
  namespace: string;
  image: string;
  limits?: Partial<SandboxLimits>;
  labels?: Record<string, string>;
  requests?: { cpu: string; memory: string };
  imagePullPolicy?: 'Always' | 'IfNotPresent' | 'Never';
  runtimeClassName?: string;
  nodeSelector?: Record<string, string>;
}

/**
 * Requests default to 1 CPU / 1 GiB, capped at the limits. Kubernetes has no per-pod pids field:
 * the pids limit is the kubelet's `podPidsLimit` (documented in docs/kubernetes.md).
 */
export function buildPodSpec(input: PodSpecInput): k8s.V1Pod {
  const l: SandboxLimits = { ...DEFAULT_LIMITS, ...input.limits };
  if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(input.name)) throw new Error(`pod name ${JSON.stringify(input.name)} is not a DNS-1123 label`);
  if (!(l.cpus > 0)) throw new Error(`limits.cpus must be > 0, got ${l.cpus}`);
  if (!(l.memoryBytes > 0)) throw new Error(`limits.memoryBytes must be > 0, got ${l.memoryBytes}`);
  const limCpuMilli = Math.round(l.cpus * 1000);
  const req = input.requests ?? { cpu: '1', memory: '1Gi' };
  const reqCpuMilli = Math.min(parseCpu(req.cpu), limCpuMilli);
  const reqMem = Math.min(parseMemory(req.memory), l.memoryBytes);
  const labels: Record<string, string> = { 'app.kubernetes.io/managed-by': 'swerl', [SANDBOX_LABEL]: '1' };
  for (const [k, v] of Object.entries(input.labels ?? {})) labels[k] = labelValue(v);
  // the kubelet evicts a pod that writes past its ephemeral-storage limit; the request stays small so
  // scheduling is not held to the limit (512 pods × 2 GiB)
  const disk = l.diskMiB > 0 ? { limit: `${l.diskMiB}Mi`, request: `${Math.min(l.diskMiB, 256)}Mi` } : null;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: input.name, namespace: input.namespace, labels },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      hostNetwork: false,
      hostPID: false,
      hostIPC: false,
      terminationGracePeriodSeconds: 0,
      // no cluster DNS either: the NetworkPolicy denies egress, and this keeps names from resolving
      dnsPolicy: 'None',
      dnsConfig: { nameservers: ['127.0.0.1'] },
      ...(input.runtimeClassName ? { runtimeClassName: input.runtimeClassName } : {}),
      ...(input.nodeSelector ? { nodeSelector: input.nodeSelector } : {}),
      securityContext: { seccompProfile: { type: 'RuntimeDefault' } },
      volumes: [],
      containers: [
        {
          name: CONTAINER_NAME,
          image: input.image,
          imagePullPolicy: input.imagePullPolicy ?? 'IfNotPresent',
          command: ['sleep', 'infinity'],
          workingDir: TESTBED,
          stdin: false,
          tty: false,
          resources: {
            requests: { cpu: `${reqCpuMilli}m`, memory: String(reqMem), ...(disk ? { 'ephemeral-storage': disk.request } : {}) },
            limits: { cpu: `${limCpuMilli}m`, memory: String(l.memoryBytes), ...(disk ? { 'ephemeral-storage': disk.limit } : {}) },
          },
          // task images run as root (the repository is root's); escalation and capabilities are off
          securityContext: {
            allowPrivilegeEscalation: false,
            privileged: false,
            runAsNonRoot: false,
            readOnlyRootFilesystem: false,
            capabilities: { drop: ['ALL'] },
          },
        },
      ],
    },
  };
}

/** Egress and ingress denied for every sandbox pod in the namespace (apply once per namespace). */
export function denyAllNetworkPolicy(namespace: string): k8s.V1NetworkPolicy {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: 'swerl-sandbox-deny-all', namespace },
    spec: {
      podSelector: { matchLabels: { [SANDBOX_LABEL]: '1' } },
      policyTypes: ['Ingress', 'Egress'],
      ingress: [],
      egress: [],
    },
  };
}

export function parseCpu(q: string): number {
  const m = /^(\d+(?:\.\d+)?)(m?)$/.exec(q.trim());
  if (!m) throw new Error(`cpu quantity ${JSON.stringify(q)} not understood (e.g. "1", "500m")`);
  return m[2] ? Number(m[1]) : Math.round(Number(m[1]) * 1000);
}

export function parseMemory(q: string): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(q.trim());
  if (!m) throw new Error(`memory quantity ${JSON.stringify(q)} not understood (e.g. "1Gi", "512Mi")`);
  const mult: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  return Math.round(Number(m[1]) * (m[2] ? mult[m[2]]! : 1));
}

// ---------------------------------------------------------------------------------------------
// Retries

export type RetryClass = 'retry' | 'fatal';

const TRANSIENT_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN', 'ENOTFOUND', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT']);

/** 409 (conflict / name taken), 429 (throttled), 5xx and connection errors are retried; other 4xx are not. */
export function classifyK8sError(e: unknown): RetryClass {
  const err = e as { code?: unknown; statusCode?: unknown; cause?: { code?: unknown } };
  const status = typeof err?.code === 'number' ? err.code : typeof err?.statusCode === 'number' ? err.statusCode : undefined;
  if (status !== undefined) return status === 409 || status === 429 || status >= 500 ? 'retry' : 'fatal';
  const code = typeof err?.code === 'string' ? err.code : typeof err?.cause?.code === 'string' ? err.cause.code : undefined;
  if (code && TRANSIENT_CODES.has(code)) return 'retry';
  return 'fatal';
}

export interface RetryOptions {
  attempts?: number;
  baseMs?: number;
  maxMs?: number;
  sleep?: (ms: number) => Promise<void>;
}

/** Bounded exponential backoff with full jitter. */
export async function withRetries<T>(what: string, fn: (attempt: number) => Promise<T>, o: RetryOptions = {}): Promise<T> {
  const attempts = o.attempts ?? 6;
  const sleep = o.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
  let last: unknown;
  for (let a = 1; a <= attempts; a++) {
    try {
      return await fn(a);
    } catch (e) {
      last = e;
      if (classifyK8sError(e) === 'fatal' || a === attempts) break;
      const cap = Math.min(o.maxMs ?? 10_000, (o.baseMs ?? 200) * 2 ** (a - 1));
      await sleep(Math.random() * cap);
    }
  }
  const err = last as { code?: unknown; message?: string; body?: unknown };
  // whatever the API says (down, throttled, forbidden), it is not the agent's doing
  throw new SandboxUnavailableError(`${what} failed${typeof err?.code === 'number' ? ` (HTTP ${err.code})` : ''}: ${err?.message ?? String(last)}`);
}

// ---------------------------------------------------------------------------------------------
// Exec status channel

/**
 * The status channel's V1Status: `{status:'Success'}` → 0; `{status:'Failure', reason:'NonZeroExitCode',
 * details:{causes:[{reason:'ExitCode', message:'2'}]}}` → 2; any other Failure (command not found,
 * container gone) → exit -1 with the message.
 */
export function parseExecStatus(s: k8s.V1Status | undefined | null): { exit: number; error?: string } {
  if (!s) return { exit: -1, error: 'no status from the exec channel' };
  if (s.status === 'Success') return { exit: 0 };
  if (s.reason === 'NonZeroExitCode') {
    const c = s.details?.causes?.find((x) => x.reason === 'ExitCode');
    const n = Number(c?.message);
    if (Number.isInteger(n)) return { exit: n };
  }
  return { exit: -1, error: s.message ?? s.reason ?? 'exec failed' };
}

/** The transport: the client's Exec.exec, or a fake in tests. Resolves with something closable. */
export type ExecTransport = (
  command: string[],
  stdout: Writable,
  stderr: Writable,
  stdin: Readable | null,
  onStatus: (s: k8s.V1Status) => void,
) => Promise<{ close(): void; on?(ev: 'close', cb: () => void): void }>;

export interface RawExec {
  exit: number;
  error?: string;
  stdout: CappedSink;
  stderr: CappedSink;
  hostTimedOut: boolean;
}

/** Runs `command` over the transport; ends on the status message or socket close, or at `hostTimeoutS`. */
export async function runOverTransport(
  transport: ExecTransport,
  command: string[],
  hostTimeoutS: number,
  opts: { stdin?: Buffer; maxOutputBytes?: number; tailBytes?: number } = {},
): Promise<RawExec> {
  const stdout = new CappedSink(opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT, opts.tailBytes ?? 0);
  const stderr = new CappedSink(opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT, opts.tailBytes ?? 0);
  let status: k8s.V1Status | undefined;
  let hostTimedOut = false;
  let finish!: () => void;
  const done = new Promise<void>((r) => (finish = r));
  const timer = setTimeout(() => {
    hostTimedOut = true;
    finish();
  }, hostTimeoutS * 1000);
  const stdin = opts.stdin ? Readable.from([opts.stdin]) : null;
  const ws = await transport(command, stdout, stderr, stdin, (s) => {
    status = s;
    finish();
  });
  ws.on?.('close', () => finish());
  await done;
  clearTimeout(timer);
  try {
    ws.close();
  } catch {
    // already closed
  }
  const p = hostTimedOut && !status ? { exit: -1, error: 'no answer from the exec stream' } : parseExecStatus(status);
  return { ...p, stdout, stderr, hostTimedOut };
}

/** Assembles an ExecResult from the wrapped command's raw result (exit 124 / late 137 = timed out). */
export function toExecResult(r: RawExec, timeoutS: number, elapsedS: number): ExecResult {
  const timedOut = r.hostTimedOut || r.exit === 124 || (r.exit === 137 && elapsedS >= timeoutS);
  let stderr = r.stderr.text();
  if (r.error && r.exit === -1 && !timedOut) stderr += `\n[sandbox] exec failed: ${r.error}\n`;
  if (timedOut) stderr += `\n[sandbox] timed out after ${timeoutS} s; process group killed\n`;
  const res: ExecResult = { exit: r.exit, stdout: r.stdout.text(), stderr, timedOut, truncated: r.stdout.truncated || r.stderr.truncated };
  const omitted = omittedOf(r.stdout, r.stderr);
  if (omitted) res.omitted = omitted;
  return res;
}

// ---------------------------------------------------------------------------------------------
// Backend

function podName(): string {
  return `swerl-sbx-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
}

export class K8sBackend implements SandboxBackend {
  readonly name = 'kubernetes' as const;
  readonly namespace: string;
  private kc?: k8s.KubeConfig;
  private lib?: typeof k8s;
  constructor(private readonly opts: K8sBackendOptions = {}) {
    this.namespace = opts.namespace ?? process.env.SWERL_K8S_NAMESPACE ?? 'swerl';
    this.kc = opts.kubeConfig;
    const requests = opts.requests ?? requestsFromEnv();
    if (requests) this.opts = { ...opts, requests };
  }

  private async client(): Promise<{ lib: typeof k8s; kc: k8s.KubeConfig; core: k8s.CoreV1Api }> {
    this.lib ??= await import('@kubernetes/client-node');
    if (!this.kc) {
      this.kc = new this.lib.KubeConfig();
      this.kc.loadFromDefault();
    }
    return { lib: this.lib, kc: this.kc, core: this.kc.makeApiClient(this.lib.CoreV1Api) };
  }

  async sweep(): Promise<{ removed: number; failed: number }> {
    const { core } = await this.client();
    const r = await sweepPods(core, this.namespace);
    return { removed: r.deadOwner.length + r.expired.length + r.retried.length, failed: r.failed.length };
  }

  async start(image: string, limits: Partial<SandboxLimits> = {}, labels: Record<string, string> = {}): Promise<K8sSandbox> {
    const { lib, kc, core } = await this.client();
    const ns = this.namespace;
    let name = '';
    const owned = { [OWNER_LABELS.expires]: expiresLabel(DEFAULT_SANDBOX_LIFETIME_S), ...labels, ...ownerLabels() };
    await withRetries(
      `creating a sandbox pod (image ${image}) in namespace ${ns}`,
      async () => {
        name = podName(); // a fresh name per attempt: a 409 means the name was taken
        const spec = buildPodSpec({ name, namespace: ns, image, limits, labels: owned, ...pick(this.opts) });
        await core.createNamespacedPod({ namespace: ns, body: spec });
      },
      this.opts.retry,
    );
    const sb = new K8sSandbox(core, new lib.Exec(kc), ns, name, { ...DEFAULT_LIMITS, ...limits }, this.opts.retry);
    try {
      await sb.waitRunning(this.opts.startTimeoutS ?? 300);
    } catch (e) {
      await sb.stop().catch(() => undefined);
      throw e;
    }
    return sb;
  }
}

/**
 * SWERL_K8S_CPU_REQUEST / SWERL_K8S_MEMORY_REQUEST (e.g. `250m`, `256Mi`): the scheduling requests of the
 * sandboxes a worker starts, where 1 CPU / 1 GiB each would hold back pods (a small node, tests).
 */
export function requestsFromEnv(env: NodeJS.ProcessEnv = process.env): { cpu: string; memory: string } | undefined {
  const cpu = env.SWERL_K8S_CPU_REQUEST;
  const memory = env.SWERL_K8S_MEMORY_REQUEST;
  if (cpu === undefined && memory === undefined) return undefined;
  if (cpu !== undefined) parseCpuNamed('SWERL_K8S_CPU_REQUEST', cpu);
  if (memory !== undefined) parseMemoryNamed('SWERL_K8S_MEMORY_REQUEST', memory);
  return { cpu: cpu ?? '1', memory: memory ?? '1Gi' };
}

function parseCpuNamed(name: string, v: string): number {
  try {
    return parseCpu(v);
  } catch (e) {
    throw new Error(`${name}: ${(e as Error).message}`);
  }
}

function parseMemoryNamed(name: string, v: string): number {
  try {
    return parseMemory(v);
  } catch (e) {
    throw new Error(`${name}: ${(e as Error).message}`);
  }
}

function pick(o: K8sBackendOptions): Partial<PodSpecInput> {
  const r: Partial<PodSpecInput> = {};
  if (o.requests) r.requests = o.requests;
  if (o.imagePullPolicy) r.imagePullPolicy = o.imagePullPolicy;
  if (o.runtimeClassName) r.runtimeClassName = o.runtimeClassName;
  if (o.nodeSelector) r.nodeSelector = o.nodeSelector;
  return r;
}

/** A command's result; `oomKilled` when the kernel killed a process of it for the pod's memory limit. */
export interface K8sExecResult extends ExecResult {
  oomKilled?: boolean;
}

export class K8sSandbox implements Sandbox {
  private stopped = false;
  private oomKills = 0;
  readonly transport: ExecTransport;
  constructor(
    private readonly core: k8s.CoreV1Api,
    exec: k8s.Exec,
    readonly namespace: string,
    readonly id: string,
    readonly limits: SandboxLimits,
    private readonly retry?: RetryOptions,
  ) {
    this.transport = (command, stdout, stderr, stdin, onStatus) => exec.exec(namespace, id, CONTAINER_NAME, command, stdout, stderr, stdin, false, onStatus);
  }

  /** Polls the pod until Running; a pod that fails, or an image that cannot be pulled, is a clear error. */
  async waitRunning(timeoutS: number): Promise<void> {
    const until = Date.now() + timeoutS * 1000;
    for (;;) {
      const pod = await withRetries(`reading pod ${this.id}`, () => this.core.readNamespacedPod({ name: this.id, namespace: this.namespace }), this.retry);
      const phase = pod.status?.phase;
      if (phase === 'Running') return;
      const waiting = pod.status?.containerStatuses?.[0]?.state?.waiting;
      if (waiting && /ErrImagePull|ImagePullBackOff|InvalidImageName|ErrImageNeverPull/.test(waiting.reason ?? '')) {
        // infrastructure (retried, never scored): the image belongs on the node or in a registry it reaches
        const image = pod.spec?.containers?.[0]?.image ?? '?';
        throw new SandboxUnavailableError(
          `pod ${this.id}: image ${JSON.stringify(image)} is not on the node and could not be pulled (${waiting.reason}: ${waiting.message ?? ''}); ` +
            "load it (swerl cluster load, on swerl's local cluster) or push it to a registry the nodes pull from",
        );
      }
      if (waiting && /CreateContainerConfigError|CreateContainerError/.test(waiting.reason ?? '')) {
        throw new SandboxUnavailableError(`pod ${this.id}: ${waiting.reason}: ${waiting.message ?? ''}`);
      }
      if (phase === 'Failed' || phase === 'Succeeded') throw new SandboxDeadError(this.id, `pod phase ${phase} before it ran`);
      if (Date.now() > until) throw new Error(`pod ${this.id} not Running after ${timeoutS} s (phase ${phase ?? 'unknown'})`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /**
   * After a command ended abnormally (killed, or the stream broke): is the container still there? A pod
   * evicted for ephemeral storage is the agent's doing (SandboxDiskLimitError); a pod or container gone is
   * SandboxDeadError; an API that does not answer SandboxUnavailableError. The kubelet kills an evicted pod's
   * containers about when it records why, so a container that does not answer gets a few seconds for the record.
   */
  private async checkAlive(detail: string): Promise<void> {
    if (this.stopped) throw new SandboxDeadError(this.id, 'stopped');
    const probe = await runOverTransport(this.transport, ['true'], 30).catch(() => undefined);
    const answers = probe?.exit === 0;
    const until = Date.now() + (answers ? 0 : 20_000);
    for (;;) {
      let pod: k8s.V1Pod;
      try {
        pod = await this.core.readNamespacedPod({ name: this.id, namespace: this.namespace });
      } catch (e) {
        if ((e as { code?: number }).code === 404) throw new SandboxDeadError(this.id, `${detail}; pod gone`);
        throw new SandboxUnavailableError(`sandbox ${this.id}: ${detail}; reading the pod: ${(e as Error).message}`);
      }
      // evicted for writing past its ephemeral-storage limit: the agent's doing, not infrastructure
      if (pod.status?.reason === 'Evicted' && /ephemeral|storage|disk/i.test(pod.status.message ?? '')) {
        throw new SandboxDiskLimitError(`sandbox ${this.id} was evicted: ${pod.status.message} (limit ${this.limits.diskMiB} MiB)`);
      }
      if (pod.status?.phase !== 'Running') throw new SandboxDeadError(this.id, `${detail}; pod phase ${pod.status?.phase}`);
      if (answers) return;
      if (Date.now() > until) throw new SandboxDeadError(this.id, `${detail}; the container does not answer`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  async exec(cmd: string, timeoutS: number, opts: ExecOptions = {}): Promise<K8sExecResult> {
    if (!(timeoutS > 0)) throw new Error(`timeoutS must be > 0, got ${timeoutS}`);
    if (this.stopped) throw new SandboxDeadError(this.id, 'stopped');
    const env = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
    const cwd = opts.cwd ?? TESTBED;
    // no WorkingDir/Env in the exec API: cd and env(1) do it. `cd D && CMD` would put the cd into the
    // background with a trailing `&` of CMD, and that subshell would hold the output open until it ends
    const argv = ['env', ...env, 'timeout', '-s', 'TERM', '-k', `${KILL_AFTER_S}s`, `${timeoutS}s`, 'bash', '-lc', `cd ${shq(cwd)} || exit 1\n${cmd}`];
    const t0 = Date.now();
    let r: RawExec;
    try {
      r = await runOverTransport(this.transport, argv, timeoutS + KILL_AFTER_S + HOST_GRACE_S, {
        maxOutputBytes: opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT,
        tailBytes: opts.tailBytes ?? 0,
      });
    } catch (e) {
      await this.checkAlive(`exec: ${(e as Error).message}`);
      throw new SandboxUnavailableError(`sandbox ${this.id}: exec: ${(e as Error).message}`);
    }
    // any signal's exit code, not only SIGKILL's: a command stopped because its pod went is no result of the agent's
    if (r.exit === -1 || r.exit >= 128) await this.checkAlive(`while running ${JSON.stringify(cmd.slice(0, 80))}`);
    const res: K8sExecResult = toExecResult(r, timeoutS, (Date.now() - t0) / 1000);
    if (r.exit === 137 && !res.timedOut) {
      res.oomKilled = await this.checkOom();
      if (res.oomKilled) res.stderr += `\n[sandbox] killed: out of memory (limit ${Math.round(this.limits.memoryBytes / 2 ** 20)} MiB)\n`;
    }
    return res;
  }

  /** The container's memory cgroup's oom_kill counter (v1 memory.oom_control, v2 memory.events): true when it grew. */
  private async checkOom(): Promise<boolean> {
    const r = await runOverTransport(
      this.transport,
      ['sh', '-c', 'cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events 2>/dev/null'],
      30,
    ).catch(() => undefined);
    const m = r && /oom_kill (\d+)/.exec(r.stdout.text());
    if (!m) return false;
    const n = Number(m[1]);
    const grew = n > this.oomKills;
    this.oomKills = n;
    return grew;
  }

  async readFile(path: string): Promise<string> {
    const abs = sandboxPath(path);
    const r = await runOverTransport(this.transport, ['cat', '--', abs], 120, { maxOutputBytes: 256 << 20 });
    if (r.exit !== 0) {
      await this.checkAlive(`readFile ${abs}`);
      throw new Error(`readFile ${abs}: ${r.stderr.text().trim() || r.error || `exit ${r.exit}`}`);
    }
    return r.stdout.text();
  }

  async writeFile(path: string, content: string): Promise<void> {
    const abs = sandboxPath(path);
    await this.untar([{ path: abs.slice(1), content }]);
  }

  async copyIn(files: TarFile[], destDir: string): Promise<void> {
    const dest = checkDestDir(destDir);
    await this.untar(files.map((f) => ({ ...f, path: posix.join(dest, checkEntryName(f.path)).slice(1) })));
  }

  /** Entries were checked when the tar was built; tar itself also refuses `..` members. */
  private async untar(files: TarFile[]): Promise<void> {
    const tarball = await buildTar(files);
    const r = await runOverTransport(this.transport, ['tar', '-x', '--no-same-owner', '-C', '/', '-f', '-'], 120, { stdin: tarball });
    if (r.exit !== 0) {
      await this.checkAlive('tar copy');
      throw new Error(`writing ${files.map((f) => '/' + f.path).join(', ')}: ${r.stderr.text().trim() || r.error}`);
    }
  }

  async diff(excludeGlobs: string[] = [], opts: { maxBytes?: number } = {}): Promise<string> {
    return computePatch((c, t, o) => this.exec(c, t, o), excludeGlobs, opts.maxBytes ?? DEFAULT_MAX_PATCH_BYTES);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await withRetries(`deleting pod ${this.id}`, () => this.core.deleteNamespacedPod({ name: this.id, namespace: this.namespace, gracePeriodSeconds: 0 }), this.retry).catch(
      (e: Error) => {
        // left to the next sweep, never the episode's failure
        if (/HTTP 404/.test(e.message)) return;
        pendingPodDeletions.add(`${this.namespace}/${this.id}`);
        console.warn(`[sandbox] deleting pod ${this.id} failed (${e.message}); the sweep retries`);
      },
    );
  }
}

/** Pods (`namespace/name`) whose deletion failed (API down): retried by the next sweep of their namespace. */
const pendingPodDeletions = new Set<string>();

/** Pods a sweep removed, by reason (see sweepReason). */
export interface PodSweepResult {
  deadOwner: string[];
  expired: string[];
  /** deletions that had failed before and succeeded now */
  retried: string[];
  failed: string[];
}

/** The part of CoreV1Api a sweep needs. */
export interface PodSweepApi {
  listNamespacedPod(a: { namespace: string; labelSelector: string }): Promise<{ items: k8s.V1Pod[] }>;
  deleteNamespacedPod(a: { name: string; namespace: string; gracePeriodSeconds: number }): Promise<unknown>;
}

/** Removes sandbox pods whose deletion failed before, of dead owners on this host and expired ones (any owner), by label. */
export async function sweepPods(core: PodSweepApi, namespace: string, opts: { now?: number; host?: string } = {}): Promise<PodSweepResult> {
  const out: PodSweepResult = { deadOwner: [], expired: [], retried: [], failed: [] };
  for (const key of [...pendingPodDeletions]) {
    const name = key.slice(namespace.length + 1);
    if (!key.startsWith(`${namespace}/`)) continue;
    try {
      await core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 });
      out.retried.push(name);
    } catch (e) {
      if ((e as { code?: number }).code !== 404) {
        out.failed.push(name);
        continue;
      }
    }
    pendingPodDeletions.delete(key);
  }
  const pods = await withRetries(`listing sandbox pods in ${namespace}`, () => core.listNamespacedPod({ namespace, labelSelector: `${SANDBOX_LABEL}=1` }));
  for (const pod of pods.items) {
    const name = pod.metadata?.name;
    if (!name) continue;
    const created = pod.metadata?.creationTimestamp ? new Date(pod.metadata.creationTimestamp).getTime() : Date.now();
    const why = sweepReason(pod.metadata?.labels ?? {}, created, opts.now ?? Date.now(), opts.host);
    if (!why) continue;
    try {
      await core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 });
      out[why].push(name);
    } catch (e) {
      if ((e as { code?: number }).code === 404) continue;
      pendingPodDeletions.add(`${namespace}/${name}`);
      out.failed.push(name);
    }
  }
  return out;
}
