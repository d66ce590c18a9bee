// A Docker engine of a test's own, so the test may restart it and fill its disk without touching the shared
// one: its own socket, data root, exec root and pid file. The data root is a btrfs file system in a
// preallocated loop file (btrfs has per-container quotas, so `--storage-opt size` works, and what a sandbox
// writes lands in the file, never on the host's free space). Needs root, loop devices and mkfs.btrfs
// (btrfs-progs, installed by scripts/ensure-docker.sh).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import Docker from 'dockerode';

export interface PrivateDockerd {
  /** the value for DOCKER_HOST */
  host: string;
  socket: string;
  docker: Docker;
  dataRoot: string;
  /** copies images from the shared engine (docker save | docker load) */
  loadImages(names: string[]): Promise<void>;
  /** stops the engine (its containers die with it) and starts it again on the same data root */
  restart(): Promise<void>;
  /** stops the engine, leaving its data root */
  down(): Promise<void>;
  /** starts it again */
  up(): Promise<void>;
  stop(): Promise<void>;
}

function sh(cmd: string, what: string): string {
  const r = spawnSync('bash', ['-c', `set -euo pipefail; ${cmd}`], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status}): ${(r.stderr || r.stdout).trim().slice(-2000)}`);
  return r.stdout;
}

async function waitPing(docker: Docker, child: ChildProcess, log: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`private dockerd exited (${child.exitCode}); see ${log}`);
    try {
      await docker.ping();
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`private dockerd did not answer in 60 s; see ${log}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/** Why a private engine cannot run here, or null. */
export function privateDockerdUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'needs root (loop mounts, dockerd)';
  for (const bin of ['dockerd', 'mkfs.btrfs', 'losetup', 'fallocate']) {
    if (spawnSync('bash', ['-c', `command -v ${bin}`]).status !== 0) return `${bin} missing (bash scripts/setup.sh --test installs it)`;
  }
  return null;
}

export async function startPrivateDockerd(opts: { sizeMiB?: number } = {}): Promise<PrivateDockerd> {
  const why = privateDockerdUnavailable();
  if (why) throw new Error(`a private docker engine cannot run here: ${why}`);
  const dir = mkdtempSync('/tmp/swerl-dockerd-');
  const img = join(dir, 'disk.img');
  const dataRoot = join(dir, 'root');
  const socket = join(dir, 'docker.sock');
  const log = join(dir, 'dockerd.log');
  const config = join(dir, 'daemon.json');
  writeFileSync(config, '{}');
  sh(`fallocate -l ${opts.sizeMiB ?? 3072}M ${img} && mkfs.btrfs -q ${img} && mkdir -p ${dataRoot} && mount -o loop ${img} ${dataRoot}`, 'making the btrfs data root');
  const args = [
    '-H',
    `unix://${socket}`,
    '--data-root',
    dataRoot,
    '--exec-root',
    join(dir, 'exec'),
    '--pidfile',
    join(dir, 'docker.pid'),
    '--config-file',
    config,
    '--storage-driver',
    'btrfs',
    '--iptables=false',
    '--ip-masq=false',
    '--ip6tables=false',
    '--bridge=none',
    '--log-level',
    'warn',
  ];
  const docker = new Docker({ socketPath: socket });
  let child: ChildProcess;
  const launch = async () => {
    const fd = openSync(log, 'a');
    child = spawn('dockerd', args, { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    await waitPing(docker, child, log);
  };
  const halt = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(t);
  };
  await launch();
  return {
    host: `unix://${socket}`,
    socket,
    docker,
    dataRoot,
    async loadImages(names) {
      for (const n of names) sh(`docker save ${n} | docker -H unix://${socket} load -q`, `loading ${n}`);
    },
    async restart() {
      await halt();
      await launch();
    },
    down: halt,
    up: launch,
    async stop() {
      await halt();
      spawnSync('umount', ['-l', dataRoot]);
      if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    },
  };
}
