// Pieces both sandbox backends share: errors, path checks, output capping, tar building, patch filtering.
import { hostname } from 'node:os';
import { posix } from 'node:path';
import { Writable } from 'node:stream';
import tar from 'tar-stream';
import { PatchTooLargeError, type ExecResult, type OmittedOutput, type Sandbox } from '../../lib/sandbox.ts';
import { processAlive, processStartTicks } from '../../lib/process-identity.ts';

export const TESTBED = '/testbed';
export const DEFAULT_MAX_OUTPUT = 1 << 20;
/** label on every sandbox container/pod so leftovers can be found and removed */
export const SANDBOX_LABEL = 'swerl.sandbox';

/** Sandboxes started without an expiry label get this lifetime. */
export const DEFAULT_SANDBOX_LIFETIME_S = 3 * 3600;
/** Owner and lifetime labels (DESIGN §2). `swerl.pid-start` tells a reused pid from the original process. */
export const OWNER_LABELS = {
  host: 'swerl.host',
  pid: 'swerl.pid',
  pidStart: 'swerl.pid-start',
  run: 'swerl.run',
  iteration: 'swerl.iteration',
  created: 'swerl.created',
  /** seconds since the epoch after which any sweep removes the sandbox */
  expires: 'swerl.expires',
} as const;

/** The `swerl.expires` label value `lifetimeS` from now. */
export function expiresLabel(lifetimeS: number, now = Date.now()): string {
  return String(Math.ceil(now / 1000 + lifetimeS));
}

/** This host as a label value (Kubernetes: at most 63 of [A-Za-z0-9_.-]). */
export function hostLabel(host = hostname()): string {
  return host
    .replace(/[^A-Za-z0-9_.-]/g, '_')
    .slice(0, 63)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
}

/** Labels naming this process as a sandbox's owner. */
export function ownerLabels(): Record<string, string> {
  return { [OWNER_LABELS.host]: hostLabel(), [OWNER_LABELS.pid]: String(process.pid), [OWNER_LABELS.pidStart]: processStartTicks(process.pid) };
}

/**
 * Why a sweep removes a sandbox, or null: its owner process on this host is gone (`deadOwner`), or it is past
 * its `swerl.expires` (without one, DEFAULT_SANDBOX_LIFETIME_S after it was created).
 */
export function sweepReason(labels: Record<string, string>, createdMs: number, now: number, host = hostLabel()): 'deadOwner' | 'expired' | null {
  if (labels[OWNER_LABELS.host] === host && labels[OWNER_LABELS.pid] && !processAlive(Number(labels[OWNER_LABELS.pid]), labels[OWNER_LABELS.pidStart])) return 'deadOwner';
  const expires = Number(labels[OWNER_LABELS.expires] ?? NaN) * 1000;
  return (Number.isFinite(expires) ? expires : createdMs + DEFAULT_SANDBOX_LIFETIME_S * 1000) < now ? 'expired' : null;
}

export { SandboxDeadError, SandboxInfraError, SandboxUnavailableError, PatchTooLargeError } from '../../lib/sandbox.ts';

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

/** Builds an uncompressed tar in memory; names are checked with checkEntryName. A fixed `mtime` makes it reproducible. */
export async function buildTar(files: TarFile[], mtime = new Date()): Promise<Buffer> {
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

function newlines(b: Buffer): number {
  let n = 0;
  for (let i = b.indexOf(10); i >= 0; i = b.indexOf(10, i + 1)) n++;
  return n;
}

/**
 * Collects at most `cap` bytes of a stream: the head, and with `tailCap` also the last `tailCap` bytes;
 * counts the bytes and lines it left out in between, so a note can say how much was not shown.
 */
export class CappedSink extends Writable {
  private head: Buffer[] = [];
  private headLen = 0;
  private tail: Buffer[] = [];
  private tailLen = 0;
  private readonly headCap: number;
  dropped = 0;
  droppedLines = 0;
  constructor(
    cap: number,
    private readonly tailCap = 0,
  ) {
    super();
    this.tailCap = Math.max(0, Math.min(tailCap, cap));
    this.headCap = cap - this.tailCap;
  }
  private drop(b: Buffer): void {
    this.dropped += b.length;
    this.droppedLines += newlines(b);
  }
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    let c = chunk;
    const room = this.headCap - this.headLen;
    if (room > 0) {
      const take = c.subarray(0, room);
      this.head.push(Buffer.from(take));
      this.headLen += take.length;
      c = c.subarray(take.length);
    }
    if (c.length > 0 && this.tailCap === 0) this.drop(c);
    else if (c.length > 0) {
      this.tail.push(Buffer.from(c));
      this.tailLen += c.length;
      while (this.tailLen - this.tail[0]!.length >= this.tailCap) {
        const first = this.tail.shift()!;
        this.tailLen -= first.length;
        this.drop(first);
      }
      if (this.tailLen > this.tailCap) {
        const excess = this.tailLen - this.tailCap;
        this.drop(this.tail[0]!.subarray(0, excess));
        this.tail[0] = this.tail[0]!.subarray(excess);
        this.tailLen = this.tailCap;
      }
    }
    cb();
  }
  get truncated(): boolean {
    return this.dropped > 0;
  }
  private headText(): string {
    return Buffer.concat(this.head).toString('utf8');
  }
  /** head and tail, joined where the omitted part was */
  text(): string {
    return this.headText() + Buffer.concat(this.tail).toString('utf8');
  }
  /** what was left out, or undefined when nothing was */
  omitted(): OmittedOutput | undefined {
    return this.dropped > 0 ? { bytes: this.dropped, lines: this.droppedLines, at: this.headText().length } : undefined;
  }
}

/** The `omitted` field of an ExecResult from the two sinks (absent when nothing was left out). */
export function omittedOf(stdout: CappedSink, stderr: CappedSink): ExecResult['omitted'] | undefined {
  const o = stdout.omitted();
  const e = stderr.omitted();
  return o || e ? { ...(o ? { stdout: o } : {}), ...(e ? { stderr: e } : {}) } : undefined;
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

/**
 * Before staging: `<untracked files> <their bytes> <largest modified tracked file's bytes>` (new files enter the
 * patch whole; a huge modified file makes `git add` slow).
 */
export const CHANGED_SIZES_CMD = [
  `u=$(git ls-files -z --others --exclude-standard | xargs -0 -r stat -c '%s' -- 2>/dev/null | awk '{s+=$1; n++} END {print n+0, s+0}')`,
  `m=$(git ls-files -z --modified | xargs -0 -r stat -c '%s' -- 2>/dev/null | awk '$1>m {m=$1} END {print m+0}')`,
  'echo "$u $m"',
].join('; ');

/** A modified tracked file beyond this many bytes makes the patch too large whatever its diff. */
export const MAX_MODIFIED_FILE_BYTES = 256 << 20;

/**
 * The patch of /testbed for both backends: a size check before staging, then DIFF_CMD with its output capped
 * at `maxBytes`. Too much changed → PatchTooLargeError; any other failure of git in a live sandbox is the
 * agent's (e.g. it removed .git) and throws a plain Error; a dead sandbox throws from `exec` as infrastructure.
 */
export async function computePatch(exec: Sandbox['exec'], excludeGlobs: string[], maxBytes: number): Promise<string> {
  const sizes = await exec(CHANGED_SIZES_CMD, 120, { cwd: TESTBED });
  if (sizes.timedOut) throw new PatchTooLargeError(`listing the changed files in ${TESTBED} took longer than 120 s`);
  const [untracked = 0, untrackedBytes = 0, largestModified = 0] = sizes.stdout.trim().split(/\s+/).map(Number);
  if (untrackedBytes > maxBytes) {
    throw new PatchTooLargeError(`the ${untracked} new file(s) in ${TESTBED} hold ${untrackedBytes} bytes; a patch may be at most ${maxBytes}`);
  }
  if (largestModified > MAX_MODIFIED_FILE_BYTES) {
    throw new PatchTooLargeError(`a modified file in ${TESTBED} holds ${largestModified} bytes (at most ${MAX_MODIFIED_FILE_BYTES})`);
  }
  const r = await exec(DIFF_CMD, 120, { cwd: TESTBED, maxOutputBytes: maxBytes + 1 });
  if (r.timedOut) throw new PatchTooLargeError(`making the patch of ${TESTBED} took longer than 120 s`);
  if (r.exit !== 0) throw new Error(`diff in ${TESTBED} failed (exit ${r.exit}): ${r.stderr.slice(0, 500)}`);
  if (r.truncated) throw new PatchTooLargeError(`the diff of ${TESTBED} is larger than ${maxBytes} bytes`);
  return filterPatch(r.stdout, excludeGlobs);
}
