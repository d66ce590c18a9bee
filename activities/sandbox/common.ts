// Pieces both sandbox backends share: errors, path checks, output capping, tar building, patch filtering.
import { posix } from 'node:path';
import { Writable } from 'node:stream';
import tar from 'tar-stream';

export const TESTBED = '/testbed';
export const DEFAULT_MAX_OUTPUT = 1 << 20;
/** label on every sandbox container/pod so leftovers can be found and removed */
export const SANDBOX_LABEL = 'swerl.sandbox';

/** The sandbox's container/pod is gone or stopped; the caller should start a new one. */
export class SandboxDeadError extends Error {
  constructor(
    readonly sandboxId: string,
    readonly detail: string,
  ) {
    super(`sandbox ${sandboxId} is dead: ${detail}`);
    this.name = 'SandboxDeadError';
  }
}

/** A path that would escape its directory, or is otherwise unacceptable. Refused, never rewritten. */
export class SandboxPathError extends Error {
  constructor(
    readonly path: string,
    reason: string,
  ) {
    super(`path ${JSON.stringify(path)} refused: ${reason}`);
    this.name = 'SandboxPathError';
  }
}

/** A path inside the sandbox for readFile/writeFile: absolute, or relative to /testbed; no `..` segments. */
export function sandboxPath(path: string): string {
  if (typeof path !== 'string' || path === '') throw new SandboxPathError(String(path), 'empty');
  if (path.includes('\0')) throw new SandboxPathError(path, 'contains NUL');
  if (path.split('/').includes('..')) throw new SandboxPathError(path, "contains a '..' segment");
  const abs = path.startsWith('/') ? posix.normalize(path) : posix.join(TESTBED, path);
  if (abs === '/' || abs.endsWith('/')) throw new SandboxPathError(path, 'names a directory');
  return abs;
}

/** A tar entry name relative to its destination directory: not absolute, no `..`, not empty. */
export function checkEntryName(name: string): string {
  if (typeof name !== 'string' || name === '') throw new SandboxPathError(String(name), 'empty entry name');
  if (name.includes('\0')) throw new SandboxPathError(name, 'contains NUL');
  if (name.startsWith('/')) throw new SandboxPathError(name, 'absolute entry name (must be relative to the destination)');
  if (name.split('/').includes('..')) throw new SandboxPathError(name, "contains a '..' segment");
  const n = posix.normalize(name);
  if (n === '.' || n === './') throw new SandboxPathError(name, 'names the destination itself');
  return n;
}

export function checkDestDir(dir: string): string {
  if (!dir.startsWith('/')) throw new SandboxPathError(dir, 'destination must be absolute');
  if (dir.split('/').includes('..')) throw new SandboxPathError(dir, "contains a '..' segment");
  return posix.normalize(dir);
}

export interface TarFile {
  path: string;
  content: string | Uint8Array;
  mode?: number;
}

/** Builds an uncompressed tar in memory; names are checked with checkEntryName. */
export async function buildTar(files: TarFile[]): Promise<Buffer> {
  const names = files.map((f) => checkEntryName(f.path));
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = new Promise<void>((resolve, reject) => {
    pack.on('data', (c: unknown) => {
      chunks.push(c as Buffer);
    });
    pack.on('end', resolve);
    pack.on('error', reject);
  });
  const mtime = new Date();
  files.forEach((f, i) => {
    const body = typeof f.content === 'string' ? Buffer.from(f.content, 'utf8') : Buffer.from(f.content);
    pack.entry({ name: names[i]!, mode: f.mode ?? 0o644, mtime, type: 'file' }, body);
  });
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** Reads the first regular file out of a tar stream (docker getArchive / `tar c` output). */
export async function firstFileFromTar(src: NodeJS.ReadableStream, what: string): Promise<Buffer> {
  const extract = tar.extract();
  return new Promise<Buffer>((resolve, reject) => {
    let found: Buffer | undefined;
    let kind: string | undefined;
    extract.on('entry', (header, stream, next) => {
      kind ??= header.type;
      if (found === undefined && header.type === 'file') {
        const parts: Buffer[] = [];
        stream.on('data', (c: unknown) => {
          parts.push(c as Buffer);
        });
        stream.on('end', () => {
          found = Buffer.concat(parts);
          next();
        });
      } else {
        stream.on('end', next);
        stream.resume();
      }
    });
    extract.on('finish', () => {
      if (found !== undefined) resolve(found);
      else reject(new Error(`${what}: not a regular file (tar entry type ${kind ?? 'none'})`));
    });
    extract.on('error', reject);
    src.pipe(extract);
  });
}

/** Collects at most `cap` bytes (the head) and counts what it dropped. */
export class CappedSink extends Writable {
  private parts: Buffer[] = [];
  private kept = 0;
  dropped = 0;
  constructor(private readonly cap: number) {
    super();
  }
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    const room = this.cap - this.kept;
    if (room > 0) {
      const take = chunk.length <= room ? chunk : chunk.subarray(0, room);
      this.parts.push(Buffer.from(take));
      this.kept += take.length;
    }
    if (chunk.length > room) this.dropped += chunk.length - Math.max(room, 0);
    cb();
  }
  get truncated(): boolean {
    return this.dropped > 0;
  }
  text(): string {
    return Buffer.concat(this.parts).toString('utf8');
  }
}

/** Glob → RegExp: `**` any path, `*` within a segment, `?` one char. */
export function globToRegExp(glob: string): RegExp {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        re += '.*';
        i++;
        if (glob[i + 1] === '/') i++;
      } else re += '[^/]*';
    } else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/** A glob without `/` matches the basename anywhere (`reproduce_issue.py`); with `/`, the whole path. */
export function pathMatchesAny(path: string, globs: string[]): boolean {
  return globs.some((g) => {
    const re = globToRegExp(g);
    return g.includes('/') ? re.test(path) : re.test(posix.basename(path)) || re.test(path);
  });
}

/** Drops the file sections of a `git diff` whose path matches one of the globs. */
export function filterPatch(patch: string, excludeGlobs: string[]): string {
  if (!excludeGlobs.length || patch === '') return patch;
  const sections = patch.split(/^(?=diff --git )/m);
  return sections
    .filter((sec) => {
      const m = /^diff --git a\/(.+?) b\/(.+?)$/m.exec(sec);
      if (!m) return true;
      return !(pathMatchesAny(m[1]!, excludeGlobs) || pathMatchesAny(m[2]!, excludeGlobs));
    })
    .join('');
}

/** The shell line `diff()` runs in /testbed. */
export const DIFF_CMD = 'git add -A && git -c core.quotepath=off diff --cached --no-color --no-ext-diff';

/** Quotes one word for bash. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
