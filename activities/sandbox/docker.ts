// Docker sandbox backend (DESIGN §3) over dockerode: network none, CPU/memory/pids limits, all
// capabilities dropped, no-new-privileges, never a host mount; tini as PID 1 reaps orphans.
// Every container carries owner labels (host, worker process, run, iteration) and an expiry, so
// sandboxes of dead workers and expired ones are swept (sweepSandboxes); removal is retried after
// engine errors. Disk: a real quota (`--storage-opt size`) where the storage driver has one, else a
// watchdog that stops a command once the container's writable layer passes limits.diskMiB.
import Docker from 'dockerode';
import { defaultDocker } from '../../services/docker.ts';
import { posix } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { DEFAULT_LIMITS, SandboxUnavailableError, type ExecOptions, type ExecResult, type Sandbox, type SandboxBackend, type SandboxLimits } from '../../lib/sandbox.ts';
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
  firstFileFromTar,
  omittedOf,
  hostLabel,
  ownerLabels,
  sweepReason,
  sandboxPath,
  type TarFile,
} from './common.ts';
import { DEFAULT_MAX_PATCH_BYTES } from '../../lib/sandbox.ts';

// dockerode's types lack the engine's `size` option of container inspect and the field it adds
declare module 'dockerode' {
  interface ContainerInspectOptions {
    size?: boolean;
  }
  interface ContainerInspectInfo {
    SizeRw?: number;
  }
}

export { SandboxDeadError, SandboxPathError } from './common.ts';

/** Extra grace the host waits past `timeoutS` before giving up on an exec stream itself. */
const HOST_GRACE_S = 30;
/** After `timeout` sends TERM to the process group, KILL follows this many seconds later. */
const KILL_AFTER_S = 2;
/** How often the disk watchdog measures a running command's container. */
const DISK_WATCH_MS = 500;
/** Growth during one command that the watchdog tolerates in a sandbox already over its limit. */
const DISK_GROWTH_SLACK = 1 << 20;
/**
 * Shell that kills the orphans of PID 1 (tini) and their process groups, sparing the sandbox's main `sleep`
 * (the earliest started child of PID 1); repeated while it finds any, for orphans of orphans.
 * /proc/<pid>/stat after the command name: state ppid pgrp session … starttime (the 20th).
 */
const ORPHAN_SWEEP = [
  'orphans() { main=""; ms=""; set --; for s in /proc/[0-9]*/stat; do read -r l < "$s" 2>/dev/null || continue; p=${l%% *}; r=${l##*) };',
  '  set -- $r; [ "$2" = 1 ] || continue; if [ -z "$ms" ] || [ "${20}" -lt "$ms" ]; then [ -n "$main" ] && echo "$main $mg"; main=$p; mg=$3; ms=${20}; else echo "$p $3"; fi; done; }',
  'j=0; while [ $j -lt 20 ]; do o=$(orphans); [ -z "$o" ] && break; echo "$o" | while read -r p g; do [ "$g" != 1 ] && [ "$g" != "$(cut -d" " -f5 /proc/1/stat)" ] && kill -9 -- -"$g" 2>/dev/null; kill -9 "$p" 2>/dev/null; done; j=$((j+1)); sleep 0.05; done',
].join('\n');

/** What the kernel says when a quota or the disk is full. */
const DISK_FULL = /No space left on device|Disk quota exceeded/;

export interface DockerExecResult extends ExecResult {
  /** the memory cgroup's OOM killer fired during this command */
  oomKilled?: boolean;
}

interface DockerErr {
  statusCode?: number;
  message?: string;
  code?: string;
}

function isGone(e: unknown): boolean {
  const err = e as DockerErr;
  return err?.statusCode === 404 || (err?.statusCode === 409 && /not running|is paused|restarting/i.test(err.message ?? ''));
}

/** The engine did not answer, or failed on its side: infrastructure. */
function isEngineFailure(e: unknown): boolean {
  const err = e as DockerErr;
  if (typeof err?.statusCode === 'number') return err.statusCode >= 500;
  return /ECONNREFUSED|ENOENT|ECONNRESET|EPIPE|ETIMEDOUT|socket hang up/i.test(`${err?.code ?? ''} ${err?.message ?? ''}`);
}

function unavailable(what: string, e: unknown): SandboxUnavailableError {
  return new SandboxUnavailableError(`${what}: docker engine: ${(e as Error)?.message ?? String(e)}`);
}

/** How the backend holds a sandbox to limits.diskMiB. */
export type DiskLimitMode = 'auto' | 'quota' | 'watchdog';

export interface DockerBackendOptions {
  docker?: Docker;
  /** labels added to every container this backend starts */
  labels?: Record<string, string>;
  /** `auto` (default): a storage-driver quota where the engine has one, else the watchdog */
  diskLimit?: DiskLimitMode;
}

/** Containers whose removal failed (engine down): retried by the next sweep. */
const pendingRemovals = new Map<string, Docker>();

async function removeContainer(docker: Docker, id: string): Promise<void> {
  await docker
    .getContainer(id)
    .remove({ force: true, v: true })
    .catch((e: DockerErr) => {
      if (e?.statusCode === 404 || (e?.statusCode === 409 && /already in progress/.test(e.message ?? ''))) return;
      throw e;
    });
}

export class DockerBackend implements SandboxBackend {
  readonly name = 'docker' as const;
  private readonly docker: Docker;
  private readonly labels: Record<string, string>;
  private quota: Promise<'overlay' | 'whole' | null> | undefined;
  constructor(private readonly opts: DockerBackendOptions = {}) {
    this.docker = opts.docker ?? defaultDocker();
    this.labels = opts.labels ?? {};
  }

  /**
   * Whether `--storage-opt size` works, and what it bounds: overlay2 (on xfs with pquota) limits the writable
   * layer; btrfs and zfs limit the whole container (image included). Decided once per backend.
   */
  private quotaKind(): Promise<'overlay' | 'whole' | null> {
    if (this.opts.diskLimit === 'watchdog') return Promise.resolve(null);
    this.quota ??= this.docker.info().then(
      (info: { Driver?: string }) => (info.Driver === 'overlay2' ? 'overlay' : info.Driver === 'btrfs' || info.Driver === 'zfs' ? 'whole' : null),
      (e: unknown) => {
        this.quota = undefined;
        throw unavailable('docker info', e);
      },
    );
    return this.quota;
  }

  async sweep(): Promise<{ removed: number; failed: number }> {
    const r = await sweepSandboxes({ docker: this.docker });
    return { removed: r.deadOwner.length + r.expired.length + r.retried.length, failed: r.failed.length };
  }

  async start(image: string, limits: Partial<SandboxLimits> = {}, labels: Record<string, string> = {}): Promise<DockerSandbox> {
    const l: SandboxLimits = { ...DEFAULT_LIMITS, ...limits };
    if (!(l.cpus > 0)) throw new Error(`limits.cpus must be > 0, got ${l.cpus}`);
    if (!(l.memoryBytes >= 8 << 20)) throw new Error(`limits.memoryBytes must be >= 8 MiB, got ${l.memoryBytes}`);
    if (!(l.pids >= 16)) throw new Error(`limits.pids must be >= 16, got ${l.pids}`);
    if (!(Number.isInteger(l.diskMiB) && l.diskMiB >= 0)) throw new Error(`limits.diskMiB must be an integer >= 0, got ${l.diskMiB}`);
    const name = `swerl-sbx-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
    const now = Date.now();
    const allLabels = {
      ...this.labels,
      [OWNER_LABELS.expires]: expiresLabel(DEFAULT_SANDBOX_LIFETIME_S, now),
      ...labels,
      [SANDBOX_LABEL]: '1',
      ...ownerLabels(),
      [OWNER_LABELS.created]: new Date(now).toISOString(),
    };
    const hostConfig: Docker.HostConfig = {
      NetworkMode: 'none',
      Init: true,
      NanoCpus: Math.round(l.cpus * 1e9),
      Memory: l.memoryBytes,
      MemorySwap: l.memoryBytes,
      PidsLimit: l.pids,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      Binds: [],
      Mounts: [],
      Privileged: false,
      AutoRemove: false,
    };
    let quota: 'overlay' | 'whole' | null = null;
    if (l.diskMiB > 0 && (quota = await this.quotaKind())) {
      let mib = l.diskMiB;
      if (quota === 'whole') {
        const size = await this.docker
          .getImage(image)
          .inspect()
          .then((i) => i.Size)
          .catch(() => 0);
        mib += Math.ceil(size / 2 ** 20);
      }
      hostConfig.StorageOpt = { size: `${mib}M` };
    }
    let container: Docker.Container;
    const create = () =>
      this.docker.createContainer({ name, Image: image, Cmd: ['sleep', 'infinity'], WorkingDir: TESTBED, NetworkDisabled: true, Labels: allLabels, HostConfig: hostConfig });
    try {
      try {
        container = await create();
      } catch (e) {
        // overlay2 without xfs pquota refuses --storage-opt: from now on the watchdog holds the limit
        if (!hostConfig.StorageOpt || !/storage-opt|storage opt|quota/i.test((e as Error).message ?? '')) throw e;
        if (this.opts.diskLimit === 'quota') throw new Error(`limits.diskMiB: the docker engine cannot set a disk quota (${(e as Error).message})`);
        this.quota = Promise.resolve(null);
        quota = null;
        delete hostConfig.StorageOpt;
        container = await create();
      }
    } catch (e) {
      const err = e as DockerErr;
      if (err.statusCode === 404) throw new Error(`image ${JSON.stringify(image)} not found (build it with \`swerl images build\`)`);
      if (isEngineFailure(e)) throw unavailable(`creating a sandbox from image ${image}`, e);
      throw new Error(`creating a sandbox from image ${JSON.stringify(image)} failed: ${err.message ?? String(e)}`);
    }
    try {
      await container.start();
    } catch (e) {
      await removeContainer(this.docker, container.id).catch(() => pendingRemovals.set(container.id, this.docker));
      if (isEngineFailure(e)) throw unavailable(`starting sandbox ${name}`, e);
      throw new Error(`starting sandbox ${name} (image ${image}) failed: ${(e as Error).message}`);
    }
    return new DockerSandbox(this.docker, container, name, l, quota === null && l.diskMiB > 0);
  }
}

export class DockerSandbox implements Sandbox {
  private oomKills: number | undefined;
  private stopped = false;
  /** the writable layer's size at the last measurement (disk watchdog) */
  private diskBytes = 0;
  constructor(
    private readonly docker: Docker,
    private readonly container: Docker.Container,
    readonly id: string,
    readonly limits: SandboxLimits,
    /** no quota from the storage driver: each command is watched against limits.diskMiB */
    readonly diskWatchdog = false,
  ) {}

  private async dead(detail: string): Promise<SandboxDeadError> {
    if (this.stopped) return new SandboxDeadError(this.id, 'stopped');
    try {
      const s = (await this.container.inspect()).State;
      const why = s.OOMKilled ? 'out of memory' : `exit code ${s.ExitCode}`;
      return new SandboxDeadError(this.id, `${detail}; container ${s.Status} (${why})`);
    } catch (e) {
      return new SandboxDeadError(this.id, `${detail}; ${isGone(e) ? 'container removed' : `engine: ${(e as Error).message}`}`);
    }
  }

  /** A Docker API call: a gone container is a dead sandbox, an engine failure is unavailable; both infrastructure. */
  private async api<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      if (isGone(e)) throw await this.dead(what);
      if (isEngineFailure(e)) throw unavailable(`sandbox ${this.id}: ${what}`, e);
      throw e;
    }
  }

  /** Runs one exec without the timeout wrapper; used for bookkeeping. */
  private async rawExec(
    argv: string[],
    timeoutS: number,
    opts: ExecOptions = {},
    /** started when the command runs; returns its stop */
    watch?: () => () => void,
  ): Promise<{ exit: number | null; stdout: CappedSink; stderr: CappedSink; hostTimedOut: boolean }> {
    if (this.stopped) throw new SandboxDeadError(this.id, 'stopped');
    const exec = await this.api('exec could not start', () =>
      this.container.exec({
        Cmd: argv,
        AttachStdout: true,
        AttachStderr: true,
        AttachStdin: false,
        Tty: false,
        WorkingDir: opts.cwd ?? TESTBED,
        Env: Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`),
      }),
    );
    const cap = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
    const stdout = new CappedSink(cap, opts.tailBytes ?? 0);
    const stderr = new CappedSink(cap, opts.tailBytes ?? 0);
    const stream = (await this.api('exec could not start', () => exec.start({ hijack: true, stdin: false }))) as Duplex;
    this.docker.modem.demuxStream(stream, stdout, stderr);
    let hostTimedOut = false;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(
        () => {
          hostTimedOut = true;
          stream.destroy();
          resolve();
        },
        (timeoutS + HOST_GRACE_S) * 1000,
      );
      const unwatch = watch?.();
      const done = () => {
        clearTimeout(timer);
        unwatch?.();
        resolve();
      };
      stream.on('end', done);
      stream.on('close', done);
      stream.on('error', done);
    });
    const info = await this.api('exec lost', () => exec.inspect());
    return { exit: info.Running ? null : info.ExitCode, stdout, stderr, hostTimedOut };
  }

  /** Bytes the container wrote (its writable layer), as the engine measures it. */
  private async writtenBytes(): Promise<number> {
    const i = await this.container.inspect({ size: true });
    return i.SizeRw ?? 0;
  }

  /**
   * Kills every process of the sandbox except tini (PID 1) and the main `sleep` (the oldest child of PID 1):
   * a command that passed the disk limit, with whatever it started.
   */
  private async killCommands(): Promise<void> {
    const script = [
      'main=""; for s in /proc/[0-9]*/stat; do read -r l < "$s" 2>/dev/null || continue; p=${l%% *}; r=${l##*) }; set -- $r;',
      '[ "$2" = 1 ] && { [ -z "$main" ] || [ "$p" -lt "$main" ]; } && main=$p; done;',
      'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] || [ "$p" = "$$" ] || [ "$p" = "$main" ] || kill -9 "$p" 2>/dev/null; done; true',
    ].join(' ');
    await this.rawExec(['sh', '-c', script], 10, { cwd: '/' }).catch(() => undefined);
  }

  /**
   * While a command runs: every DISK_WATCH_MS, the written bytes against the limit; a command that makes them
   * grow past it is killed. A sandbox already over its limit still runs commands that do not write (e.g. `rm`).
   */
  private diskWatch(state: { exceeded: boolean; bytes: number }): () => () => void {
    const limit = this.limits.diskMiB * 2 ** 20;
    const before = this.diskBytes;
    return () => {
      let busy = false;
      const t = setInterval(() => {
        if (busy || state.exceeded) return;
        busy = true;
        this.writtenBytes()
          .then(async (bytes) => {
            state.bytes = bytes;
            this.diskBytes = bytes;
            if (bytes > limit && bytes > before + DISK_GROWTH_SLACK && !state.exceeded) {
              state.exceeded = true;
              await this.killCommands();
            }
          })
          .catch(() => undefined)
          .finally(() => {
            busy = false;
          });
      }, DISK_WATCH_MS);
      return () => clearInterval(t);
    };
  }

  async exec(cmd: string, timeoutS: number, opts: ExecOptions = {}): Promise<DockerExecResult> {
    if (!(timeoutS > 0)) throw new Error(`timeoutS must be > 0, got ${timeoutS}`);
    const t0 = Date.now();
    // `timeout` makes its own process group (pgid = its pid) and signals all of it at the limit.
    // When the command ends, whatever is left of its group (background jobs, a fork bomb's
    // children that were forked while the signal was delivered) is killed until the group is empty:
    // background jobs do not outlive their command. Nor do processes that left its group (setsid, daemons):
    // by then they are orphans of PID 1, so every child of PID 1 but the sandbox's own `sleep` goes, with its
    // group (a detached writer would otherwise fill the disk between two commands, unwatched).
    const wrapper = [
      `timeout -s TERM -k ${KILL_AFTER_S}s ${timeoutS}s bash -lc "$0" & pg=$!`,
      'wait $pg; rc=$?',
      'i=0; while [ $i -lt 100 ] && kill -9 -- -$pg 2>/dev/null; do i=$((i+1)); sleep 0.05; done',
      ORPHAN_SWEEP,
      'exit $rc',
    ].join('\n');
    const disk = { exceeded: false, bytes: 0 };
    const watch = this.diskWatchdog ? this.diskWatch(disk) : undefined;
    const before = this.diskBytes;
    const r = await this.rawExec(['bash', '-c', wrapper, cmd], timeoutS + KILL_AFTER_S, opts, watch);
    const elapsedS = (Date.now() - t0) / 1000;
    if (this.diskWatchdog) {
      // once more at the end: a fast writer finished between two measurements is caught, and the next command is not blamed
      const bytes = await this.writtenBytes().catch(() => this.diskBytes);
      this.diskBytes = bytes;
      if (bytes > this.limits.diskMiB * 2 ** 20 && bytes > before + DISK_GROWTH_SLACK) {
        disk.exceeded = true;
        disk.bytes = bytes;
      }
    }
    if (r.exit === null && !r.hostTimedOut) throw await this.dead('exec ended without an exit code');
    if (r.exit === null || r.exit >= 128) {
      // did the container itself die under us (OOM of PID 1, removed, the engine restarted)? Any signal's exit code,
      // not only SIGKILL's: a command stopped with its container (143 and others) is no result of the agent's, and a
      // patch diff failing so would be graded diff_failed instead of being retried
      if (!(await this.isRunning())) throw await this.dead(`while running ${JSON.stringify(cmd.slice(0, 80))}`);
    }
    const timedOut = !disk.exceeded && (r.hostTimedOut || r.exit === 124 || (r.exit === 137 && elapsedS >= timeoutS));
    let stderr = r.stderr.text();
    let oomKilled: boolean | undefined;
    if (r.exit === 137 && !timedOut && !disk.exceeded) {
      oomKilled = await this.checkOom();
      if (oomKilled) stderr += `\n[sandbox] killed: out of memory (limit ${Math.round(this.limits.memoryBytes / 2 ** 20)} MiB)\n`;
    }
    if (timedOut) stderr += `\n[sandbox] timed out after ${timeoutS} s; process group killed\n`;
    const diskFull = disk.exceeded || (this.limits.diskMiB > 0 && DISK_FULL.test(stderr));
    if (disk.exceeded) stderr += `\n[sandbox] killed: the sandbox wrote ${Math.round(disk.bytes / 2 ** 20)} MiB, past its disk limit of ${this.limits.diskMiB} MiB\n`;
    else if (diskFull) stderr += `\n[sandbox] the sandbox's disk limit of ${this.limits.diskMiB} MiB is reached\n`;
    const res: DockerExecResult = {
      exit: r.exit ?? -1,
      stdout: r.stdout.text(),
      stderr,
      timedOut,
      truncated: r.stdout.truncated || r.stderr.truncated,
    };
    const omitted = omittedOf(r.stdout, r.stderr);
    if (omitted) res.omitted = omitted;
    if (diskFull) res.diskLimitExceeded = true;
    if (oomKilled !== undefined) res.oomKilled = oomKilled;
    return res;
  }

  /** Reads the memory cgroup's oom_kill counter (v1 memory.oom_control or v2 memory.events); true when it grew. */
  private async checkOom(): Promise<boolean> {
    const r = await this.rawExec(['sh', '-c', 'cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events 2>/dev/null'], 10, { cwd: '/' }).catch(
      () => undefined,
    );
    const m = r && /oom_kill (\d+)/.exec(r.stdout.text());
    if (!m) return false;
    const n = Number(m[1]);
    const grew = n > (this.oomKills ?? 0);
    this.oomKills = n;
    return grew;
  }

  async readFile(path: string): Promise<string> {
    const abs = sandboxPath(path);
    let stream: NodeJS.ReadableStream;
    try {
      stream = await this.container.getArchive({ path: abs });
    } catch (e) {
      const err = e as DockerErr;
      if (err.statusCode === 404 && !(await this.isRunning())) throw await this.dead(`readFile ${abs}`);
      if (err.statusCode === 404) throw new Error(`readFile ${abs}: no such file`);
      if (isEngineFailure(e)) throw unavailable(`sandbox ${this.id}: readFile ${abs}`, e);
      throw new Error(`readFile ${abs}: ${err.message ?? String(e)}`);
    }
    return (await firstFileFromTar(stream, `readFile ${abs}`)).toString('utf8');
  }

  async writeFile(path: string, content: string): Promise<void> {
    const abs = sandboxPath(path);
    await this.putFiles([{ path: abs.slice(1), content }]);
  }

  async copyIn(files: TarFile[], destDir: string): Promise<void> {
    const dest = checkDestDir(destDir);
    const entries = files.map((f) => ({ ...f, path: posix.join(dest, checkEntryName(f.path)).slice(1) }));
    await this.putFiles(entries);
  }

  /** Extracted at `/` so missing parent directories are created and existing ones keep their modes. */
  private async putFiles(files: TarFile[]): Promise<void> {
    const tarball = await buildTar(files);
    try {
      await this.container.putArchive(tarball, { path: '/' });
    } catch (e) {
      if (isGone(e) && !(await this.isRunning())) throw await this.dead('putArchive');
      if (isEngineFailure(e) && !(await this.isRunning())) throw unavailable(`sandbox ${this.id}: putArchive`, e);
      // e.g. the disk limit: the agent's doing
      throw new Error(`writing ${files.map((f) => '/' + f.path).join(', ')}: ${(e as Error).message}`);
    }
  }

  async diff(excludeGlobs: string[] = [], opts: { maxBytes?: number } = {}): Promise<string> {
    return computePatch((c, t, o) => this.exec(c, t, o), excludeGlobs, opts.maxBytes ?? DEFAULT_MAX_PATCH_BYTES);
  }

  async isRunning(): Promise<boolean> {
    return this.container
      .inspect()
      .then((i) => i.State.Running)
      .catch(() => false);
  }

  /** Removes the container; after engine errors it retries a few times, then leaves it to the next sweep. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (let attempt = 0; ; attempt++) {
      try {
        await removeContainer(this.docker, this.container.id);
        return;
      } catch (e) {
        if (attempt >= 2) {
          pendingRemovals.set(this.container.id, this.docker);
          console.warn(`[sandbox] removing ${this.id} failed (${(e as Error).message}); the sweep retries`);
          return;
        }
        await new Promise((r) => setTimeout(r, 500 * 2 ** attempt));
      }
    }
  }
}

export interface SweepOptions {
  docker?: Docker;
  /** this host's owner label; default os.hostname() */
  host?: string;
  now?: number;
}

export interface SweepResult {
  deadOwner: string[];
  expired: string[];
  /** removals that had failed before and succeeded now */
  retried: string[];
  failed: string[];
}

/**
 * Removes leftover sandboxes: those whose owner process on this host is gone (a SIGKILLed worker), those
 * past their expiry (any owner: a host that never came back), and those whose removal failed before.
 */
export async function sweepSandboxes(opts: SweepOptions = {}): Promise<SweepResult> {
  const docker = opts.docker ?? defaultDocker();
  const out: SweepResult = { deadOwner: [], expired: [], retried: [], failed: [] };
  for (const [id, d] of [...pendingRemovals]) {
    if (d !== docker) continue;
    try {
      await removeContainer(docker, id);
      pendingRemovals.delete(id);
      out.retried.push(id);
    } catch {
      out.failed.push(id);
    }
  }
  const list = await docker.listContainers({ all: true, filters: { label: [`${SANDBOX_LABEL}=1`] } }).catch((e) => {
    throw unavailable('listing sandboxes', e);
  });
  for (const c of list) {
    const why = sweepReason(c.Labels ?? {}, c.Created * 1000, opts.now ?? Date.now(), opts.host && hostLabel(opts.host));
    if (!why) continue;
    try {
      await removeContainer(docker, c.Id);
      out[why].push(c.Id);
    } catch {
      pendingRemovals.set(c.Id, docker);
      out.failed.push(c.Id);
    }
  }
  return out;
}

/** Force-removes sandbox containers left behind (all of them, or those matching extra labels). Returns how many. */
export async function removeSandboxContainers(opts: { docker?: Docker; labels?: Record<string, string>; olderThanS?: number } = {}): Promise<number> {
  const docker = opts.docker ?? defaultDocker();
  const label = [`${SANDBOX_LABEL}=1`, ...Object.entries(opts.labels ?? {}).map(([k, v]) => `${k}=${v}`)];
  const list = await docker.listContainers({ all: true, filters: { label } });
  const cutoff = Date.now() / 1000 - (opts.olderThanS ?? 0);
  const victims = list.filter((c) => opts.olderThanS === undefined || c.Created <= cutoff);
  await Promise.all(victims.map((c) => removeContainer(docker, c.Id).catch(() => undefined)));
  return victims.length;
}
