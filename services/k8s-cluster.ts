// swerl's local one-node Kubernetes cluster (`swerl cluster up|down|status|load`, and the tests): etcd,
// containerd, kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet as plain processes
// (no systemd) in a state directory, the binaries from scripts/ensure-k8s.sh. Facts and pitfalls behind
// the choices: docs/kubernetes.md; the files and flags: services/k8s-cluster-config.ts.
//
// The state directory keeps what is costly to make across `down`/`up` (certificates, containerd's image
// store); each `up` starts etcd, the kubelet's directory and the pod network afresh. One cluster per machine
// (one kubelet owns the node's cgroups); `up` finds a running one and returns it.
import { execFile, spawn } from 'node:child_process';
import { closeSync, createReadStream, existsSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type * as k8s from '@kubernetes/client-node';
import { z } from 'zod';
import {
  BLOCKED_REGISTRIES,
  COMPONENTS,
  KUBELET_SYSCTLS,
  NODE_NAME,
  SANDBOX_BRIDGE,
  SANDBOX_NAMESPACE,
  clusterLayout,
  cniConfig,
  componentCommand,
  containerdConfig,
  kubeconfigText,
  kubeletConfig,
  registryHostsToml,
  type Binaries,
  type ClusterLayout,
  type ClusterPorts,
  type Component,
} from './k8s-cluster-config.ts';
import { ensurePki } from './k8s-pki.ts';

const run = promisify(execFile);
const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
/** containerd's namespace of the CRI (what the kubelet's pods and their images live in) */
const CRI_NS = 'k8s.io';
const PATH = [process.env.PATH ?? '', '/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'].filter(Boolean).join(':');

export interface ClusterOptions {
  /** default: SWERL_K8S_STATE, else ${XDG_STATE_HOME:-~/.local/state}/swerl/k8s */
  stateDir?: string;
  /** progress lines (default: none) */
  log?: (line: string) => void;
}

export function defaultStateDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.SWERL_K8S_STATE) return resolve(env.SWERL_K8S_STATE);
  return join(env.XDG_STATE_HOME || join(homedir(), '.local', 'state'), 'swerl', 'k8s');
}

const ClusterRecordSchema = z.object({
  version: z.string(),
  kube: z.string(),
  pauseImage: z.string(),
  ports: z.object({ etcd: z.number().int(), etcdPeer: z.number().int(), apiserver: z.number().int(), kubelet: z.number().int() }),
  pids: z.record(z.string(), z.number().int()),
  startedAt: z.string(),
});
type ClusterRecord = z.infer<typeof ClusterRecordSchema>;

export interface ComponentState {
  name: Component;
  pid: number | null;
  alive: boolean;
}

export interface ClusterStatus {
  stateDir: string;
  kubeconfig: string;
  /** every component's process alive and the API server ready */
  running: boolean;
  apiReady: boolean;
  components: ComponentState[];
  server: string | null;
  version: string | null;
}

export interface ClusterInfo {
  stateDir: string;
  kubeconfig: string;
  namespace: string;
  server: string;
  version: string;
  /** false: `up` found the cluster running */
  started: boolean;
  seconds: number;
}

// ---------------------------------------------------------------------------------------------
// Processes

function commandLine(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

function isZombie(pid: number): boolean {
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

/** The process is alive and is ours: its command line names the state directory (a reused pid is not). */
function isOurs(pid: number | null | undefined, stateDir: string): boolean {
  if (!pid) return false;
  const argv = commandLine(pid);
  return argv.length > 0 && !isZombie(pid) && argv.some((a) => a.includes(stateDir));
}

/** Pids of processes whose command line names `needle` (Linux /proc). */
function pidsMentioning(needle: string): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    const argv = commandLine(Number(p));
    if (argv.some((a) => a.includes(needle)) && !isZombie(Number(p))) out.push(Number(p));
  }
  return out;
}

/** A kubelet that is not this state directory's (one node per machine: the kubelet owns the pods' cgroups). */
function foreignKubelet(stateDir: string): { pid: number; cmd: string } | null {
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    const argv = commandLine(Number(p));
    const isKubelet = argv[0]?.endsWith('/kubelet') || argv[0] === 'kubelet' || argv[1] === 'kubelet';
    if (isKubelet && !argv.some((a) => a.includes(stateDir)) && !isZombie(Number(p))) return { pid: Number(p), cmd: argv.join(' ').slice(0, 200) };
  }
  return null;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function waitUntil<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs: number, everyMs = 200, detail?: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as T;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      const why = last ? ` (last error: ${(last as Error).message})` : '';
      throw new Error(`timed out after ${Math.round(timeoutMs / 1000)} s waiting for ${what}${why}${detail ? `\n${detail()}` : ''}`);
    }
    await sleep(everyMs);
  }
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone. */
async function terminate(pid: number, graceMs = 5000): Promise<void> {
  const gone = () => commandLine(pid).length === 0 || isZombie(pid);
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  const until = Date.now() + graceMs;
  while (!gone() && Date.now() < until) await sleep(50);
  if (!gone()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      return;
    }
    while (!gone()) await sleep(20);
  }
}

function tail(file: string, lines = 25): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => res(port));
    });
  });
}

// ---------------------------------------------------------------------------------------------
// The binaries (scripts/ensure-k8s.sh) and small helpers over the host

interface Ensured {
  kube: string;
  pause: string;
  pauseImage: string;
  version: string;
}

/** Runs scripts/ensure-k8s.sh (seconds when its cache is warm; a cold build takes about 25 min). */
export async function ensureK8sBinaries(log?: (s: string) => void): Promise<Ensured> {
  const out = await new Promise<string>((res, rej) => {
    const child = spawn('bash', [join(ROOT, 'scripts', 'ensure-k8s.sh')], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PATH } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => {
      stderr += b.toString();
      for (const line of b.toString().split('\n')) if (line.trim()) log?.(line);
    });
    child.once('error', rej);
    child.once('exit', (code) => (code === 0 ? res(stdout) : rej(new Error(`scripts/ensure-k8s.sh exited ${code}:\n${stderr.trim().split('\n').slice(-20).join('\n')}`))));
  });
  const kv = Object.fromEntries(
    out
      .trim()
      .split('\n')
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  const e = { kube: kv.kube ?? '', pause: kv.pause ?? '', pauseImage: kv.pause_image ?? '', version: kv.version ?? '' };
  if (!e.kube || !e.pause || !e.pauseImage || !e.version) throw new Error(`scripts/ensure-k8s.sh printed no kube=, pause=, pause_image= and version= lines: ${out}`);
  return e;
}

function which(cmd: string): string {
  for (const d of PATH.split(':')) {
    const p = join(d, cmd);
    if (existsSync(p)) return p;
  }
  throw new Error(`${cmd} not found on PATH: run \`bash scripts/ensure-k8s.sh\``);
}

async function ctr(l: ClusterLayout, args: string[], input?: NodeJS.ReadableStream): Promise<string> {
  const argv = ['--address', l.containerdSocket, '--namespace', CRI_NS, ...args];
  if (!input) {
    const { stdout } = await run(which('ctr'), argv, { maxBuffer: 64 << 20, env: { ...process.env, PATH } });
    return stdout;
  }
  return new Promise((res, rej) => {
    const child = spawn(which('ctr'), argv, { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, PATH } });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    input.on('error', (e: Error) => child.kill() && rej(e));
    input.pipe(child.stdin);
    child.once('error', rej);
    child.once('exit', (code) => (code === 0 ? res(out) : rej(new Error(`ctr ${args.join(' ')} exited ${code}: ${err.trim()}`))));
  });
}

async function ip(args: string[]): Promise<void> {
  await run(which('ip'), args);
}

function readRecord(l: ClusterLayout): ClusterRecord | null {
  try {
    return ClusterRecordSchema.parse(JSON.parse(readFileSync(l.clusterFile, 'utf8')));
  } catch {
    return null;
  }
}

function writeAtomic(path: string, text: string, mode = 0o644): void {
  writeFileSync(`${path}.tmp`, text, { mode });
  renameSync(`${path}.tmp`, path);
}

/** Only one `up`/`down` at a time per state directory (a lock file holding the pid; a dead holder's lock is taken over). */
async function withLock<T>(l: ClusterLayout, fn: () => Promise<T>): Promise<T> {
  mkdirSync(l.stateDir, { recursive: true });
  const lock = join(l.stateDir, 'lock');
  await waitUntil(
    `the lock ${lock}`,
    async () => {
      try {
        writeFileSync(lock, String(process.pid), { flag: 'wx' });
        return true;
      } catch {
        const holder = Number(readFileSync(lock, 'utf8').trim());
        if (!holder || commandLine(holder).length === 0) rmSync(lock, { force: true });
        return false;
      }
    },
    15 * 60_000,
    250,
  );
  try {
    return await fn();
  } finally {
    rmSync(lock, { force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// The API

/** A client-node KubeConfig of the cluster's admin kubeconfig. */
export async function kubeConfigOf(o: ClusterOptions = {}): Promise<k8s.KubeConfig> {
  const lib = await import('@kubernetes/client-node');
  const kc = new lib.KubeConfig();
  kc.loadFromFile(clusterLayout(o.stateDir ?? defaultStateDir()).kubeconfig);
  return kc;
}

/** GET /readyz with the admin certificate: true when the API server answers `ok`. */
function apiReady(l: ClusterLayout, port: number): Promise<boolean> {
  return new Promise((res) => {
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        port,
        path: '/readyz',
        method: 'GET',
        ca: readFileSync(join(l.pki, 'ca.crt')),
        cert: readFileSync(join(l.pki, 'admin.crt')),
        key: readFileSync(join(l.pki, 'admin.key')),
        timeout: 3000,
      },
      (r) => {
        let body = '';
        r.on('data', (b: Buffer) => (body += b.toString()));
        r.on('end', () => res(r.statusCode === 200 && body.trim() === 'ok'));
      },
    );
    req.on('error', () => res(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

export async function clusterStatus(o: ClusterOptions = {}): Promise<ClusterStatus> {
  const l = clusterLayout(o.stateDir ?? defaultStateDir());
  const rec = readRecord(l);
  const components = COMPONENTS.map((name) => {
    const pid = rec?.pids[name] ?? null;
    return { name, pid, alive: isOurs(pid, l.stateDir) };
  });
  const ready = rec !== null && components.find((c) => c.name === 'kube-apiserver')!.alive && (await apiReady(l, rec.ports.apiserver));
  return {
    stateDir: l.stateDir,
    kubeconfig: l.kubeconfig,
    running: ready && components.every((c) => c.alive),
    apiReady: ready,
    components,
    server: rec ? `https://127.0.0.1:${rec.ports.apiserver}` : null,
    version: rec?.version ?? null,
  };
}

/** Starts one component as a detached process (it outlives the caller) logging to logs/<name>.log; returns its pid. */
function startProcess(l: ClusterLayout, name: Component, argv: string[]): number {
  mkdirSync(l.logs, { recursive: true });
  const fd = openSync(join(l.logs, `${name}.log`), 'a');
  try {
    const child = spawn(argv[0]!, argv.slice(1), { detached: true, stdio: ['ignore', fd, fd], env: { ...process.env, PATH }, cwd: l.stateDir });
    child.unref();
    if (!child.pid) throw new Error(`could not start ${name} (${argv[0]})`);
    return child.pid;
  } finally {
    closeSync(fd);
  }
}

function binaries(rec: Pick<ClusterRecord, 'kube'>): Binaries {
  return { kube: rec.kube, etcd: which('etcd'), containerd: which('containerd') };
}

/** Waits until `name` is ready (its own probe); fails with the end of its log when it died or took too long. */
async function waitReady(l: ClusterLayout, rec: ClusterRecord, name: Component, timeoutMs = 90_000): Promise<void> {
  const pid = rec.pids[name]!;
  const log = join(l.logs, `${name}.log`);
  const probe: () => Promise<boolean> = {
    etcd: async () => {
      const r = await fetch(`http://127.0.0.1:${rec.ports.etcd}/health`, { signal: AbortSignal.timeout(2000) });
      return r.ok && /"health":\s*"true"/.test(await r.text());
    },
    containerd: async () => {
      await ctr(l, ['version']);
      return true;
    },
    'kube-apiserver': () => apiReady(l, rec.ports.apiserver),
    'kube-controller-manager': async () => true,
    'kube-scheduler': async () => true,
    kubelet: async () => nodeReady(l),
  }[name];
  await waitUntil(
    `${name} to be ready`,
    async () => {
      if (!isOurs(pid, l.stateDir)) throw new Error(`${name} (pid ${pid}) exited`);
      return probe();
    },
    timeoutMs,
    200,
    () => `last lines of ${log}:\n${tail(log)}`,
  ).catch((e: Error) => {
    // a process that exited is reported at once, not after the timeout
    throw new Error(e.message.includes('exited') ? `${name} exited; last lines of ${log}:\n${tail(log)}` : e.message);
  });
}

async function nodeReady(l: ClusterLayout): Promise<boolean> {
  const lib = await import('@kubernetes/client-node');
  const kc = new lib.KubeConfig();
  kc.loadFromFile(l.kubeconfig);
  const node = await kc.makeApiClient(lib.CoreV1Api).readNode({ name: NODE_NAME });
  return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

function writeConfigs(l: ClusterLayout, rec: ClusterRecord): void {
  for (const d of [l.pki, l.logs, l.containerdRoot, l.containerdState, l.cniConf, l.cniIpam, l.kubeletRoot, l.podLogs]) mkdirSync(d, { recursive: true });
  writeAtomic(l.containerdConfig, containerdConfig(l, rec.pauseImage));
  for (const r of BLOCKED_REGISTRIES) {
    mkdirSync(join(l.registryHosts, r), { recursive: true });
    writeAtomic(join(l.registryHosts, r, 'hosts.toml'), registryHostsToml());
  }
  writeAtomic(join(l.cniConf, '10-swerl-sandbox.conflist'), cniConfig(l));
  writeAtomic(l.kubeletConfig, kubeletConfig(l, rec.ports));
  const pem = (f: string) => readFileSync(join(l.pki, f), 'utf8');
  const server = `https://127.0.0.1:${rec.ports.apiserver}`;
  writeAtomic(l.kubeconfig, kubeconfigText(server, pem('ca.crt'), pem('admin.crt'), pem('admin.key'), 'swerl-admin'), 0o600);
  writeAtomic(l.nodeKubeconfig, kubeconfigText(server, pem('ca.crt'), pem('node.crt'), pem('node.key'), `system:node:${NODE_NAME}`), 0o600);
}

function saveSysctls(l: ClusterLayout): void {
  if (existsSync(l.sysctlsFile)) return; // saved by an earlier up whose down did not run: those are the originals
  const saved = Object.fromEntries(KUBELET_SYSCTLS.map((k) => [k, readFileSync(`/proc/sys/${k}`, 'utf8').trim()]));
  writeAtomic(l.sysctlsFile, JSON.stringify(saved));
}

function restoreSysctls(l: ClusterLayout): void {
  if (!existsSync(l.sysctlsFile)) return;
  const saved = JSON.parse(readFileSync(l.sysctlsFile, 'utf8')) as Record<string, string>;
  for (const [k, v] of Object.entries(saved)) {
    try {
      if (readFileSync(`/proc/sys/${k}`, 'utf8').trim() !== v) writeFileSync(`/proc/sys/${k}`, v);
    } catch {
      // not writable here: nothing to restore
    }
  }
  rmSync(l.sysctlsFile, { force: true });
}

async function ensureBridge(): Promise<void> {
  if (existsSync(`/sys/class/net/${SANDBOX_BRIDGE}`)) return;
  await ip(['link', 'add', SANDBOX_BRIDGE, 'type', 'bridge']);
  await ip(['link', 'set', SANDBOX_BRIDGE, 'up']);
}

/** Image references as containerd names them: `debian:12` → `docker.io/library/debian:12`. */
export function normalizeImageRef(ref: string): string {
  let name = ref;
  if (!/@/.test(name) && !/:[^/]+$/.test(name)) name += ':latest';
  const first = name.split('/')[0]!;
  const hasDomain = name.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost');
  if (hasDomain) return name;
  return name.includes('/') ? `docker.io/${name}` : `docker.io/library/${name}`;
}

async function clusterImageSet(l: ClusterLayout): Promise<Set<string>> {
  return new Set(
    (await ctr(l, ['images', 'ls', '-q']))
      .split('\n')
      .map((s) => s.trim())
      .filter(Boolean),
  );
}

/**
 * Loads images from Docker into the cluster's containerd (`docker save | ctr import`, shared layers once),
 * those it does not hold yet; an image Docker lacks is an error naming it. Load an image before a pod uses it:
 * the cluster cannot pull (nothing leaves the machine).
 */
export async function loadImages(images: string[], o: ClusterOptions = {}): Promise<{ loaded: string[]; present: string[]; seconds: number }> {
  const l = clusterLayout(o.stateDir ?? defaultStateDir());
  const t0 = Date.now();
  if (!isOurs(readRecord(l)?.pids.containerd, l.stateDir)) throw new Error(`the cluster in ${l.stateDir} is not running: swerl cluster up`);
  const have = await clusterImageSet(l);
  const want = [...new Set(images)].filter((i) => !have.has(normalizeImageRef(i)));
  const present = [...new Set(images)].filter((i) => have.has(normalizeImageRef(i)));
  if (want.length) {
    const { imageExists } = await import('./docker.ts');
    for (const i of want) {
      if (!(await imageExists(i))) throw new Error(`image ${JSON.stringify(i)} is not in Docker, so it cannot be loaded into the cluster (build it first: swerl images build)`);
    }
    o.log?.(`loading ${want.length} image(s) into the cluster: ${want.join(', ')}`);
    // one tar of all of them, shared layers once
    const save = spawn(which('docker'), ['save', ...want], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PATH } });
    let saveErr = '';
    save.stderr.on('data', (b: Buffer) => (saveErr += b.toString()));
    const saved = new Promise<void>((res, rej) => {
      save.once('error', rej);
      save.once('exit', (code) => (code === 0 ? res() : rej(new Error(`docker save exited ${code}: ${saveErr.trim()}`))));
    });
    await Promise.all([ctr(l, ['images', 'import', '-'], save.stdout), saved]);
    const now = await clusterImageSet(l);
    const missing = want.filter((i) => !now.has(normalizeImageRef(i)));
    if (missing.length) throw new Error(`ctr import did not register ${missing.join(', ')}`);
  }
  return { loaded: want, present, seconds: (Date.now() - t0) / 1000 };
}

/** Starts the cluster, or finds it running. `images` are loaded from Docker (when missing) before it returns. */
export async function clusterUp(o: ClusterOptions & { images?: string[] } = {}): Promise<ClusterInfo> {
  const l = clusterLayout(o.stateDir ?? defaultStateDir());
  const log = o.log ?? (() => undefined);
  const t0 = Date.now();
  const info = await withLock(l, async () => {
    const st = await clusterStatus({ stateDir: l.stateDir });
    if (st.running) {
      log(`the cluster in ${l.stateDir} is running (${st.server})`);
      return { started: false, server: st.server!, version: st.version! };
    }
    if (process.getuid?.() !== 0) throw new Error('swerl cluster up needs root (the kubelet manages cgroups, mounts and network namespaces)');
    const other = foreignKubelet(l.stateDir);
    if (other) throw new Error(`another kubelet runs on this machine (pid ${other.pid}: ${other.cmd}); one node per machine`);
    if (st.components.some((c) => c.alive) || existsSync(l.clusterFile)) {
      log('a previous cluster did not stop cleanly: cleaning up first');
      await teardown(l, log);
    }
    const ensured = await ensureK8sBinaries(log);
    await ensurePki(l.pki);
    // what lived for one `up` starts afresh
    for (const d of [l.etcdData, l.kubeletRoot, l.containerdState, l.cniIpam, join(l.stateDir, 'apiserver')]) rmSync(d, { recursive: true, force: true });
    if (existsSync(l.logs)) {
      rmSync(`${l.logs}.prev`, { recursive: true, force: true });
      renameSync(l.logs, `${l.logs}.prev`);
    }
    const ports: ClusterPorts = { etcd: await freePort(), etcdPeer: await freePort(), apiserver: await freePort(), kubelet: await freePort() };
    const rec: ClusterRecord = { version: ensured.version, kube: ensured.kube, pauseImage: ensured.pauseImage, ports, pids: {}, startedAt: new Date().toISOString() };
    writeConfigs(l, rec);
    saveSysctls(l);
    await ensureBridge();
    const bin = binaries(rec);
    const start = async (c: Component) => {
      rec.pids[c] = startProcess(l, c, componentCommand(c, l, ports, bin));
      writeAtomic(l.clusterFile, JSON.stringify(rec, null, 1));
      log(`started ${c} (pid ${rec.pids[c]})`);
    };
    try {
      await start('etcd');
      await start('containerd');
      await Promise.all([waitReady(l, rec, 'etcd'), waitReady(l, rec, 'containerd')]);
      if (!(await clusterImageSet(l)).has(normalizeImageRef(ensured.pauseImage))) await ctr(l, ['images', 'import', '-'], createReadStream(ensured.pause));
      await start('kube-apiserver');
      await waitReady(l, rec, 'kube-apiserver');
      await start('kube-controller-manager');
      await start('kube-scheduler');
      await start('kubelet');
      await waitReady(l, rec, 'kubelet');
      await ensureNamespace(SANDBOX_NAMESPACE, { stateDir: l.stateDir });
    } catch (e) {
      log(`up failed: ${(e as Error).message}; stopping what started`);
      await teardown(l, log).catch(() => undefined);
      throw e;
    }
    return { started: true, server: `https://127.0.0.1:${ports.apiserver}`, version: ensured.version };
  });
  if (o.images?.length) await loadImages(o.images, { stateDir: l.stateDir, log });
  return { stateDir: l.stateDir, kubeconfig: l.kubeconfig, namespace: SANDBOX_NAMESPACE, ...info, seconds: (Date.now() - t0) / 1000 };
}

/**
 * Creates a namespace (if missing) and waits for its `default` service account: the ServiceAccount
 * admission refuses pods until the controller-manager made it.
 */
export async function ensureNamespace(name: string, o: ClusterOptions = {}): Promise<void> {
  const lib = await import('@kubernetes/client-node');
  const core = (await kubeConfigOf(o)).makeApiClient(lib.CoreV1Api);
  try {
    await core.createNamespace({ body: { metadata: { name } } });
  } catch (e) {
    if ((e as { code?: number }).code !== 409) throw e;
  }
  await waitUntil(`the default service account of namespace ${name}`, () => core.readNamespacedServiceAccount({ name: 'default', namespace: name }).then(() => true), 60_000, 200);
}

/** Stops the cluster: nothing of it keeps running (pods' containers included), sysctls restored. `purge` also removes the state directory. */
export async function clusterDown(o: ClusterOptions & { purge?: boolean } = {}): Promise<{ stopped: string[]; seconds: number }> {
  const l = clusterLayout(o.stateDir ?? defaultStateDir());
  const t0 = Date.now();
  const stopped = await withLock(l, () => teardown(l, o.log ?? (() => undefined)));
  if (o.purge) rmSync(l.stateDir, { recursive: true, force: true });
  return { stopped, seconds: (Date.now() - t0) / 1000 };
}

/** Stops one component (SIGKILL when `kill`); `startComponent` starts it again on the same ports. For tests of faults. */
export async function stopComponent(name: Component, o: ClusterOptions & { kill?: boolean } = {}): Promise<void> {
  const l = clusterLayout(o.stateDir ?? defaultStateDir());
  const rec = readRecord(l);
  const pid = rec?.pids[name];
  if (!rec || !isOurs(pid, l.stateDir)) throw new Error(`${name} of the cluster in ${l.stateDir} is not running`);
  await terminate(pid!, o.kill ? 0 : 5000);
}

export async function startComponent(name: Component, o: ClusterOptions = {}): Promise<void> {
  const l = clusterLayout(o.stateDir ?? defaultStateDir());
  const rec = readRecord(l);
  if (!rec) throw new Error(`no cluster record in ${l.stateDir}: run swerl cluster up`);
  if (isOurs(rec.pids[name], l.stateDir)) return;
  rec.pids[name] = startProcess(l, name, componentCommand(name, l, rec.ports, binaries(rec)));
  writeAtomic(l.clusterFile, JSON.stringify(rec, null, 1));
  await waitReady(l, rec, name);
}

// ---------------------------------------------------------------------------------------------
// Teardown

/** Deletes every pod with grace 0 and waits (bounded) for the kubelet to stop their sandboxes through the CRI. */
async function deleteAllPods(l: ClusterLayout, rec: ClusterRecord): Promise<void> {
  if (!isOurs(rec.pids['kube-apiserver'], l.stateDir) || !isOurs(rec.pids.kubelet, l.stateDir) || !(await apiReady(l, rec.ports.apiserver))) return;
  const lib = await import('@kubernetes/client-node');
  const kc = new lib.KubeConfig();
  kc.loadFromFile(l.kubeconfig);
  const core = kc.makeApiClient(lib.CoreV1Api);
  const pods = await core.listPodForAllNamespaces();
  await Promise.all(pods.items.map((p) => core.deleteNamespacedPod({ name: p.metadata!.name!, namespace: p.metadata!.namespace!, gracePeriodSeconds: 0 }).catch(() => undefined)));
  // the kubelet stops the sandboxes (CNI DEL, netns removed); what it has not done in time the ctr sweep does
  await waitUntil('the pods stopped', async () => (await ctr(l, ['tasks', 'ls', '-q'])).trim() === '', 20_000, 250).catch(() => undefined);
}

/** Kills and deletes every task and container left in containerd's CRI namespace; removes their network namespaces. */
async function sweepContainers(l: ClusterLayout): Promise<void> {
  const ids = (await ctr(l, ['containers', 'ls', '-q']))
    .split('\n')
    .map((s) => s.trim())
    .filter(Boolean);
  const netns = new Set<string>();
  for (const id of ids) {
    try {
      const info = JSON.parse(await ctr(l, ['containers', 'info', id])) as { Spec?: { linux?: { namespaces?: { type: string; path?: string }[] } } };
      for (const n of info.Spec?.linux?.namespaces ?? []) if (n.type === 'network' && n.path?.startsWith('/var/run/netns/')) netns.add(n.path);
    } catch {
      // gone meanwhile
    }
  }
  // --force kills a task still running and deletes it; then the container and its snapshot go
  if (ids.length) await ctr(l, ['tasks', 'delete', '--force', ...ids]).catch(() => undefined);
  if (ids.length) await ctr(l, ['containers', 'delete', ...ids]).catch(() => undefined);
  for (const p of netns) {
    await run(which('umount'), [p]).catch(() => undefined);
    rmSync(p, { force: true });
  }
}

/** Mount points at or below `dir` (deepest first). */
function mountsUnder(dir: string): string[] {
  const points = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4]?.replace(/\\040/g, ' '))
    .filter((p): p is string => !!p && (p === dir || p.startsWith(`${dir}/`)));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

/** Removes the empty cgroups the kubelet left (kubepods/…) in every v1 hierarchy, deepest first. */
function removeKubepodsCgroups(): void {
  let hierarchies: string[];
  try {
    hierarchies = readdirSync('/sys/fs/cgroup').map((h) => join('/sys/fs/cgroup', h));
  } catch {
    return;
  }
  const rmTree = (dir: string) => {
    let entries: string[];
    try {
      entries = readdirSync(dir).filter((e) => statSync(join(dir, e)).isDirectory());
    } catch {
      return;
    }
    for (const e of entries) rmTree(join(dir, e));
    try {
      rmdirSync(dir);
    } catch {
      // still holds a process (not ours), or not removable
    }
  };
  for (const h of [...hierarchies, '/sys/fs/cgroup']) if (existsSync(join(h, 'kubepods'))) rmTree(join(h, 'kubepods'));
}

async function teardown(l: ClusterLayout, log: (s: string) => void): Promise<string[]> {
  const rec = readRecord(l);
  const stopped: string[] = [];
  const stop = async (c: Component, graceMs = 5000) => {
    const pid = rec?.pids[c];
    if (!isOurs(pid, l.stateDir)) return;
    await terminate(pid!, graceMs);
    stopped.push(c);
    log(`stopped ${c} (pid ${pid})`);
  };
  if (rec) await deleteAllPods(l, rec).catch((e: Error) => log(`deleting pods: ${e.message}`));
  for (const c of ['kube-scheduler', 'kube-controller-manager', 'kubelet', 'kube-apiserver'] as const) await stop(c);
  // pods' containers outlive a stopped kubelet: kill them through containerd while it runs
  if (isOurs(rec?.pids.containerd, l.stateDir)) await sweepContainers(l).catch((e: Error) => log(`sweeping containers: ${e.message}`));
  await stop('containerd');
  await stop('etcd');
  // shims (and anything else) still naming this state directory: runc shims of containers containerd lost track of
  for (const pid of pidsMentioning(l.stateDir)) {
    log(`stopping leftover process ${pid}: ${commandLine(pid).join(' ').slice(0, 120)}`);
    await terminate(pid, 2000);
  }
  for (const m of mountsUnder(l.stateDir)) await run(which('umount'), ['-l', m]).catch(() => undefined);
  if (!foreignKubelet(l.stateDir)) removeKubepodsCgroups();
  restoreSysctls(l);
  if (existsSync(`/sys/class/net/${SANDBOX_BRIDGE}`)) await ip(['link', 'del', SANDBOX_BRIDGE]).catch(() => undefined);
  for (const d of [l.etcdData, l.kubeletRoot, l.containerdState, l.cniIpam]) rmSync(d, { recursive: true, force: true });
  rmSync(l.clusterFile, { force: true });
  return stopped;
}

/** What of the cluster is still running, for tests and `status`: its processes and the pods' network namespaces. */
export function leftovers(o: ClusterOptions = {}): { pids: number[]; bridge: boolean; mounts: string[] } {
  const l = clusterLayout(o.stateDir ?? defaultStateDir());
  return { pids: pidsMentioning(l.stateDir), bridge: existsSync(`/sys/class/net/${SANDBOX_BRIDGE}`), mounts: mountsUnder(l.stateDir) };
}
