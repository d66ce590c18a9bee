// Where a factory repository comes from (issue 28): a directory (its git-tracked and untracked-but-not-ignored
// files, or every file but caches without git), a tarball, or a PyPI source distribution. Each becomes one
// normalised tarball (entries sorted, no top-level prefix, fixed times), the recipe of the repository's image
// and of every task's buggy tarball. A `pypi:` sdist is downloaded once into a cache outside the clone
// ($SWERL_SDIST_CACHE, default ~/.cache/swerl/sdists), checked against PyPI's sha256, and its sha256 goes
// into every task's provenance.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, stat, writeFile, lstat, readlink } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync, gzipSync } from 'node:zlib';
import tar from 'tar-stream';
import { z } from 'zod';
import type { RepoSource } from '../../lib/factory/config.ts';

const exec = promisify(execFile);

export interface TarEntry {
  path: string;
  data: Buffer;
  mode: number;
  /** a symbolic link's target (then `data` is empty) */
  link?: string;
}

export interface SourceProvenance {
  /** as given: a path, or pypi:NAME==VERSION */
  source: string;
  kind: RepoSource['kind'];
  /** sha256 of the sdist or tarball as downloaded or given; of the normalised tarball for a directory */
  sha256: string;
  url?: string;
  /** a directory's git HEAD, and whether its work tree differed from it */
  commit?: string;
  dirty?: boolean;
}

/** A fixed time for every entry, so that the same files give the same tarball bytes. */
const ENTRY_TIME = new Date('2000-01-01T00:00:00Z');
/** what a directory without git leaves out */
const SKIP_DIRS = new Set(['.git', '__pycache__', '.pytest_cache', '.tox', '.nox', '.venv', 'venv', 'node_modules', '.mypy_cache', '.ruff_cache', '.hg', '.svn']);

export function sha256(b: Uint8Array | string): string {
  return createHash('sha256').update(b).digest('hex');
}

export function sdistCacheDir(): string {
  return process.env.SWERL_SDIST_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'swerl', 'sdists');
}

/** The entries of a tar or tar.gz, regular files and symlinks only, with a shared top-level directory stripped. */
export async function readTarball(bytes: Buffer): Promise<TarEntry[]> {
  const raw = bytes[0] === 0x1f && bytes[1] === 0x8b ? gunzipSync(bytes) : bytes;
  const entries: TarEntry[] = [];
  const ex = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    ex.on('entry', (h, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: unknown) => chunks.push(c as Buffer));
      stream.on('end', () => {
        const path = h.name.replace(/^\.\//, '');
        if (h.type === 'file' || h.type === 'contiguous-file') entries.push({ path, data: Buffer.concat(chunks), mode: h.mode ?? 0o644 });
        else if (h.type === 'symlink' && h.linkname) entries.push({ path, data: Buffer.alloc(0), mode: 0o777, link: h.linkname });
        next();
      });
      stream.resume();
    });
    ex.on('finish', resolve);
    ex.on('error', reject);
  });
  ex.end(raw);
  await done;
  const tops = new Set(entries.map((e) => e.path.split('/')[0]));
  if (tops.size === 1 && entries.every((e) => e.path.includes('/'))) {
    const cut = `${[...tops][0]}/`.length;
    for (const e of entries) e.path = e.path.slice(cut);
  }
  return entries.filter((e) => e.path !== '' && !e.path.split('/').some((p) => p === '..' || p === '')).sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** A deterministic tar.gz of `entries` (sorted, fixed times, no owner names). */
export async function writeTarball(entries: readonly TarEntry[]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = new Promise<void>((resolve, reject) => {
    pack.on('data', (c: unknown) => chunks.push(c as Buffer));
    pack.on('end', resolve);
    pack.on('error', reject);
  });
  for (const e of [...entries].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    if (e.link) pack.entry({ name: e.path, type: 'symlink', linkname: e.link, mode: 0o777, mtime: ENTRY_TIME, uid: 0, gid: 0 });
    else pack.entry({ name: e.path, mode: e.mode & 0o111 ? 0o755 : 0o644, mtime: ENTRY_TIME, uid: 0, gid: 0 }, e.data);
  }
  pack.finalize();
  await done;
  return gzipSync(Buffer.concat(chunks), { level: 6 });
}

async function dirEntries(dir: string): Promise<{ entries: TarEntry[]; commit?: string; dirty?: boolean }> {
  let paths: string[] | undefined;
  let commit: string | undefined;
  let dirty: boolean | undefined;
  try {
    const top = (await exec('git', ['-C', dir, 'rev-parse', '--show-toplevel'])).stdout.trim();
    if (top === dir.replace(/\/+$/, '')) {
      paths = (await exec('git', ['-C', dir, 'ls-files', '-z', '--cached', '--others', '--exclude-standard'], { maxBuffer: 256 << 20 })).stdout.split('\0').filter(Boolean);
      commit = (await exec('git', ['-C', dir, 'rev-parse', 'HEAD']).catch(() => ({ stdout: '' }))).stdout.trim() || undefined;
      dirty = (await exec('git', ['-C', dir, 'status', '--porcelain'])).stdout.trim() !== '';
    }
  } catch {
    // not a git work tree (or no git): every file but caches
  }
  if (!paths) {
    paths = [];
    const walk = async (rel: string): Promise<void> => {
      for (const d of await readdir(join(dir, rel), { withFileTypes: true })) {
        const p = rel ? `${rel}/${d.name}` : d.name;
        if (d.isDirectory()) {
          if (!SKIP_DIRS.has(d.name) && !d.name.endsWith('.egg-info')) await walk(p);
        } else if (!d.name.endsWith('.pyc')) paths!.push(p);
      }
    };
    await walk('');
  }
  const entries: TarEntry[] = [];
  for (const p of paths) {
    const abs = join(dir, p);
    const st = await lstat(abs).catch(() => null);
    if (!st) continue;
    if (st.isSymbolicLink()) entries.push({ path: p, data: Buffer.alloc(0), mode: 0o777, link: await readlink(abs) });
    else if (st.isFile()) entries.push({ path: p, data: await readFile(abs), mode: st.mode });
  }
  return { entries, ...(commit ? { commit } : {}), ...(dirty !== undefined ? { dirty } : {}) };
}

const PypiFile = z.object({ packagetype: z.string(), url: z.string(), filename: z.string(), digests: z.object({ sha256: z.string() }) });
const PypiRelease = z.object({ urls: z.array(PypiFile) });
const PypiProject = z.object({ releases: z.record(z.string(), z.array(PypiFile)) });

async function getJson(url: string, spec: string, index: string): Promise<unknown> {
  const res = await fetch(url).catch((e: Error) => {
    throw new Error(`${spec}: PyPI (${index}) unreachable: ${e.message}`);
  });
  if (res.status === 404) return null;
  if (!res.ok) throw new Error(`${spec}: ${index} answered ${res.status} for ${url}`);
  return res.json();
}

/** The files of NAME==VERSION: the release's JSON, else the project's `releases` (some mirrors serve only the latter). */
async function releaseFiles(index: string, name: string, version: string, spec: string): Promise<z.infer<typeof PypiFile>[]> {
  const base = `${index}/pypi/${encodeURIComponent(name)}`;
  // a mirror may give file URLs relative to the page
  const absolute = (files: z.infer<typeof PypiFile>[], page: string) => files.map((f) => ({ ...f, url: new URL(f.url, page).href }));
  const relUrl = `${base}/${encodeURIComponent(version)}/json`;
  const rel = await getJson(relUrl, spec, index);
  if (rel !== null) {
    const r = PypiRelease.safeParse(rel);
    if (!r.success) throw new Error(`${spec}: unexpected answer from ${index}: ${r.error.issues[0]?.message}`);
    return absolute(r.data.urls, relUrl);
  }
  const projUrl = `${base}/json`;
  const proj = await getJson(projUrl, spec, index);
  const p = proj === null ? null : PypiProject.safeParse(proj);
  if (p && !p.success) throw new Error(`${spec}: unexpected answer from ${index}: ${p.error.issues[0]?.message}`);
  const files = p?.data.releases[version];
  if (!files) throw new SourceError(`${spec}: no such release on ${index}`);
  return absolute(files, projUrl);
}

/** The sdist of NAME==VERSION from the cache, else from PyPI (index: $SWERL_PYPI_URL, default https://pypi.org). */
export async function fetchSdist(name: string, version: string): Promise<{ bytes: Buffer; sha256: string; url: string; filename: string }> {
  const spec = `pypi:${name}==${version}`;
  const dir = join(sdistCacheDir(), `${name.toLowerCase()}-${version}`);
  const metaFile = join(dir, 'meta.json');
  if (existsSync(metaFile)) {
    const meta = JSON.parse(await readFile(metaFile, 'utf8')) as { sha256: string; url: string; filename: string };
    const bytes = await readFile(join(dir, meta.filename)).catch(() => null);
    if (bytes && sha256(bytes) === meta.sha256) return { bytes, ...meta };
  }
  const index = (process.env.SWERL_PYPI_URL ?? 'https://pypi.org').replace(/\/+$/, '');
  const files = await releaseFiles(index, name, version, spec);
  const sdist = files.find((u) => u.packagetype === 'sdist');
  if (!sdist) throw new SourceError(`${spec}: the release has no source distribution (only ${files.map((u) => u.packagetype).join(', ') || 'nothing'})`);
  const got = await fetch(sdist.url);
  if (!got.ok) throw new Error(`${spec}: downloading ${sdist.url}: ${got.status}`);
  const bytes = Buffer.from(await got.arrayBuffer());
  const digest = sha256(bytes);
  if (digest !== sdist.digests.sha256) throw new SourceError(`${spec}: ${sdist.filename} has sha256 ${digest}, PyPI lists ${sdist.digests.sha256}`);
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.${sdist.filename}.${process.pid}`);
  await writeFile(tmp, bytes);
  await rename(tmp, join(dir, sdist.filename));
  await writeFile(metaFile, JSON.stringify({ sha256: digest, url: sdist.url, filename: sdist.filename }));
  return { bytes, sha256: digest, url: sdist.url, filename: sdist.filename };
}

/** Bad input (a source that does not exist or cannot be one): the activity fails it without retrying. */
export class SourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SourceError';
  }
}

/** The repository's files and where they came from. */
export async function loadSource(spec: string, src: RepoSource): Promise<{ entries: TarEntry[]; provenance: SourceProvenance; defaultName: string }> {
  if (src.kind === 'pypi') {
    const s = await fetchSdist(src.name, src.version);
    return { entries: await readTarball(s.bytes), provenance: { source: spec, kind: 'pypi', sha256: s.sha256, url: s.url }, defaultName: src.name };
  }
  const st = await stat(src.path).catch(() => null);
  if (!st) throw new SourceError(`repo source ${src.path} does not exist`);
  if (src.kind === 'tarball') {
    if (!st.isFile()) throw new SourceError(`repo source ${src.path} is not a file`);
    const bytes = await readFile(src.path);
    let entries: TarEntry[];
    try {
      entries = await readTarball(bytes);
    } catch (e) {
      throw new SourceError(`repo source ${src.path} is not a tarball: ${(e as Error).message}`);
    }
    return { entries, provenance: { source: spec, kind: 'tarball', sha256: sha256(bytes) }, defaultName: basename(src.path).replace(/\.(tar\.gz|tgz|tar)$/, '') };
  }
  if (!st.isDirectory()) throw new SourceError(`repo source ${src.path} is not a directory`);
  const d = await dirEntries(src.path);
  const provenance: SourceProvenance = { source: spec, kind: 'dir', sha256: '', ...(d.commit ? { commit: d.commit } : {}), ...(d.dirty !== undefined ? { dirty: d.dirty } : {}) };
  return { entries: d.entries, provenance, defaultName: basename(relative('/', src.path)) || 'repo' };
}

/** pytest's default `python_files`. */
export const DEFAULT_PYTHON_FILES = ['test_*.py', '*_test.py'];

/**
 * The `python_files` globs of the repository's pytest configuration at its root (pytest.ini, pyproject.toml's
 * [tool.pytest.ini_options], tox.ini's [pytest], setup.cfg's [tool:pytest]; the first that has a section wins,
 * as pytest picks its configuration file), or pytest's default.
 */
export function pythonFilesOf(entries: readonly Pick<TarEntry, 'path' | 'data'>[]): string[] {
  const text = (name: string) => entries.find((e) => e.path === name)?.data.toString('utf8');
  for (const [file, section] of [
    ['pytest.ini', /^\[pytest\]\s*$/],
    ['pyproject.toml', /^\[tool\.pytest\.ini_options\]\s*$/],
    ['tox.ini', /^\[pytest\]\s*$/],
    ['setup.cfg', /^\[tool:pytest\]\s*$/],
  ] as const) {
    const lines = text(file)?.split('\n');
    const at = lines?.findIndex((l) => section.test(l)) ?? -1;
    if (!lines || at < 0) continue;
    for (const l of lines.slice(at + 1)) {
      if (/^\[/.test(l)) break;
      const m = /^python_files\s*=\s*(.+)$/.exec(l.trim());
      if (m)
        return m[1]!
          .replace(/[[\]"',]/g, ' ')
          .split(/\s+/)
          .filter(Boolean);
    }
    return DEFAULT_PYTHON_FILES;
  }
  return DEFAULT_PYTHON_FILES;
}

/** Test files of a repository: files whose name matches one of the `python_files` globs (pytest's default names). */
export function testFilesIn(paths: readonly string[], pythonFiles: readonly string[] = DEFAULT_PYTHON_FILES): string[] {
  const globs = pythonFiles.map(
    (g) =>
      new RegExp(
        `^${g
          .replace(/[.+^${}()|\\]/g, '\\$&')
          .replace(/\*/g, '[^/]*')
          .replace(/\?/g, '[^/]')}$`,
      ),
  );
  return paths.filter((p) => globs.some((g) => g.test(p.split('/').at(-1)!)));
}
