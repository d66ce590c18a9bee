// The repository's own SWE tasks (data/swe/, docs/swe-tasks.md): builds data/swe/build/tasks.jsonl and one source
// tarball per task from
//   data/swe/repos/<library>/   small libraries written for this project, in their fixed state with every test;
//                               a task's base is its library with its test.patch and fix.patch reversed
//   data/swe/sdists.json        PyPI source distributions that ship their tests, sha256-pinned; fetched with pip into
//                               $SWERL_SDIST_CACHE (default ~/.cache/swerl/sdists), checked on every build; a task's
//                               base is the release unmodified
//   data/swe/tasks/<id>/        task.json (source, test_cmd, FAIL_TO_PASS, PASS_TO_PASS), problem.md, fix.patch
//                               (the gold patch) and test.patch
// Idempotent: a stamp of every input's hash skips an unchanged build; tarballs are byte-for-byte reproducible, so
// task image names (activities/images.ts hashes the tarball) stay the same across rebuilds and clones.
//   node --import tsx scripts/build-swe-tasks.ts      prints the tasks file
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { gunzipSync, gzipSync } from 'node:zlib';
import tar from 'tar-stream';
import { z } from 'zod';
import { buildTar, type TarFile } from '../activities/sandbox/common.ts';
import { BASE_ENVIRONMENT } from '../activities/images.ts';
import { parseTaskRecord, type SweTask } from '../lib/swe/task.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DATA = join(ROOT, 'data/swe');
/** Where the build writes (git-ignored): tasks.jsonl and repos/<id>.tar.gz. */
export const SWE_BUILD_DIR = join(DATA, 'build');
export const SWE_TASKS_FILE = join(SWE_BUILD_DIR, 'tasks.jsonl');
const run = promisify(execFile);
/** every entry of every tarball carries this time, so that a rebuild gives the same bytes */
const MTIME = new Date('2026-01-01T00:00:00Z');
const SKIP = /(^|\/)(__pycache__|\.pytest_cache|\.git)(\/|$)|\.pyc$/;

const SdistPinsSchema = z.record(
  z.string().regex(/^[A-Za-z0-9._-]+==[A-Za-z0-9._+-]+$/, 'NAME==VERSION'),
  z.strictObject({
    file: z.string().regex(/^[A-Za-z0-9._+-]+\.tar\.gz$/, 'a .tar.gz file name'),
    sha256: z.string().regex(/^[0-9a-f]{64}$/, '64 lower-case hex digits'),
    /** the folder the sdist unpacks into: stripped, so that the repository sits at /testbed */
    root: z.string().regex(/^[A-Za-z0-9._+-]+$/),
  }),
);
type SdistPin = z.infer<typeof SdistPinsSchema>[string];

const TaskSpecSchema = z.strictObject({
  source: z.union([z.strictObject({ library: z.string().regex(/^[a-z0-9_-]+$/) }), z.strictObject({ sdist: z.string().min(1) })]),
  repo: z.string().regex(/^[^/\s]+\/[^/\s]+$/, 'OWNER/NAME'),
  version: z.string().min(1),
  test_cmd: z.string().min(1),
  FAIL_TO_PASS: z.array(z.string().min(1)).min(1),
  PASS_TO_PASS: z.array(z.string().min(1)),
});
type TaskSpec = z.infer<typeof TaskSpecSchema>;

const sha256 = (b: string | Uint8Array) => createHash('sha256').update(b).digest('hex');

/** Parses `file` with `schema`; an error names the file, the field and the value. */
async function readJson<T>(file: string, schema: z.ZodType<T>): Promise<T> {
  const r = schema.safeParse(JSON.parse(await readFile(file, 'utf8')) as unknown);
  if (r.success) return r.data;
  const where = (i: z.core.$ZodIssue) => (i.path.length ? i.path.map(String).join('.') : '(top level)');
  throw new Error(`${relative(ROOT, file)}: ${r.error.issues.map((i) => `field ${where(i)}: ${i.message}`).join('; ')}`);
}

/** Every file under `dir` (relative paths, sorted), with its bytes and mode; caches and .git left out. */
async function readTree(dir: string): Promise<TarFile[]> {
  const out: TarFile[] = [];
  const walk = async (d: string) => {
    for (const e of (await readdir(d, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = join(d, e.name);
      const rel = relative(dir, p);
      if (SKIP.test(rel)) continue;
      if (e.isDirectory()) await walk(p);
      else if (e.isFile()) out.push({ path: rel, content: await readFile(p), mode: (await stat(p)).mode & 0o111 ? 0o755 : 0o644 });
    }
  };
  await walk(dir);
  return out;
}

async function writeAtomic(file: string, bytes: string | Uint8Array): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, bytes);
  await rename(tmp, file);
}

/** The sdist of `spec` (NAME==VERSION) from the cache, fetched with pip when missing; its sha256 checked every time. */
export async function ensureSdist(spec: string, pin: SdistPin, cacheDir = process.env.SWERL_SDIST_CACHE ?? join(homedir(), '.cache/swerl/sdists')): Promise<string> {
  const file = join(cacheDir, pin.file);
  if (!existsSync(file)) {
    await mkdir(cacheDir, { recursive: true });
    const tmp = await mkdtemp(join(cacheDir, 'dl-'));
    try {
      const py = process.env.SWERL_PYTHON ?? 'python3';
      process.stderr.write(`[swe-tasks] downloading ${spec} (source distribution) with pip\n`);
      await run(py, ['-m', 'pip', 'download', '--disable-pip-version-check', '--quiet', '--no-deps', '--no-binary', ':all:', spec, '-d', tmp], { maxBuffer: 16 << 20 }).catch(
        (e: Error & { stderr?: string }) => {
          throw new Error(`pip download ${spec} failed (needs ${py} with pip and PyPI): ${(e.stderr ?? e.message).trim().slice(-1500)}`);
        },
      );
      await rename(join(tmp, pin.file), file).catch(() => {
        throw new Error(`pip download ${spec} did not give ${pin.file} (data/swe/sdists.json)`);
      });
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  }
  const got = sha256(await readFile(file));
  if (got !== pin.sha256) throw new Error(`${file}: sha256 ${got}, but data/swe/sdists.json pins ${spec} at ${pin.sha256}: delete the file to download it again`);
  return file;
}

/** The files of an sdist with its top folder stripped (the release unmodified). */
async function sdistFiles(file: string, pin: SdistPin): Promise<TarFile[]> {
  const out: TarFile[] = [];
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (h, stream, next) => {
      const parts: Buffer[] = [];
      stream.on('data', (c: unknown) => void parts.push(c as Buffer));
      stream.on('end', () => {
        const rel = h.name.replace(/\/$/, '').split('/').slice(1).join('/');
        if (!h.name.startsWith(`${pin.root}/`) && h.name !== pin.root) return reject(new Error(`${file}: entry ${h.name} is outside ${pin.root}/`));
        if (h.type === 'file' && rel !== '' && !SKIP.test(rel)) out.push({ path: rel, content: Buffer.concat(parts), mode: (h.mode ?? 0o644) & 0o111 ? 0o755 : 0o644 });
        next();
      });
      stream.resume();
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
  });
  extract.end(gunzipSync(await readFile(file)));
  await done;
  return out.sort((a, b) => (a.path < b.path ? -1 : 1));
}

/** A library's files with the task's test.patch and fix.patch reversed: the task's base. */
async function libraryBase(library: string, taskDir: string): Promise<TarFile[]> {
  const src = join(DATA, 'repos', library);
  if (!existsSync(src)) throw new Error(`${relative(ROOT, taskDir)}/task.json: field source.library: no library data/swe/repos/${library}`);
  const work = await mkdtemp(join(tmpdir(), 'swerl-swe-task-'));
  try {
    for (const f of await readTree(src)) await writeAtomic(join(work, f.path), f.content);
    // outside any repository, git apply patches the files of its working directory
    const env = { ...process.env, GIT_CEILING_DIRECTORIES: dirname(work) };
    for (const p of ['test.patch', 'fix.patch']) {
      await run('git', ['apply', '-R', join(taskDir, p)], { cwd: work, env }).catch((e: Error & { stderr?: string }) => {
        throw new Error(`${relative(ROOT, taskDir)}/${p} does not reverse on data/swe/repos/${library}: ${(e.stderr ?? e.message).trim()}`);
      });
    }
    return await readTree(work);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** The record of one task, its base tarball written to `out`/repos/<id>.tar.gz. */
async function buildTask(id: string, pins: Record<string, SdistPin>, out: string): Promise<SweTask> {
  const dir = join(DATA, 'tasks', id);
  const spec: TaskSpec = await readJson(join(dir, 'task.json'), TaskSpecSchema);
  let files: TarFile[];
  let provenance: Record<string, string>;
  if ('library' in spec.source) {
    files = await libraryBase(spec.source.library, dir);
    provenance = { library: `data/swe/repos/${spec.source.library}` };
  } else {
    const pin = pins[spec.source.sdist];
    if (!pin) throw new Error(`data/swe/tasks/${id}/task.json: field source.sdist: ${JSON.stringify(spec.source.sdist)} is not pinned in data/swe/sdists.json`);
    files = await sdistFiles(await ensureSdist(spec.source.sdist, pin), pin);
    provenance = { sdist: spec.source.sdist, sha256: pin.sha256 };
  }
  const tarBytes = await buildTar(files, MTIME);
  const tarball = `repos/${id}.tar.gz`;
  await writeAtomic(join(out, tarball), gzipSync(tarBytes, { level: 9 }));
  const raw = {
    instance_id: id,
    repo: spec.repo,
    // no git history here: the base is named by the hash of its files
    base_commit: sha256(tarBytes).slice(0, 40),
    problem_statement: await readFile(join(dir, 'problem.md'), 'utf8'),
    hints_text: '',
    version: spec.version,
    patch: await readFile(join(dir, 'fix.patch'), 'utf8'),
    test_patch: await readFile(join(dir, 'test.patch'), 'utf8'),
    FAIL_TO_PASS: spec.FAIL_TO_PASS,
    PASS_TO_PASS: spec.PASS_TO_PASS,
    test_cmd: spec.test_cmd,
    source_tarball: tarball,
    environment: BASE_ENVIRONMENT,
    provenance,
  };
  const { task, errors } = parseTaskRecord(raw);
  if (!task) throw new Error(`data/swe/tasks/${id}: ${errors.map((e) => `field ${e.field}: ${e.message}`).join('; ')}`);
  return task;
}

/** A hash of everything the build reads, this file included. */
async function inputsHash(): Promise<string> {
  const h = createHash('sha256');
  h.update(await readFile(fileURLToPath(import.meta.url)));
  for (const sub of ['repos', 'tasks', 'sdists.json']) {
    const p = join(DATA, sub);
    const files: TarFile[] = sub.endsWith('.json') ? [{ path: sub, content: await readFile(p) }] : await readTree(p);
    for (const f of files) h.update(`${sub}/${f.path}\0${f.mode ?? 0}\0`).update(f.content);
  }
  return h.digest('hex');
}

let building: Promise<string> | undefined;

/** Builds data/swe/build/ unless its stamp matches the inputs; returns the tasks file. Sdists are checked either way. */
export function buildSweTasks(): Promise<string> {
  building ??= (async () => {
    const pins = await readJson(join(DATA, 'sdists.json'), SdistPinsSchema);
    for (const [spec, pin] of Object.entries(pins)) await ensureSdist(spec, pin);
    const stampFile = join(SWE_BUILD_DIR, '.stamp');
    const want = await inputsHash();
    if (existsSync(SWE_TASKS_FILE) && (await readFile(stampFile, 'utf8').catch(() => '')) === want) return SWE_TASKS_FILE;
    const t0 = Date.now();
    const ids = (await readdir(join(DATA, 'tasks'))).sort();
    const tasks: SweTask[] = [];
    for (const id of ids) tasks.push(await buildTask(id, pins, SWE_BUILD_DIR));
    await writeAtomic(SWE_TASKS_FILE, tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
    // tarballs of tasks that are gone
    const keep = new Set(ids.map((id) => `${id}.tar.gz`));
    for (const f of await readdir(join(SWE_BUILD_DIR, 'repos'))) if (!keep.has(f) && !f.endsWith('.tmp')) await rm(join(SWE_BUILD_DIR, 'repos', f), { force: true });
    await writeAtomic(stampFile, want);
    process.stderr.write(`[swe-tasks] ${tasks.length} tasks built in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${relative(process.cwd(), SWE_TASKS_FILE)}\n`);
    return SWE_TASKS_FILE;
  })();
  building.catch(() => (building = undefined));
  return building;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    console.log(await buildSweTasks());
  } catch (e) {
    console.error(`[swe-tasks] ${(e as Error).message}`);
    process.exit(1);
  }
}
