// The one sandbox interface (DESIGN §3). Backends: activities/sandbox/docker.ts, activities/sandbox/k8s.ts.
// The repository sits at /testbed inside every sandbox.

export interface SandboxLimits {
  /** CPU cores (fractional allowed) */
  cpus: number;
  memoryBytes: number;
  pids: number;
  /** what the sandbox may write (its writable layer), MiB; 0 = no limit */
  diskMiB: number;
}

export const DEFAULT_LIMITS: SandboxLimits = { cpus: 1, memoryBytes: 1 << 30, pids: 512, diskMiB: 2048 };

/** The patch of a sandbox larger than this is `patch_too_large` (an agent outcome) unless the caller says otherwise. */
export const DEFAULT_MAX_PATCH_BYTES = 1 << 20;

/**
 * The sandbox or its backend failed (container or pod gone, engine or API unreachable): infrastructure,
 * never the agent's doing, so the rollout is retried (DESIGN §2). Everything else a sandbox reports is the agent's.
 */
export class SandboxInfraError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SandboxInfraError';
  }
}

/** The sandbox's container/pod is gone or stopped; the caller should start a new one. */
export class SandboxDeadError extends SandboxInfraError {
  constructor(
    readonly sandboxId: string,
    readonly detail: string,
  ) {
    super(`sandbox ${sandboxId} is dead: ${detail}`);
    this.name = 'SandboxDeadError';
  }
}

/** Docker or the Kubernetes API did not answer (or answered with a server error). */
export class SandboxUnavailableError extends SandboxInfraError {
  constructor(message: string) {
    super(message);
    this.name = 'SandboxUnavailableError';
  }
}

/**
 * The agent's writes passed the sandbox's disk limit and cost it the sandbox (a Kubernetes pod evicted for
 * ephemeral storage): the agent's doing; the episode ends with `error` (reward 0).
 */
export class SandboxDiskLimitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SandboxDiskLimitError';
  }
}

/** The agent's changes are too large to become a patch (files or diff over the limit): reward 0, `patch_too_large`. */
export class PatchTooLargeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PatchTooLargeError';
  }
}

export interface ExecResult {
  exit: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** true when stdout or stderr was cut at the capture cap */
  truncated?: boolean;
  /** what the capture cap left out of each stream: bytes and lines, and where (character offset in stdout/stderr) */
  omitted?: { stdout?: OmittedOutput; stderr?: OmittedOutput };
  /** the command was stopped because the sandbox passed its disk limit (diskMiB) */
  diskLimitExceeded?: boolean;
}

export interface OmittedOutput {
  bytes: number;
  lines: number;
  /** character offset in the captured text where the omitted part was */
  at: number;
}

export interface ExecOptions {
  /** working directory, default /testbed */
  cwd?: string;
  env?: Record<string, string>;
  /** bytes kept per stream, default 1 MiB */
  maxOutputBytes?: number;
  /** of maxOutputBytes, keep this many from the end of each stream (the middle is left out); default 0: the head only */
  tailBytes?: number;
}

export interface Sandbox {
  readonly id: string;
  /** run `cmd` with `bash -lc`; the process group is killed at `timeoutS` and `timedOut` is set */
  exec(cmd: string, timeoutS: number, opts?: ExecOptions): Promise<ExecResult>;
  readFile(path: string): Promise<string>;
  writeFile(path: string, content: string): Promise<void>;
  /** copy host files/dirs (tar) into `destDir`; entries escaping destDir are refused */
  copyIn(files: { path: string; content: string | Uint8Array; mode?: number }[], destDir: string): Promise<void>;
  /**
   * `git add -A && git diff --cached` in /testbed, minus paths matching the scratch globs. Changed files or a
   * diff over `maxBytes` (DEFAULT_MAX_PATCH_BYTES) throw PatchTooLargeError; a dead sandbox SandboxInfraError.
   */
  diff(excludeGlobs?: string[], opts?: { maxBytes?: number }): Promise<string>;
  stop(): Promise<void>;
}

export interface SandboxBackend {
  readonly name: 'docker' | 'kubernetes';
  /** `labels` may carry owner details (`swerl.run`, `swerl.iteration`) and `swerl.expires` (epoch seconds) */
  start(image: string, limits?: Partial<SandboxLimits>, labels?: Record<string, string>): Promise<Sandbox>;
  /** removes sandboxes of dead owners on this host, expired ones, and those whose removal failed before */
  sweep?(): Promise<{ removed: number; failed: number }>;
}
