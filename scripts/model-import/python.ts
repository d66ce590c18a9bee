// The Python half of `swerl model import` (gguf_import.py in the torch venv): one subcommand per call, its
// JSON lines turned into progress callbacks, a result, or a ModelImportError naming the problem.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'gguf_import.py');

export type ImportErrorKind =
  | 'unknown_model'
  | 'bad_option'
  | 'hash_mismatch'
  | 'download_failed'
  | 'unsupported_architecture'
  | 'unsupported_quantization'
  | 'unsupported_tensor'
  | 'unsupported_tokenizer'
  | 'no_space'
  | 'bad_artifact'
  | 'out_exists';

/** A failure of the import that names its cause (`kind`) and what to do. */
export class ModelImportError extends Error {
  constructor(
    readonly kind: ImportErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'ModelImportError';
  }
}

export interface ImportProgress {
  phase: string;
  done: number;
  total: number;
}
export type ProgressFn = (p: ImportProgress) => void;

/** Runs `gguf_import.py ARGS` with `python`; resolves with its result object. */
export function runImportScript<T = Record<string, unknown>>(python: string, args: string[], onProgress?: ProgressFn): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, [SCRIPT, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, HF_HUB_OFFLINE: '1', TRANSFORMERS_VERBOSITY: 'error', TQDM_DISABLE: '1', PYTHONUNBUFFERED: '1' },
    });
    let result: T | undefined;
    let failure: ModelImportError | undefined;
    let buf = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => {
      buf += b.toString('utf8');
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line.startsWith('{')) continue;
        const msg = JSON.parse(line) as { progress?: ImportProgress; result?: T; error?: { kind: ImportErrorKind; message: string } };
        if (msg.progress) onProgress?.(msg.progress);
        if (msg.result) result = msg.result;
        if (msg.error) failure = new ModelImportError(msg.error.kind, msg.error.message);
      }
    });
    child.stderr.on('data', (b: Buffer) => {
      stderr += b.toString('utf8');
      if (stderr.length > 200_000) stderr = stderr.slice(-100_000);
    });
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      if (failure) return reject(failure);
      if (code === 0 && result !== undefined) return resolve(result);
      const enospc = /No space left on device|ENOSPC|Errno 28/.test(stderr);
      if (enospc) return reject(new ModelImportError('no_space', `no space left on the device during \`${args[0]}\`: ${stderr.trim().split('\n').at(-1)}`));
      reject(new Error(`gguf_import.py ${args[0]} failed (exit ${code ?? signal}):\n${stderr.trim().split('\n').slice(-15).join('\n')}`));
    });
  });
}
