// Starts and stops a local Temporal dev server (`temporal server start-dev`) on a SQLite file.
// Used by `swerl server`, `swerl train` (embedded mode) and the tests. Never lets the SDK download a server.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { existsSync, mkdirSync, openSync, closeSync, readFileSync, readdirSync, readlinkSync, statSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Connection } from '@temporalio/client';

/** Search attributes the training and evaluation workflows upsert (DESIGN §1). */
export const SEARCH_ATTRIBUTES = {
  RlIteration: 'Int',
  RlMeanReward: 'Double',
  RlPhase: 'Keyword',
  RlEvalPass1: 'Double',
  EvalPass1: 'Double',
  EvalDone: 'Int',
  SynthValidated: 'Int',
  SynthPhase: 'Keyword',
} as const;

export interface DevServerOptions {
  /** directory holding temporal.sqlite and temporal.log */
  dir: string;
  /** frontend gRPC port; 0 picks a free one */
  port?: number;
  /** web UI port; 0 picks a free one; null disables the UI (--headless) */
  uiPort?: number | null;
  ip?: string;
  namespace?: string;
  readyTimeoutMs?: number;
}

export interface DevServer {
  address: string;
  port: number;
  uiUrl: string | null;
  dbFile: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** Path of the Temporal CLI: .tools/bin/temporal (scripts/ensure-temporal.sh), else `temporal` on PATH. */
export function temporalBinary(): string {
  const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
  const local = join(root, '.tools', 'bin', 'temporal');
  if (existsSync(local)) return local;
  return 'temporal';
}

/** A port or database already held by another Temporal server (or any process): refused, with the pid. */
export class ServerInUseError extends Error {
  constructor(
    message: string,
    readonly pid: number | null,
  ) {
    super(message);
    this.name = 'ServerInUseError';
  }
}

/** The command line of a process, or '' (gone, or not Linux). */
function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    return '';
  }
}

/** Pids whose open files include one of `targets` (readlink of /proc/<pid>/fd/*; Linux). */
function pidsHolding(targets: Set<string>): number[] {
  const found: number[] = [];
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return found;
  }
  for (const p of pids) {
    if (Number(p) === process.pid) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${p}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        if (targets.has(readlinkSync(`/proc/${p}/fd/${fd}`))) {
          found.push(Number(p));
          break;
        }
      } catch {
        // closed meanwhile
      }
    }
  }
  return found;
}

/** Is `pid` `ancestor` or one of its descendants (a CLI that wraps the server binary)? */
function isSelfOrDescendant(pid: number, ancestor: number | undefined): boolean {
  for (let p = pid, hops = 0; p > 1 && hops < 16; hops++) {
    if (p === ancestor) return true;
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      p = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      return false;
    }
  }
  return false;
}

/** The pid listening on a TCP port (from /proc/net/tcp{,6}), or null when none or unknown. */
export function listenerPid(port: number): number | null {
  const inodes = new Set<string>();
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      // local_address is HEXIP:HEXPORT; state 0A is LISTEN; column 9 is the inode
      if (cols.length > 9 && cols[3] === '0A' && parseInt(cols[1]!.split(':')[1]!, 16) === port) inodes.add(`socket:[${cols[9]}]`);
    }
  }
  if (inodes.size === 0) return null;
  return pidsHolding(inodes)[0] ?? null;
}

async function portInUse(port: number, host: string): Promise<boolean> {
  return new Promise((res) => {
    const srv = createServer();
    srv.once('error', () => res(true));
    srv.listen(port, host, () => srv.close(() => res(false)));
  });
}

/**
 * Refuses to start over a server that is already there (e.g. an orphan of a killed `swerl server`): the
 * frontend or UI port taken, or the SQLite file open in another process. The message names the pid.
 */
async function checkNotInUse(ports: { port: number; what: string }[], ip: string, dbFile: string): Promise<void> {
  const holders = existsSync(dbFile) ? pidsHolding(new Set([dbFile])) : [];
  if (holders.length) {
    const pid = holders[0]!;
    throw new ServerInUseError(
      `${dbFile} is in use by pid ${pid} (${commandLine(pid) || 'unknown command'}): a Temporal server already runs on it; stop it with \`kill ${pid}\` or use another --dir`,
      pid,
    );
  }
  for (const { port, what } of ports) {
    if (!(await portInUse(port, ip))) continue;
    const pid = listenerPid(port);
    throw new ServerInUseError(
      pid
        ? `${what} port ${port} is in use by pid ${pid} (${commandLine(pid) || 'unknown command'}); stop it with \`kill ${pid}\` or pick another port`
        : `${what} port ${port} on ${ip} is in use; pick another port`,
      pid,
    );
  }
}

/** `setpriv --pdeathsig` (util-linux): the dev server gets SIGTERM when its parent dies, even by SIGKILL. */
function parentDeathWrapper(): string[] {
  for (const p of ['/usr/bin/setpriv', '/bin/setpriv']) if (existsSync(p)) return [p, '--pdeathsig', 'SIGTERM', '--'];
  return [];
}

export async function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', rej);
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => res(port));
    });
  });
}

/** The ports picked free were taken by someone else before the server bound them (a race with the kernel's
 * ephemeral ports): starting again with fresh ports is safe. */
class PortRaceError extends Error {}

export async function startDevServer(opts: DevServerOptions): Promise<DevServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startDevServerOnce(opts);
    } catch (e) {
      if (!(e instanceof PortRaceError) || attempt >= 3) throw e;
    }
  }
}

/** The `temporal server start-dev` arguments, and the web UI's address (null when headless). */
async function devServerArgs(opts: DevServerOptions, ip: string, port: number, dbFile: string): Promise<{ args: string[]; uiUrl: string | null }> {
  const httpPort = await freePort(ip);
  const metricsPort = await freePort(ip);
  const args = ['server', 'start-dev', '--db-filename', dbFile, '--ip', ip, '--port', String(port)];
  args.push('--http-port', String(httpPort), '--metrics-port', String(metricsPort), '--log-level', 'warn');
  let uiUrl: string | null = null;
  if (opts.uiPort === null) {
    args.push('--headless');
  } else {
    const uiPort = opts.uiPort && opts.uiPort > 0 ? opts.uiPort : await freePort(ip);
    args.push('--ui-port', String(uiPort), '--ui-disable-news-fetch');
    uiUrl = `http://${ip}:${uiPort}`;
  }
  if (opts.namespace && opts.namespace !== 'default') args.push('--namespace', opts.namespace);
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) args.push('--search-attribute', `${name}=${type}`);
  return { args, uiUrl };
}

/** The server a probe reached is ready: our search attributes registered, a listing answered, the port ours. */
async function probeReady(address: string, namespace: string, port: number, child: ChildProcess): Promise<{ ready: boolean; impostor: number | null; why: string }> {
  let why = 'search attributes not registered yet';
  try {
    // 5 s, not 1: on a host loaded past its cores a slow answer is not yet a dead server
    const conn = await Connection.connect({ address, connectTimeout: 5000 });
    try {
      const sa = await conn.operatorService.listSearchAttributes({ namespace });
      const names = Object.keys(sa.customAttributes ?? {});
      // the frontend's namespace cache lags the namespace's creation on a loaded host: a listing resolves through it
      if (Object.keys(SEARCH_ATTRIBUTES).every((n) => names.includes(n)) && (await conn.workflowService.listWorkflowExecutions({ namespace, pageSize: 1 }))) {
        // the probe may have reached someone else's server: ready only if ours is alive and holds the port
        const holder = listenerPid(port);
        if (holder === null || isSelfOrDescendant(holder, child.pid)) return { ready: true, impostor: null, why: '' };
        return { ready: false, impostor: holder, why: `port held by pid ${holder}` };
      }
    } finally {
      await conn.close();
    }
  } catch (e) {
    why = (e as Error).message.split('\n')[0]!; // not ready yet
  }
  return { ready: false, impostor: null, why };
}

/** The last lines of what the server wrote since `from` (for an error that says why it never became ready). */
function logTail(logFile: string, from: number, lines = 8): string {
  const said = existsSync(logFile) ? readFileSync(logFile).subarray(from).toString('utf8').trim() : '';
  return said ? said.split('\n').slice(-lines).join('\n') : '(nothing)';
}

async function startDevServerOnce(opts: DevServerOptions): Promise<DevServer> {
  const dir = resolve(opts.dir);
  mkdirSync(dir, { recursive: true });
  const ip = opts.ip ?? '127.0.0.1';
  const port = opts.port && opts.port > 0 ? opts.port : await freePort(ip);
  const dbFile = join(dir, 'temporal.sqlite');
  const { args, uiUrl } = await devServerArgs(opts, ip, port, dbFile);

  await checkNotInUse([{ port, what: 'frontend' }, ...(uiUrl ? [{ port: Number(new URL(uiUrl).port), what: 'web UI' }] : [])], ip, dbFile);
  const logFile = join(dir, 'temporal.log');
  const logStart = existsSync(logFile) ? statSync(logFile).size : 0;
  const logFd = openSync(logFile, 'a');
  // no orphan: the server dies with whoever started it (setpriv execs it, so child.pid is the server's)
  const [cmd, ...pre] = [...parentDeathWrapper(), temporalBinary()];
  const child = spawn(cmd!, [...pre, ...args], { stdio: ['ignore', logFd, logFd], detached: false });
  closeSync(logFd);
  let exited: number | string | null = null;
  child.on('exit', (code, signal) => {
    exited = code ?? signal ?? 'exit';
  });
  child.on('error', (err) => {
    exited = String(err);
  });

  const address = `${ip}:${port}`;
  const timeoutMs = opts.readyTimeoutMs ?? 120_000;
  const deadline = Date.now() + timeoutMs;
  const namespace = opts.namespace ?? 'default';
  let lastProbe: string;
  for (;;) {
    if (exited !== null) {
      const said = readFileSync(logFile).subarray(logStart).toString('utf8');
      const msg = `temporal dev server exited (${exited}); see ${logFile}`;
      throw /bind: address already in use/.test(said) ? new PortRaceError(msg) : new Error(msg);
    }
    const { ready, impostor, why } = await probeReady(address, namespace, port, child);
    if (ready && exited === null) break;
    lastProbe = why;
    if (impostor !== null && exited === null) {
      child.kill('SIGKILL');
      throw new ServerInUseError(
        `port ${port} answered from pid ${impostor} (${commandLine(impostor) || 'unknown'}), not from the server started (pid ${child.pid}); stop it with \`kill ${impostor}\``,
        impostor,
      );
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(
        `temporal dev server at ${address} not ready after ${timeoutMs} ms (last probe: ${lastProbe}; load ${loadavg()[0]!.toFixed(1)}); see ${logFile}, which ends:\n${logTail(logFile, logStart)}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }

  const stop = async (): Promise<void> => {
    if (exited !== null) return;
    const done = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await done;
    clearTimeout(t);
  };
  return { address, port, uiUrl, dbFile, process: child, stop };
}
