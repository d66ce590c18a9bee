// Docker sandbox backend (DESIGN §3) over dockerode: network none, CPU/memory/pids limits, all
// capabilities dropped, no-new-privileges, never a host mount; tini as PID 1 reaps orphans.
import Docker from 'dockerode';
import { posix } from 'node:path';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { DEFAULT_LIMITS, type ExecOptions, type ExecResult, type Sandbox, type SandboxBackend, type SandboxLimits } from '../../lib/sandbox.ts';
import {
  CappedSink,
  DEFAULT_MAX_OUTPUT,
  DIFF_CMD,
  SANDBOX_LABEL,
  SandboxDeadError,
  TESTBED,
  buildTar,
  checkDestDir,
  checkEntryName,
  filterPatch,
  firstFileFromTar,
  sandboxPath,
  type TarFile,
} from './common.ts';

export { SandboxDeadError, SandboxPathError } from './common.ts';

/** Extra grace the host waits past `timeoutS` before giving up on an exec stream itself. */
const HOST_GRACE_S = 30;
/** After `timeout` sends TERM to the process group, KILL follows this many seconds later. */
const KILL_AFTER_S = 2;

export interface DockerExecResult extends ExecResult {
  /** the memory cgroup's OOM killer fired during this command */
  oomKilled?: boolean;
}

interface DockerErr {
  statusCode?: number;
  message?: string;
}

function isGone(e: unknown): boolean {
  const err = e as DockerErr;
  return err?.statusCode === 404 || (err?.statusCode === 409 && /not running|is paused|restarting/i.test(err.message ?? ''));
}

let dockerSingleton: Docker | undefined;
export function defaultDocker(): Docker {
  dockerSingleton ??= new Docker();
  return dockerSingleton;
}

export interface DockerBackendOptions {
  docker?: Docker;
  /** labels added to every container this backend starts */
  labels?: Record<string, string>;
}

export class DockerBackend implements SandboxBackend {
  readonly name = 'docker' as const;
  private readonly docker: Docker;
  private readonly labels: Record<string, string>;
  constructor(opts: DockerBackendOptions = {}) {
    this.docker = opts.docker ?? defaultDocker();
    this.labels = opts.labels ?? {};
  }

  async start(image: string, limits: Partial<SandboxLimits> = {}, labels: Record<string, string> = {}): Promise<DockerSandbox> {
    const l: SandboxLimits = { ...DEFAULT_LIMITS, ...limits };
    if (!(l.cpus > 0)) throw new Error(`limits.cpus must be > 0, got ${l.cpus}`);
    if (!(l.memoryBytes >= 8 << 20)) throw new Error(`limits.memoryBytes must be >= 8 MiB, got ${l.memoryBytes}`);
    if (!(l.pids >= 16)) throw new Error(`limits.pids must be >= 16, got ${l.pids}`);
    const name = `swerl-sbx-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
    let container: Docker.Container;
    try {
      container = await this.docker.createContainer({
        name,
        Image: image,
        Cmd: ['sleep', 'infinity'],
        WorkingDir: TESTBED,
        NetworkDisabled: true,
        Labels: {
          ...this.labels,
          ...labels,
          [SANDBOX_LABEL]: '1',
          'swerl.host': hostname(),
          'swerl.pid': String(process.pid),
          'swerl.created': new Date().toISOString(),
        },
        HostConfig: {
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
        },
      });
    } catch (e) {
      const err = e as DockerErr;
      if (err.statusCode === 404) throw new Error(`image ${JSON.stringify(image)} not found (build it with \`swerl images build\`)`);
      throw new Error(`creating a sandbox from image ${JSON.stringify(image)} failed: ${err.message ?? String(e)}`);
    }
    try {
      await container.start();
    } catch (e) {
      await container.remove({ force: true }).catch(() => undefined);
      throw new Error(`starting sandbox ${name} (image ${image}) failed: ${(e as Error).message}`);
    }
    return new DockerSandbox(this.docker, container, name, l);
  }
}

export class DockerSandbox implements Sandbox {
  private oomKills: number | undefined;
  private stopped = false;
  constructor(
    private readonly docker: Docker,
    private readonly container: Docker.Container,
    readonly id: string,
    readonly limits: SandboxLimits,
  ) {}

  private async dead(detail: string): Promise<SandboxDeadError> {
    if (this.stopped) return new SandboxDeadError(this.id, 'stopped');
    try {
      const s = (await this.container.inspect()).State;
      const why = s.OOMKilled ? 'out of memory' : `exit code ${s.ExitCode}`;
      return new SandboxDeadError(this.id, `${detail}; container ${s.Status} (${why})`);
    } catch {
      return new SandboxDeadError(this.id, `${detail}; container removed`);
    }
  }

  /** Runs one exec without the timeout wrapper; used for bookkeeping. */
  private async rawExec(argv: string[], timeoutS: number, opts: ExecOptions = {}): Promise<{ exit: number | null; stdout: CappedSink; stderr: CappedSink; hostTimedOut: boolean }> {
    if (this.stopped) throw new SandboxDeadError(this.id, 'stopped');
    let exec: Docker.Exec;
    try {
      exec = await this.container.exec({
        Cmd: argv,
        AttachStdout: true,
        AttachStderr: true,
        AttachStdin: false,
        Tty: false,
        WorkingDir: opts.cwd ?? TESTBED,
        Env: Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`),
      });
    } catch (e) {
      if (isGone(e)) throw await this.dead('exec could not start');
      throw e;
    }
    const cap = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
    const stdout = new CappedSink(cap);
    const stderr = new CappedSink(cap);
    let stream: NodeJS.ReadWriteStream;
    try {
      stream = (await exec.start({ hijack: true, stdin: false })) as NodeJS.ReadWriteStream;
    } catch (e) {
      if (isGone(e)) throw await this.dead('exec could not start');
      throw e;
    }
    this.docker.modem.demuxStream(stream, stdout, stderr);
    let hostTimedOut = false;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        hostTimedOut = true;
        (stream as unknown as { destroy?: () => void }).destroy?.();
        resolve();
      }, (timeoutS + HOST_GRACE_S) * 1000);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      stream.on('end', done);
      stream.on('close', done);
      stream.on('error', done);
    });
    let exit: number | null = null;
    try {
      const info = await exec.inspect();
      exit = info.Running ? null : info.ExitCode;
    } catch (e) {
      if (isGone(e)) throw await this.dead('exec lost');
      throw e;
    }
    return { exit, stdout, stderr, hostTimedOut };
  }

  async exec(cmd: string, timeoutS: number, opts: ExecOptions = {}): Promise<DockerExecResult> {
    if (!(timeoutS > 0)) throw new Error(`timeoutS must be > 0, got ${timeoutS}`);
    const t0 = Date.now();
    // `timeout` makes its own process group (pgid = its pid) and signals all of it at the limit.
    // When the command ends, whatever is left of its group (background jobs, a fork bomb's
    // children that were forked while the signal was delivered) is killed until the group is empty:
    // background jobs do not outlive their command.
    const wrapper = [
      `timeout -s TERM -k ${KILL_AFTER_S}s ${timeoutS}s bash -lc "$0" & pg=$!`,
      'wait $pg; rc=$?',
      'i=0; while [ $i -lt 100 ] && kill -9 -- -$pg 2>/dev/null; do i=$((i+1)); sleep 0.05; done',
      'exit $rc',
    ].join('\n');
    const r = await this.rawExec(['bash', '-c', wrapper, cmd], timeoutS + KILL_AFTER_S, opts);
    const elapsedS = (Date.now() - t0) / 1000;
    if (r.exit === null && !r.hostTimedOut) throw await this.dead('exec ended without an exit code');
    if (r.exit === null || r.exit === 137) {
      // did the container itself die under us (OOM of PID 1, removed)?
      const alive = await this.container
        .inspect()
        .then((i) => i.State.Running)
        .catch(() => false);
      if (!alive) throw await this.dead(`while running ${JSON.stringify(cmd.slice(0, 80))}`);
    }
    const timedOut = r.hostTimedOut || r.exit === 124 || (r.exit === 137 && elapsedS >= timeoutS);
    let stderr = r.stderr.text();
    let oomKilled: boolean | undefined;
    if (r.exit === 137 && !timedOut) {
      oomKilled = await this.checkOom();
      if (oomKilled) stderr += `\n[sandbox] killed: out of memory (limit ${Math.round(this.limits.memoryBytes / 2 ** 20)} MiB)\n`;
    }
    if (timedOut) stderr += `\n[sandbox] timed out after ${timeoutS} s; process group killed\n`;
    const res: DockerExecResult = {
      exit: r.exit ?? -1,
      stdout: r.stdout.text(),
      stderr,
      timedOut,
      truncated: r.stdout.truncated || r.stderr.truncated,
    };
    if (oomKilled !== undefined) res.oomKilled = oomKilled;
    return res;
  }

  /** Reads the memory cgroup's oom_kill counter (v1 memory.oom_control or v2 memory.events); true when it grew. */
  private async checkOom(): Promise<boolean> {
    const r = await this.rawExec(
      ['sh', '-c', 'cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events 2>/dev/null'],
      10,
      { cwd: '/' },
    ).catch(() => undefined);
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
      stream = (await this.container.getArchive({ path: abs })) as unknown as NodeJS.ReadableStream;
    } catch (e) {
      const err = e as DockerErr;
      if (err.statusCode === 404 && !(await this.isRunning())) throw await this.dead(`readFile ${abs}`);
      if (err.statusCode === 404) throw new Error(`readFile ${abs}: no such file`);
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
      throw new Error(`writing ${files.map((f) => '/' + f.path).join(', ')}: ${(e as Error).message}`);
    }
  }

  async diff(excludeGlobs: string[] = []): Promise<string> {
    const r = await this.exec(DIFF_CMD, 60, { cwd: TESTBED, maxOutputBytes: 64 << 20 });
    if (r.exit !== 0) throw new Error(`diff in ${TESTBED} failed (exit ${r.exit}): ${r.stderr.slice(0, 500)}`);
    if (r.truncated) throw new Error(`diff in ${TESTBED} is larger than 64 MiB`);
    return filterPatch(r.stdout, excludeGlobs);
  }

  async isRunning(): Promise<boolean> {
    return this.container
      .inspect()
      .then((i) => i.State.Running)
      .catch(() => false);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.container.remove({ force: true, v: true }).catch((e: DockerErr) => {
      if (e?.statusCode !== 404 && !(e?.statusCode === 409 && /already in progress/.test(e.message ?? ''))) throw e;
    });
  }
}

/** Force-removes sandbox containers left behind (all of them, or those matching extra labels). Returns how many. */
export async function removeSandboxContainers(opts: { docker?: Docker; labels?: Record<string, string>; olderThanS?: number } = {}): Promise<number> {
  const docker = opts.docker ?? defaultDocker();
  const label = [`${SANDBOX_LABEL}=1`, ...Object.entries(opts.labels ?? {}).map(([k, v]) => `${k}=${v}`)];
  const list = await docker.listContainers({ all: true, filters: { label } });
  const cutoff = Date.now() / 1000 - (opts.olderThanS ?? 0);
  const victims = list.filter((c) => opts.olderThanS === undefined || c.Created <= cutoff);
  await Promise.all(victims.map((c) => docker.getContainer(c.Id).remove({ force: true, v: true }).catch(() => undefined)));
  return victims.length;
}
