// The one artifact-store interface (DESIGN §2): trajectories, checkpoints, metrics and logs live here,
// at keys derived from (run, iteration, task, sample). Writes are atomic: temp file (or directory) + rename.
import { mkdir, readFile, rename, rm, stat, readdir, writeFile, copyFile, appendFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import { processAlive } from './process-identity.ts';

export interface ArtifactStore {
  readonly url: string;
  get(key: string): Promise<Buffer | null>;
  getJson<T>(key: string): Promise<T | null>;
  put(key: string, data: string | Uint8Array): Promise<void>;
  putJson(key: string, value: unknown): Promise<void>;
  /** copies a local file in under `key` */
  putFile(key: string, srcPath: string): Promise<void>;
  exists(key: string): Promise<boolean>;
  /** keys (files) under a prefix, recursively, sorted */
  list(prefix: string): Promise<string[]>;
  /** immediate child names under a prefix (files and directories), sorted */
  children(prefix: string): Promise<string[]>;
  /**
   * Writes a directory atomically: `build` fills a fresh temp directory, which is then renamed to `key`.
   * The directory exists under `key` only when complete. Returns false when `key` already existed.
   * Temp directories beside it that a killed writer on this host left behind are removed first.
   */
  putDir(key: string, build: (tmpDir: string) => Promise<void>): Promise<boolean>;
  /** a local directory path for `key` (for readers that need a path, e.g. Learner.load) */
  dirFor(key: string): string;
  /** appends one line (not atomic across machines; used for logs) */
  appendLine(key: string, line: string): Promise<void>;
}

export const keys = {
  run: (runId: string) => `runs/${runId}`,
  iteration: (runId: string, n: number) => `runs/${runId}/iter-${n}`,
  iterationConfig: (runId: string, n: number) => `runs/${runId}/iter-${n}/config.json`,
  batch: (runId: string, n: number) => `runs/${runId}/iter-${n}/batch.json`,
  trajectories: (runId: string, n: number) => `runs/${runId}/iter-${n}/traj`,
  trajectory: (runId: string, n: number, taskId: string, sample: number) => `runs/${runId}/iter-${n}/traj/${safeSegment(taskId)}/${sample}.json`,
  /** a fanned-out iteration's LearnerItem[] of one child workflow */
  learnerItems: (runId: string, n: number, part: number) => `runs/${runId}/iter-${n}/learner-items/${part}.json`,
  /** an async pump's group j of batch n: its LearnerItem[], summary and failures (DESIGN §10; the run recovers from these) */
  groups: (runId: string, n: number) => `runs/${runId}/iter-${n}/groups`,
  groupResult: (runId: string, n: number, j: number) => `runs/${runId}/iter-${n}/groups/${j}.json`,
  /** infrastructure failures of a rollout's attempts (the trajectory lists them once one attempt succeeds) */
  rolloutFailures: (runId: string, n: number, taskId: string, sample: number) => `runs/${runId}/iter-${n}/failures/${safeSegment(taskId)}/${sample}`,
  checkpoints: (runId: string) => `runs/${runId}/ckpt`,
  checkpoint: (runId: string, n: number) => `runs/${runId}/ckpt/${n}`,
  /** learner step stats stored inside the checkpoint it produced */
  checkpointStats: (runId: string, n: number) => `runs/${runId}/ckpt/${n}/stats.json`,
  metrics: (runId: string) => `runs/${runId}/metrics.jsonl`,
  /** curves of the run (reward.svg, reward.png, reward.vl.json), redrawn after each iteration */
  plots: (runId: string) => `runs/${runId}/plots`,
  plot: (runId: string, file: string) => `runs/${runId}/plots/${file}`,
  /** flagged trajectories kept whole for review (the trajectory, the grading's whole test log; docs/integrity.md) */
  integrityKept: (runId: string, n: number) => `runs/${runId}/integrity/iter-${n}`,
  integritySample: (runId: string, n: number, taskId: string, sample: number) => `runs/${runId}/integrity/iter-${n}/${safeSegment(taskId)}-${sample}`,
  /** what the experiment tracker has been sent (MLflow run id, metrics lines delivered) */
  mlflowState: (runId: string) => `runs/${runId}/tracking/mlflow.json`,
  /** the task factory's work (workflows/synthesize-tasks.ts): a repository's normalised source, baseline, candidates, verdicts */
  synthRepoTarball: (synthId: string, slug: string, short: string) => `synth/${safeSegment(synthId)}/repos/${safeSegment(slug)}/source-${safeSegment(short)}.tar.gz`,
  synthBaseline: (synthId: string, slug: string) => `synth/${safeSegment(synthId)}/repos/${safeSegment(slug)}/baseline.json`,
  synthCandidates: (synthId: string, slug: string, tier: string) => `synth/${safeSegment(synthId)}/repos/${safeSegment(slug)}/${tier}-candidates.json`,
  synthVerdict: (synthId: string, slug: string, tier: string, index: number) => `synth/${safeSegment(synthId)}/repos/${safeSegment(slug)}/${tier}/${index}.json`,
};

/** Task ids become one path segment: anything outside [A-Za-z0-9._-] is escaped. */
export function safeSegment(id: string): string {
  const s = id.replace(/[^A-Za-z0-9._-]/g, (c) => `~${c.charCodeAt(0).toString(16)}`);
  return s === '.' || s === '..' ? `~${s}` : s;
}

function checkKey(key: string): string {
  if (key.startsWith('/') || key.split('/').some((p) => p === '..' || p === '.' || p === '')) {
    throw new Error(`store key "${key}" is not a relative path of plain segments`);
  }
  return key;
}

/** this host, as it appears in temp names: `<key>.tmp-<host>-<pid>-<random>` */
const HOST = safeSegment(hostname());

function tmpName(path: string): string {
  return `${path}.tmp-${HOST}-${process.pid}-${randomBytes(4).toString('hex')}`;
}

/** temp directories this process is filling now (a reused pid, e.g. 1 in a restarted container, is not them) */
const building = new Set<string>();

/**
 * Whether a `.tmp-` entry was left by a writer that is gone: written on this host by a process that no
 * longer exists, or by an earlier process with our pid. A writer killed inside `putDir` (a learner step
 * SIGKILLed while saving) leaves a whole checkpoint's bytes there, which nothing else would remove.
 * Entries of other hosts (a shared store) and of the old `<key>.tmp-<pid>-<random>` form are left alone.
 */
function abandoned(dir: string, name: string): boolean {
  const parts = name.slice(name.indexOf('.tmp-') + 5).split('-');
  if (parts.length < 3) return false;
  const pid = Number(parts.at(-2));
  if (parts.slice(0, -2).join('-') !== HOST || !Number.isInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return !building.has(join(dir, name));
  return !processAlive(pid);
}

export class FileStore implements ArtifactStore {
  readonly root: string;
  constructor(readonly url: string) {
    this.root = fileStoreRoot(url);
  }
  dirFor(key: string): string {
    return join(this.root, ...checkKey(key).split('/'));
  }
  async get(key: string): Promise<Buffer | null> {
    try {
      return await readFile(this.dirFor(key));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }
  async getJson<T>(key: string): Promise<T | null> {
    const b = await this.get(key);
    return b === null ? null : (JSON.parse(b.toString('utf8')) as T);
  }
  async put(key: string, data: string | Uint8Array): Promise<void> {
    const path = this.dirFor(key);
    await mkdir(dirname(path), { recursive: true });
    const tmp = tmpName(path);
    await writeFile(tmp, data);
    await rename(tmp, path);
  }
  async putJson(key: string, value: unknown): Promise<void> {
    await this.put(key, JSON.stringify(value));
  }
  async putFile(key: string, srcPath: string): Promise<void> {
    const path = this.dirFor(key);
    await mkdir(dirname(path), { recursive: true });
    const tmp = tmpName(path);
    await copyFile(srcPath, tmp);
    await rename(tmp, path);
  }
  async exists(key: string): Promise<boolean> {
    try {
      await stat(this.dirFor(key));
      return true;
    } catch {
      return false;
    }
  }
  async children(prefix: string): Promise<string[]> {
    try {
      const names = await readdir(this.dirFor(prefix));
      return names.filter((n) => !n.includes('.tmp-')).sort();
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
  }
  async list(prefix: string): Promise<string[]> {
    const out: string[] = [];
    const walk = async (key: string): Promise<void> => {
      let entries;
      try {
        entries = await readdir(this.dirFor(key), { withFileTypes: true });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return;
        throw e;
      }
      for (const ent of entries) {
        if (ent.name.includes('.tmp-')) continue;
        const k = `${key}/${ent.name}`;
        if (ent.isDirectory()) await walk(k);
        else out.push(k);
      }
    };
    await walk(prefix.replace(/\/$/, ''));
    return out.sort();
  }
  async putDir(key: string, build: (tmpDir: string) => Promise<void>): Promise<boolean> {
    const path = this.dirFor(key);
    await this.removeAbandoned(dirname(path));
    if (await this.exists(key)) return false;
    await mkdir(dirname(path), { recursive: true });
    const tmp = tmpName(path);
    building.add(tmp);
    await mkdir(tmp, { recursive: true });
    try {
      await build(tmp);
      await rename(tmp, path);
      return true;
    } catch (e) {
      await rm(tmp, { recursive: true, force: true });
      // a concurrent writer finished first: theirs is complete, keep it
      const code = (e as NodeJS.ErrnoException).code;
      if ((code === 'ENOTEMPTY' || code === 'EEXIST') && (await this.exists(key))) return false;
      throw e;
    } finally {
      building.delete(tmp);
    }
  }
  /** Removes the temp entries in `dir` whose writers died (see `abandoned`); a failure to do so is not the caller's. */
  private async removeAbandoned(dir: string): Promise<void> {
    let names: string[];
    try {
      names = (await readdir(dir)).filter((n) => n.includes('.tmp-'));
    } catch {
      return;
    }
    for (const n of names) {
      if (abandoned(dir, n)) await rm(join(dir, n), { recursive: true, force: true }).catch(() => undefined);
    }
  }
  async appendLine(key: string, line: string): Promise<void> {
    const path = this.dirFor(key);
    await mkdir(dirname(path), { recursive: true });
    await appendFile(path, line.endsWith('\n') ? line : `${line}\n`);
  }
}

/** `file:///abs/path`, `file://relative/path` (relative to the working directory) or a plain path. */
export function fileStoreRoot(url: string): string {
  if (url.startsWith('file:///')) return fileURLToPath(url);
  if (url.startsWith('file://')) return resolve(url.slice('file://'.length));
  if (url.includes('://')) throw new Error(`store url "${url}": only file:// stores are supported`);
  return resolve(url);
}

/** `file://` URL of an absolute local directory. */
export function fileStoreUrl(dir: string): string {
  const abs = resolve(dir);
  return `file://${abs.split(sep).join('/')}`;
}

const opened = new Map<string, ArtifactStore>();
/** The store for a URL (one instance per URL per process). */
export function openStore(url: string): ArtifactStore {
  let s = opened.get(url);
  if (!s) {
    s = new FileStore(url);
    opened.set(url, s);
  }
  return s;
}

/** Indices of complete checkpoints of a run, ascending. */
export async function listCheckpoints(store: ArtifactStore, runId: string): Promise<number[]> {
  return (await store.children(keys.checkpoints(runId)))
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .sort((a, b) => a - b);
}
