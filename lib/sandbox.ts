// The one sandbox interface (DESIGN §3). Backends: activities/sandbox/docker.ts, activities/sandbox/k8s.ts.
// The repository sits at /testbed inside every sandbox.

export interface SandboxLimits {
  /** CPU cores (fractional allowed) */
  cpus: number;
  memoryBytes: number;
  pids: number;
}

export const DEFAULT_LIMITS: SandboxLimits = { cpus: 1, memoryBytes: 1 << 30, pids: 512 };

export interface ExecResult {
  exit: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** true when stdout or stderr was cut at the capture cap */
  truncated?: boolean;
}

export interface ExecOptions {
  /** working directory, default /testbed */
  cwd?: string;
  env?: Record<string, string>;
  /** bytes kept per stream, default 1 MiB */
  maxOutputBytes?: number;
}

export interface Sandbox {
  readonly id: string;
  /** run `cmd` with `bash -lc`; the process group is killed at `timeoutS` and `timedOut` is set */
  exec(cmd: string, timeoutS: number, opts?: ExecOptions): Promise<ExecResult>;
  readFile(path: string): Promise<string>;
  writeFile(path: string, content: string): Promise<void>;
  /** copy host files/dirs (tar) into `destDir`; entries escaping destDir are refused */
  copyIn(files: { path: string; content: string | Uint8Array; mode?: number }[], destDir: string): Promise<void>;
  /** `git add -A && git diff --cached` in /testbed, minus paths matching the scratch globs */
  diff(excludeGlobs?: string[]): Promise<string>;
  stop(): Promise<void>;
}

export interface SandboxBackend {
  readonly name: 'docker' | 'kubernetes';
  start(image: string, limits?: Partial<SandboxLimits>, labels?: Record<string, string>): Promise<Sandbox>;
}
