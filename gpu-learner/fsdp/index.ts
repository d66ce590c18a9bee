// The FSDP engine's handle in the learner worker (DESIGN §6): starts the long-lived torchrun process group
// (gpu-learner/fsdp/swerl_fsdp/trainer.py), keeps it between iterations and talks to its rank 0 over a
// control socket (one JSON request per line, progress lines per micro-batch). A rank that dies ends the
// group (torchrun, --max-restarts 0): every pending call rejects, and the caller starts a new group.
// torchrun starts each rank in a session of its own, so ending a group kills the ranks as well as torchrun.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { readFileSync, writeFileSync, renameSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { PackedTrainBatch, StepStats } from '../../lib/grpo.ts';
import { decodeSafetensors, encodeSafetensors } from '../../lib/safetensors.ts';
import type { TrainHyper } from '../index.ts';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..');

export interface FsdpOptions {
  device: 'cpu' | 'cuda';
  nprocPerNode: number;
  nnodes: number;
  /** this node's rank in a multi-node group (the learner worker's node is 0) */
  nodeRank?: number;
  /** HOST:PORT of torchrun's c10d rendezvous (required when nnodes > 1) */
  rdzvEndpoint?: string;
  /** address rank 0 reaches this worker's control socket on (127.0.0.1 on one node) */
  controlHost: string;
  paramDtype: 'auto' | 'bfloat16' | 'float32';
  reduceDtype: 'float32' | 'bfloat16';
  cpuOffload: boolean;
  activationCheckpointing: boolean;
  maxTokensPerMicroBatch: number;
  attnImplementation: string;
  checkpointShardMB: number;
  /** no message from the group for this long while a call is pending: the group is killed (a hung rank) */
  stallTimeoutSeconds: number;
  collectiveTimeoutSeconds: number;
  /** torch threads per rank on the CPU (0: cores / ranks) */
  threads?: number;
  /** the venv's python (default: scripts/ensure-python.sh torch | torch-cuda) */
  python?: string;
}

/** Bad input the group refused (the same on every rank; the group lives on). Retrying cannot help. */
export class FsdpInputError extends Error {
  override name = 'FsdpInputError';
}

export interface FsdpProgress {
  /** "load" | "train" | "save" */
  phase: string;
  /** what of the phase is done ("model", "weights") */
  part?: string;
  microBatch?: number;
  microBatches?: number;
}

interface Pending {
  resolve: (v: Record<string, unknown>) => void;
  reject: (e: Error) => void;
  onProgress?: (p: FsdpProgress) => void;
}

/** The python of the project-local venv for `device` (installs it when missing; fast when present). */
export function fsdpPython(device: 'cpu' | 'cuda'): string {
  const group = device === 'cuda' ? 'torch-cuda' : 'torch';
  const r = spawnSync('bash', [join(repo, 'scripts', 'ensure-python.sh'), group], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (r.status !== 0) throw new Error(`scripts/ensure-python.sh ${group} failed (exit ${r.status})`);
  return r.stdout.trim().split('\n').at(-1)!;
}

/** The packed batch as the trainer reads it: safetensors ids/offsets (I32), mask/advantages/old_logprobs (F32). */
export function encodeTrainBatch(b: PackedTrainBatch): Buffer {
  const t = [
    { name: 'ids', shape: [b.ids.length], data: b.ids },
    { name: 'offsets', shape: [b.offsets.length], data: b.offsets },
    { name: 'mask', shape: [b.mask.length], data: b.mask },
    { name: 'advantages', shape: [b.advantages.length], data: b.advantages },
    ...(b.oldLogprobs ? [{ name: 'old_logprobs', shape: [b.oldLogprobs.length], data: b.oldLogprobs }] : []),
  ];
  return Buffer.concat(encodeSafetensors(t));
}

export function writeTrainBatch(path: string, b: PackedTrainBatch): void {
  const tmp = `${path}.tmp${process.pid}`;
  writeFileSync(tmp, encodeTrainBatch(b));
  renameSync(tmp, path);
}

export class FsdpLearner extends EventEmitter {
  readonly rankPids: number[];
  readonly worldSize: number;
  /** optimizer steps taken (from the loaded checkpoint on) */
  step = 0;
  /** the checkpoint directory whose weights the group holds, null after a step until saved */
  loaded: string | null = null;
  private pending = new Map<number, Pending>();
  private nextId = 1;
  private stallTimer: NodeJS.Timeout | null = null;
  private dead: Error | null = null;
  readonly exited: Promise<{ code: number | null; signal: string | null }>;

  private constructor(
    private readonly child: ChildProcess,
    private readonly sock: Socket,
    private readonly server: Server,
    hello: { pids: number[]; worldSize: number },
    private readonly opts: FsdpOptions,
    private readonly stderrTail: string[],
    exited: Promise<{ code: number | null; signal: string | null }>,
    /** the `--control` argument every rank of this group was started with (identifies them in /proc) */
    private readonly controlArg: string,
  ) {
    super();
    this.rankPids = hello.pids;
    this.worldSize = hello.worldSize;
    this.exited = exited;
    void exited.then(({ code, signal }) => this.fail(new Error(`FSDP process group exited (${signal ?? `code ${code}`}): ${this.tail()}`)));
    sock.on('close', () => this.fail(new Error(`FSDP process group closed its control connection: ${this.tail()}`)));
  }

  /** Starts torchrun and waits for rank 0's hello (every rank is up, the process group formed). */
  static async start(opts: FsdpOptions, log: (line: string) => void = () => {}): Promise<FsdpLearner> {
    validateOptions(opts);
    const python = opts.python ?? fsdpPython(opts.device);
    const server = createServer();
    await new Promise<void>((res, rej) => server.listen(0, opts.controlHost === '127.0.0.1' ? '127.0.0.1' : '0.0.0.0', res).on('error', rej));
    const port = (server.address() as { port: number }).port;
    const threads = opts.threads || Math.max(1, Math.floor(cpus().length / opts.nprocPerNode));
    const trainerConfig = {
      device: opts.device,
      param_dtype: opts.paramDtype === 'auto' ? (opts.device === 'cuda' ? 'bfloat16' : 'float32') : opts.paramDtype,
      reduce_dtype: opts.reduceDtype,
      cpu_offload: opts.cpuOffload,
      activation_checkpointing: opts.activationCheckpointing,
      max_tokens_per_micro_batch: opts.maxTokensPerMicroBatch,
      attn_implementation: opts.attnImplementation,
      checkpoint_shard_bytes: Math.max(1, Math.round(opts.checkpointShardMB * 1024 * 1024)),
      collective_timeout_seconds: opts.collectiveTimeoutSeconds,
      threads: opts.device === 'cpu' ? threads : 0,
    };
    const launch =
      opts.nnodes === 1
        ? ['--standalone', `--nnodes=1`]
        : [`--nnodes=${opts.nnodes}`, `--node-rank=${opts.nodeRank ?? 0}`, '--rdzv-backend=c10d', `--rdzv-endpoint=${opts.rdzvEndpoint}`];
    const args = [
      '-m',
      'torch.distributed.run',
      ...launch,
      `--nproc-per-node=${opts.nprocPerNode}`,
      '--max-restarts=0',
      '--monitor-interval=0.5',
      '-m',
      'swerl_fsdp.trainer',
      '--control',
      `${opts.controlHost}:${port}`,
      '--config',
      JSON.stringify(trainerConfig),
    ];
    const child = spawn(python, args, {
      env: { ...process.env, PYTHONPATH: here, OMP_NUM_THREADS: String(threads), PYTHONUNBUFFERED: '1', TRANSFORMERS_VERBOSITY: 'error' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group: close() and kill() end torchrun and every rank
    });
    const stderrTail: string[] = [];
    const keep = (line: string) => {
      if (!line.trim()) return;
      stderrTail.push(line);
      if (stderrTail.length > 40) stderrTail.shift();
      log(line);
    };
    let buf = '';
    const onData = (d: Buffer) => {
      buf += d.toString();
      const lines = buf.split('\n');
      buf = lines.pop()!;
      lines.forEach(keep);
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    const exited = new Promise<{ code: number | null; signal: string | null }>((res) => child.on('exit', (code, signal) => res({ code, signal })));
    const tail = () => stderrTail.slice(-12).join('\n');
    try {
      const sock = await Promise.race([
        new Promise<Socket>((res) => server.once('connection', res)),
        exited.then(({ code, signal }) => Promise.reject(new Error(`FSDP process group exited before starting (${signal ?? `code ${code}`}): ${tail()}`))),
      ]);
      const lines = lineReader(sock);
      const hello = JSON.parse(await Promise.race([lines.next(), exited.then(() => Promise.reject(new Error(`FSDP process group exited before starting: ${tail()}`)))]));
      if (hello.fatal) throw hello.kind === 'input' ? new FsdpInputError(hello.fatal) : new Error(hello.fatal);
      const l = new FsdpLearner(child, sock, server, hello, opts, stderrTail, exited, `${opts.controlHost}:${port}`);
      void (async () => {
        for (;;) {
          const line = await lines.next().catch(() => null);
          if (line === null) return;
          l.onMessage(JSON.parse(line));
        }
      })();
      return l;
    } catch (e) {
      killGroup(child);
      server.close();
      throw e;
    }
  }

  private tail(): string {
    return this.stderrTail
      .filter((l) => !/Warning|warn\(/.test(l))
      .slice(-12)
      .join('\n');
  }

  private onMessage(m: Record<string, unknown>): void {
    this.armStall();
    const p = this.pending.get(m.id as number);
    if (!p) return;
    if (m.progress) {
      p.onProgress?.(m.progress as FsdpProgress);
      this.emit('progress', m.progress);
      return;
    }
    this.pending.delete(m.id as number);
    if (!this.pending.size && this.stallTimer) clearTimeout(this.stallTimer);
    if (m.ok) p.resolve(m);
    else p.reject(m.kind === 'input' ? new FsdpInputError(String(m.error)) : new Error(String(m.error)));
  }

  private armStall(): void {
    if (this.stallTimer) clearTimeout(this.stallTimer);
    if (!this.pending.size) return;
    this.stallTimer = setTimeout(() => {
      this.fail(new Error(`FSDP process group made no progress for ${this.opts.stallTimeoutSeconds} s (a rank hung?); killed it`));
      this.kill();
    }, this.opts.stallTimeoutSeconds * 1000);
  }

  private fail(e: Error): void {
    if (!this.dead) this.dead = e;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    for (const p of this.pending.values()) p.reject(this.dead);
    this.pending.clear();
    this.server.close();
  }

  /** why the group stopped (a rank's death, a stall, a close), or null while it lives */
  get failure(): string | null {
    return this.dead?.message ?? null;
  }

  /** false once any rank died or the group was closed */
  get alive(): boolean {
    return this.dead === null;
  }

  private call(req: Record<string, unknown>, onProgress?: (p: FsdpProgress) => void): Promise<Record<string, unknown>> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onProgress });
      this.armStall();
      this.sock.write(JSON.stringify({ id, ...req }) + '\n');
    });
  }

  /** Loads the weights (and AdamW state when present) of a checkpoint directory into every rank. */
  async load(dir: string): Promise<void> {
    const r = await this.call({ op: 'load', dir });
    this.step = r.step as number;
    this.loaded = dir;
  }

  /** One GRPO++ optimizer step on the packed batch file (writeTrainBatch); the same StepStats as gpu-learner. */
  async trainStep(batchPath: string, hp: TrainHyper, onProgress?: (p: FsdpProgress) => void): Promise<StepStats & { step: number; microBatches: number }> {
    this.loaded = null;
    const r = await this.call({ op: 'step', batch: batchPath, hp }, onProgress);
    this.step = r.step as number;
    return {
      loss: r.loss as number,
      gradNorm: r.gradNorm as number,
      clipFraction: r.clipFraction as number,
      meanRatio: r.meanRatio as number,
      tokens: r.tokens as number,
      seconds: r.seconds as number,
      skipped: r.skipped as boolean,
      step: r.step as number,
      microBatches: r.microBatches as number,
    };
  }

  /**
   * Packed log-probs of the batch file's sequences on the current weights (no update): entry t = log p(ids[t] | earlier
   * ids of its sequence), 0 for each first token, as gpu-learner's Learner.logprobs. The group writes them beside the
   * batch (`<batch>.logprobs.safetensors`), read back here.
   */
  async logprobs(batchPath: string, onProgress?: (p: FsdpProgress) => void): Promise<Float32Array> {
    const out = `${batchPath}.logprobs.safetensors`;
    await this.call({ op: 'logprobs', batch: batchPath, out }, onProgress);
    const t = decodeSafetensors(readFileSync(out)).get('logprobs');
    if (!t || !(t.data instanceof Float32Array)) throw new Error(`FSDP logprobs: ${out} holds no F32 tensor "logprobs"`);
    return t.data;
  }

  /** Writes safetensors (sharded, indexed), config.json (from srcDir, dtype float32) and optimizer state into dir. */
  async save(dir: string, srcDir: string, onProgress?: (p: FsdpProgress) => void): Promise<void> {
    await this.call({ op: 'save', dir, src: srcDir }, onProgress);
  }

  /** Asks the group to exit, then kills whatever is left. */
  async close(): Promise<void> {
    if (!this.dead) {
      const bye = this.call({ op: 'shutdown' }).catch(() => undefined);
      await Promise.race([bye.then(() => this.exited), new Promise((r) => setTimeout(r, 10_000))]);
    }
    this.kill();
    this.sock.destroy();
    this.fail(new Error('FSDP process group closed'));
    await Promise.race([this.exited, new Promise((r) => setTimeout(r, 5000))]);
  }

  /** SIGKILLs this host's ranks (each leads its own process group) and torchrun's group. */
  private kill(): void {
    for (const pid of this.rankPids) {
      let argv: string[];
      try {
        argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      } catch {
        continue; // gone, on another node, or no /proc
      }
      if (!argv.includes(this.controlArg)) continue; // a pid reused by someone else's process
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
    killGroup(this.child);
  }
}

function killGroup(child: ChildProcess): void {
  if (child.exitCode !== null || child.signalCode !== null || !child.pid) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    /* already gone */
  }
}

function lineReader(sock: Socket): { next(): Promise<string> } {
  let buf = '';
  const lines: string[] = [];
  const waiters: { res: (l: string) => void; rej: (e: Error) => void }[] = [];
  let closed = false;
  sock.on('data', (d) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const l = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiters.shift();
      if (w) w.res(l);
      else lines.push(l);
    }
  });
  sock.on('close', () => {
    closed = true;
    for (const w of waiters.splice(0)) w.rej(new Error('control connection closed'));
  });
  return {
    next: () =>
      lines.length ? Promise.resolve(lines.shift()!) : closed ? Promise.reject(new Error('control connection closed')) : new Promise((res, rej) => waiters.push({ res, rej })),
  };
}

/** Host facts the schema cannot check (errors name the config field). */
export function validateOptions(o: FsdpOptions): void {
  if (o.device === 'cpu' && o.nprocPerNode > cpus().length) {
    throw new FsdpInputError(`config.learner.fsdp.nprocPerNode: ${o.nprocPerNode} processes per node but this host has ${cpus().length} CPU cores (learner.device "cpu")`);
  }
  if (o.nnodes > 1 && !o.rdzvEndpoint) throw new FsdpInputError(`config.learner.fsdp.rdzvEndpoint: required when nnodes is ${o.nnodes} (HOST:PORT of the rendezvous)`);
}
