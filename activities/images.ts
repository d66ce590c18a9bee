// Task images without a registry (DESIGN §3): a Debian base from debootstrap + `docker import`,
// then one image per task with the repository at /testbed committed in git. Names carry a content
// hash of their recipe, so a changed recipe rebuilds and an unchanged one is reused.
import Docker from 'dockerode';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { defaultDocker, imageExists } from '../services/docker.ts';
import { buildTar } from './sandbox/common.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { mapInLanes } from '../lib/pool.ts';

export const BASE_RECIPE = {
  tool: 'debootstrap',
  variant: 'minbase',
  suite: 'bookworm',
  include: ['python3', 'python3-pytest', 'git'],
  changes: ['ENV LANG=C.UTF-8', 'ENV PYTHONDONTWRITEBYTECODE=1', 'CMD ["/bin/bash"]'],
} as const;

/** The `environment` a task built from `source_tarball` may name: what BASE_RECIPE installs, and nothing else. */
export const BASE_ENVIRONMENT = 'debian-bookworm-python3-pytest';

const sha = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');

export function baseImageName(): string {
  return `swerl-base:${sha(JSON.stringify(BASE_RECIPE)).slice(0, 12)}`;
}

/** Scratch files agents and test runs leave that must never enter a patch. */
const GLOBAL_GITIGNORE = ['__pycache__/', '*.pyc', '.pytest_cache/', '*.egg-info/', ''].join('\n');

export function taskDockerfile(base: string): string {
  return [
    `FROM ${base}`,
    // ADD extracts a local tar.gz
    'ADD repo.tar.gz /testbed/',
    'WORKDIR /testbed',
    `RUN printf '%s' '${GLOBAL_GITIGNORE.replace(/\n/g, '\\n')}' > /etc/gitignore \\`,
    ' && git config --system core.excludesFile /etc/gitignore \\',
    ' && git config --system user.name swerl && git config --system user.email swerl@localhost \\',
    ' && git config --system init.defaultBranch main && git config --system advice.detachedHead false \\',
    ' && git init -q && git add -A && git commit -q --no-verify -m base',
    '',
  ].join('\n');
}

const tarballHashes = new Map<string, { mtimeMs: number; hash: string }>();
async function fileHash(path: string): Promise<string> {
  const st = await stat(path);
  const c = tarballHashes.get(path);
  if (c && c.mtimeMs === st.mtimeMs) return c.hash;
  const hash = sha(await readFile(path));
  tarballHashes.set(path, { mtimeMs: st.mtimeMs, hash });
  return hash;
}

/** Docker repository names are lower case. */
function repoName(instanceId: string): string {
  return `swerl-task-${instanceId.toLowerCase()}`;
}

/** The image a task runs in: its `image` as is, else `swerl-task-<id>:<hash of base + tarball + Dockerfile>`. */
export async function taskImageName(task: SweTask): Promise<string> {
  if (task.image) return task.image;
  if (!task.source_tarball) throw new Error(`task ${task.instance_id}: field image or source_tarball required`);
  if (task.environment !== undefined && task.environment !== BASE_ENVIRONMENT) {
    throw new Error(
      `task ${task.instance_id}: field environment is ${JSON.stringify(task.environment)}, but task images are built only on ${JSON.stringify(BASE_ENVIRONMENT)} (Debian bookworm with python3, python3-pytest and git): give the task an \`image\` that has what it needs`,
    );
  }
  const base = baseImageName();
  const h = sha(`${base}\n${await fileHash(task.source_tarball)}\n${taskDockerfile(base)}`).slice(0, 12);
  return `${repoName(task.instance_id)}:${h}`;
}

/** The Debian mirror apt is configured with (deb822 `URIs:` or one-line `deb URL bookworm`). */
export function aptMirror(): string {
  const files = ['/etc/apt/sources.list'];
  if (existsSync('/etc/apt/sources.list.d')) {
    for (const f of readdirSync('/etc/apt/sources.list.d')) if (/\.(list|sources)$/.test(f)) files.push(join('/etc/apt/sources.list.d', f));
  }
  for (const f of files) {
    if (!existsSync(f)) continue;
    const text = readFileSync(f, 'utf8');
    for (const m of text.matchAll(/^URIs:\s*(\S+)/gm)) if (!/security/.test(m[1]!)) return m[1]!;
    for (const m of text.matchAll(/^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+/gm)) if (!/security/.test(m[1]!)) return m[1]!;
  }
  return 'http://deb.debian.org/debian';
}

function run(cmd: string, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('bash', ['-c', `set -euo pipefail; ${cmd}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    let tail = '';
    const keep = (b: Buffer) => {
      tail = (tail + b.toString()).slice(-4000);
    };
    p.stdout.on('data', keep);
    p.stderr.on('data', keep);
    p.on('error', (e) => reject(new Error(`${what}: ${e.message}`)));
    p.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${what} failed (exit ${code}):\n${tail}`))));
  });
}

export interface BuildEvent {
  image: string;
  status: 'cached' | 'built';
  seconds: number;
}

/** Builds `swerl-base:<hash>` with debootstrap unless it exists. Needs root and debootstrap. */
export async function ensureBaseImage(opts: { docker?: Docker; log?: (s: string) => void } = {}): Promise<BuildEvent> {
  const docker = opts.docker ?? defaultDocker();
  const name = baseImageName();
  const t0 = Date.now();
  if (await imageExists(name, docker)) return { image: name, status: 'cached', seconds: 0 };
  const dir = await mkdtemp(join(tmpdir(), 'swerl-base-'));
  try {
    const mirror = aptMirror();
    opts.log?.(`debootstrap ${BASE_RECIPE.suite} from ${mirror} into ${dir}`);
    const rootfs = join(dir, 'rootfs');
    await run(`debootstrap --variant=${BASE_RECIPE.variant} --include=${BASE_RECIPE.include.join(',')} ${BASE_RECIPE.suite} '${rootfs}' '${mirror}'`, 'debootstrap');
    // smaller image: apt lists and caches are not needed at run time
    await run(`rm -rf '${rootfs}'/var/cache/apt/archives/*.deb '${rootfs}'/var/lib/apt/lists/*`, 'clean rootfs');
    const changes = BASE_RECIPE.changes.map((c) => `--change '${c}'`).join(' ');
    await run(`tar -C '${rootfs}' -c . | docker import ${changes} - '${name}'`, 'docker import');
  } finally {
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
  return { image: name, status: 'built', seconds: (Date.now() - t0) / 1000 };
}

/** Builds (or finds) the task's image; returns its name. */
export async function ensureTaskImage(task: SweTask, opts: { docker?: Docker } = {}): Promise<BuildEvent> {
  const docker = opts.docker ?? defaultDocker();
  const t0 = Date.now();
  const name = await taskImageName(task);
  if (await imageExists(name, docker)) return { image: name, status: 'cached', seconds: 0 };
  if (task.image) throw new Error(`task ${task.instance_id}: field image names ${JSON.stringify(task.image)}, which does not exist locally`);
  const base = baseImageName();
  if (!(await imageExists(base, docker))) throw new Error(`base image ${base} missing: run \`swerl images build\` first`);
  const context = await buildTar([
    { path: 'Dockerfile', content: taskDockerfile(base) },
    { path: 'repo.tar.gz', content: await readFile(task.source_tarball!) },
  ]);
  const stream = await docker.buildImage(Readable.from(context), { t: name, rm: true, forcerm: true, networkmode: 'none' });
  await new Promise<void>((resolve, reject) => {
    docker.modem.followProgress(stream, (err: Error | null, out: { error?: string; errorDetail?: { message?: string } }[]) => {
      const bad = out?.find((o) => o.error || o.errorDetail);
      if (err) reject(new Error(`building ${name}: ${err.message}`));
      else if (bad) reject(new Error(`building ${name}: ${bad.errorDetail?.message ?? bad.error}`));
      else resolve();
    });
  });
  return { image: name, status: 'built', seconds: (Date.now() - t0) / 1000 };
}

/** Base image, then every task's image (bounded parallelism). */
export async function buildImages(tasks: SweTask[], opts: { docker?: Docker; concurrency?: number; log?: (s: string) => void } = {}): Promise<BuildEvent[]> {
  const events: BuildEvent[] = [];
  if (tasks.some((t) => !t.image)) {
    const b = await ensureBaseImage(opts);
    opts.log?.(`${b.image} ${b.status} ${b.seconds.toFixed(1)} s`);
    events.push(b);
  }
  await mapInLanes(tasks, Math.max(1, opts.concurrency ?? 2), async (t) => {
    const e = await ensureTaskImage(t, opts);
    opts.log?.(`${e.image} ${e.status} ${e.seconds.toFixed(1)} s`);
    events.push(e);
  });
  return events;
}
