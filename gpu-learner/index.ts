// Typed JS API of the native learner (gpu-learner/build/gpu_learner.node): Qwen3, Qwen2, Llama and Mistral decoders.
// Every heavy call runs off the event loop; calls on one Learner run one after another.
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync, renameSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import type { PackedTrainBatch as TrainBatch, StepStats } from '../lib/grpo.ts';
import { DECODER_ARCHITECTURES, decoderTensorShapes, type QwenConfig } from '../lib/qwen3.ts';
import { encodeSafetensors, type NamedTensor, type StDtype } from '../lib/safetensors.ts';
import { mulberry32 } from '../lib/seed.ts';

export type { PackedTrainBatch as TrainBatch } from '../lib/grpo.ts';
export { decoderFeatures, decoderTensorShapes, type DecoderArchitecture, type Qwen3ModelConfig, type QwenConfig } from '../lib/qwen3.ts';
export { f32ToBf16, f32ToF16, type StDtype } from '../lib/safetensors.ts';

export type Device = 'cpu' | 'cuda';

export interface TrainHyper {
  lr: number;
  weightDecay: number;
  beta1: number;
  beta2: number;
  eps: number;
  clipLow: number;
  clipHigh: number;
  maxGradNorm: number;
  lMax: number;
  mode: 'grpo++' | 'grpo';
  /** gradient accumulation over micro-batches of whole sequences with at most this many tokens (default 4096) */
  microBatchTokens?: number;
  /**
   * N of the loss normalisation (GRPO++: Σ m·ℓ / (N·L_max); GRPO: mean over N sequences): the batch's
   * sequences plus those the caller left out because they add 0 (zero advantage, no trainable token),
   * so a batch without them has the full batch's loss and gradient. Integer >= the batch's sequence
   * count; default (or 0) the batch's own count.
   */
  normSequences?: number;
}

export interface TrainStats extends StepStats {
  /** optimizer steps taken after this one */
  step: number;
  /** rows run through the model: `tokens` less what shared prompts saved (LoadOptions.minSharedPrefix) */
  rows: number;
  /**
   * packed as the batch: each trained token's (mask ≠ 0) log-prob on the weights before this step, from the step's
   * own forward; NaN elsewhere (untrained tokens, each sequence's first)
   */
  logprobs: Float32Array;
}

export interface GenerateOptions {
  maxNewTokens: number;
  /** 0 => greedy (default 1) */
  temperature?: number;
  topP?: number;
  /** same seed => same tokens; default: random */
  seed?: number;
  stopIds?: number[];
  /** sample only among these ids (renormalised), like vLLM's allowed_token_ids */
  allowedIds?: number[];
  /** also return the k most likely tokens of each position (OpenAI `logprobs: k`) */
  topLogprobs?: number;
}

export interface GenerateResult {
  /** generated tokens only (not the prompt); ends with the stop id when finishReason is 'stop' */
  ids: Int32Array;
  /**
   * log-prob of each generated token under the policy: the full-vocabulary log-softmax at
   * temperature 1, whatever temperature / topP / allowedIds were used to sample it — exactly what
   * logprobs() recomputes for the same tokens.
   */
  logprobs: Float32Array;
  finishReason: 'stop' | 'length';
  /** with topLogprobs k > 0: per position the k most likely ids, most likely first (ids.length × k) */
  topIds?: Int32Array;
  /** their log-probs, the same distribution as `logprobs` */
  topLogprobs?: Float32Array;
}

/** One token of one sequence from a batched decoding step (Learner.decodeStep). */
export interface DecodeToken {
  /** the sequence id decodeAdd gave */
  seq: number;
  /** the token */
  id: number;
  /** its log-prob, as GenerateResult.logprobs */
  logprob: number;
  /** with topLogprobs k > 0: the k most likely ids of this position and their log-probs */
  topIds?: Int32Array;
  topLogprobs?: Float32Array;
  /** set on the sequence's last token; the sequence is gone after it */
  finishReason?: 'stop' | 'length';
}

export interface TokenLoss {
  loss: number;
  dlogp: number;
  ratio: number;
  clipped: boolean;
}

export interface LoadOptions {
  device?: Device;
  /** worker threads of the CPU engine; default: all hardware threads */
  threads?: number;
  /** bench baseline only: the straightforward single-loop matmul */
  naiveMatmul?: boolean;
  /**
   * consecutive sequences of a batch sharing at least this many first tokens (a GRPO group's prompt) forward them
   * once in logprobs() and trainStep() (CPU engine); 0 turns it off. Default 32.
   */
  minSharedPrefix?: number;
  /**
   * batched decoding (CPU engine): the keys and values of recently prefilled prompts kept up to this many bytes
   * (default 256 MiB; 0: none), so a later sample of the same prompt copies them instead of prefilling it again
   */
  promptCacheBytes?: number;
  /**
   * log-probs as a half-precision server computes them (CPU engine): the weights and every tensor the forward keeps
   * rounded to bf16 or fp16, the products summed in fp32. Such a learner computes log-probs only: trainStep and
   * generation reject. The weight-sync probe's bound for a half-precision server (lib/sync-probe.ts).
   */
  emulateHalf?: 'bf16' | 'fp16';
}

interface NativeLearner {
  configJson(): string;
  modelJson(): string;
  step(): number;
  device(): string;
  generate(prompt: Int32Array, opts: object): Promise<GenerateResult>;
  logprobs(ids: Int32Array, offsets: Int32Array): Promise<Float32Array>;
  trainStep(ids: Int32Array, offsets: Int32Array, mask: Float32Array, adv: Float32Array, old: Float32Array | undefined, hp: TrainHyper): Promise<TrainStats>;
  debugLoss(ids: Int32Array, offsets: Int32Array, mask: Float32Array, adv: Float32Array, old: Float32Array | undefined, hp: TrainHyper, withGrads: boolean): Promise<number>;
  save(dir: string): Promise<void>;
  reload(dir: string): Promise<void>;
  paramInfo(): { name: string; shape: number[] }[];
  getTensor(name: string, grad: boolean): Float32Array;
  setTensor(name: string, data: Float32Array): void;
  close(): void;
  decodeAdd(prompt: Int32Array, samples: object[]): Promise<number[]>;
  decodeStep(): Promise<DecodeToken[]>;
  decodeRemove(seq: number): Promise<boolean>;
}

interface NativeModule {
  load(dir: string, device: string, threads: number, naive: boolean, minSharedPrefix?: number, promptCacheBytes?: number, emulateHalf?: string): Promise<NativeLearner>;
  grpoTokenLoss(logp: number, oldLogp: number, adv: number, clipLow: number, clipHigh: number): TokenLoss;
  cudaBuilt: boolean;
  gemmKernels(): string;
}

const addonPath = new URL('./build/gpu_learner.node', import.meta.url).pathname;
let nativeModule: NativeModule | undefined;

function native(): NativeModule {
  if (!nativeModule) {
    if (!existsSync(addonPath)) throw new Error(`gpu-learner native addon not built (${addonPath} missing): run \`node gpu-learner/build.mjs\``);
    nativeModule = createRequire(import.meta.url)(addonPath) as NativeModule;
  }
  return nativeModule;
}

/** the CPU engine's GEMM kernels, e.g. "OpenBLAS SkylakeX" (benches print it) */
export function gemmKernels(): string {
  return native().gemmKernels();
}

/** true when the addon was built with the CUDA backend */
export function cudaBuilt(): boolean {
  return native().cudaBuilt;
}

/**
 * The native GRPO++ per-token loss: ρ = exp(logp − oldLogp); ℓ = max(−A·ρ, −A·clip(ρ, 1−clipLow, 1+clipHigh));
 * dlogp = dℓ/dlogp; clipped = the clipped branch is strictly larger (gradient 0).
 */
export function grpoTokenLoss(logp: number, oldLogp: number, advantage: number, clipLow: number, clipHigh: number): TokenLoss {
  return native().grpoTokenLoss(logp, oldLogp, advantage, clipLow, clipHigh);
}

function int32(field: string, v: unknown): Int32Array {
  if (v instanceof Int32Array) return v;
  throw new TypeError(`${field} must be an Int32Array`);
}
function float32(field: string, v: unknown): Float32Array {
  if (v instanceof Float32Array) return v;
  throw new TypeError(`${field} must be a Float32Array`);
}
function idList(field: string, v: unknown): Int32Array | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v)) throw new TypeError(`${field} must be an array of token ids`);
  v.forEach((x, i) => {
    if (!Number.isInteger(x)) throw new TypeError(`${field}[${i}]=${String(x)} is not an integer token id`);
  });
  return Int32Array.from(v as number[]);
}

export class Learner {
  readonly config: QwenConfig;
  readonly device: Device;
  /** trainStep's stats carry each trained token's log-prob before the step (TrainStats.logprobs) */
  readonly stepLogprobs = true;
  #native: NativeLearner | undefined;
  #step: number;
  #tail: Promise<unknown> = Promise.resolve();
  #decoder: BatchDecoder | undefined;

  private constructor(n: NativeLearner, device: Device) {
    this.#native = n;
    // the file's fields, then the model as the engine resolved them (model_type, head_dim, rope_theta, qk_norm, biases)
    this.config = { ...(JSON.parse(n.configJson()) as QwenConfig), ...(JSON.parse(n.modelJson()) as QwenConfig) };
    this.#step = n.step();
    this.device = device;
  }

  /** All methods report bad input as a rejected promise (Error naming the field and the value). */
  /** Loads config.json + model.safetensors (or the sharded index), and optimizer.bin when present. */
  static async load(dir: string, opts: LoadOptions = {}): Promise<Learner> {
    const device = opts.device ?? 'cpu';
    if (device !== 'cpu' && device !== 'cuda') throw new TypeError(`device must be 'cpu' or 'cuda', got ${JSON.stringify(device)}`);
    const threads = opts.threads ?? 0;
    if (!Number.isInteger(threads) || threads < 0) throw new RangeError(`threads must be a non-negative integer, got ${threads}`);
    if (opts.emulateHalf !== undefined && opts.emulateHalf !== 'bf16' && opts.emulateHalf !== 'fp16') {
      throw new RangeError(`emulateHalf must be 'bf16' or 'fp16', got ${JSON.stringify(opts.emulateHalf)}`);
    }
    const n = await native().load(dir, device, threads, opts.naiveMatmul ?? false, opts.minSharedPrefix, opts.promptCacheBytes, opts.emulateHalf);
    return new Learner(n, device);
  }

  /** the continuous-batching decoder of this learner (CPU device), created on first use */
  get decoder(): BatchDecoder {
    this.#decoder ??= new BatchDecoder(this);
    return this.#decoder;
  }

  /** optimizer steps taken (restored by load when optimizer state exists) */
  get step(): number {
    return this.#step;
  }

  #run<T>(fn: (n: NativeLearner) => Promise<T> | T): Promise<T> {
    const next = this.#tail.then(() => {
      if (!this.#native) throw new Error('Learner is closed');
      return fn(this.#native);
    });
    this.#tail = next.catch(() => undefined);
    return next;
  }

  /** A call that changes the weights: after the batched-decoding sequences running now, none of which mixes weights. */
  #changingWeights<T>(fn: () => Promise<T>): Promise<T> {
    return this.#decoder ? this.#decoder.whenIdle(fn) : fn();
  }

  async generate(promptIds: Int32Array, opts: GenerateOptions): Promise<GenerateResult> {
    int32('promptIds', promptIds);
    const o = nativeGenerateOptions('generate options', opts);
    return this.#run((n) => n.generate(promptIds, o));
  }

  // ---- batched decoding (CPU device) ----
  // Running sequences decode together: each decodeStep reads the weights once for all of them. A sequence's
  // tokens and log-probs depend on its prompt, options and seed only, never on what else is in the batch, and
  // equal generate()'s for the same prompt and options. Whoever drives the steps may add and remove sequences
  // between them; BatchDecoder (below) is such a driver.

  /**
   * Starts one sequence per entry of `samples`, all continuing `promptIds`: the prompt is prefilled once and its
   * KV cache shared. Each sample needs maxNewTokens >= 1. Returns the sequence ids (increasing). reload() ends
   * every running sequence.
   */
  async decodeAdd(promptIds: Int32Array, samples: GenerateOptions[]): Promise<number[]> {
    int32('promptIds', promptIds);
    if (!Array.isArray(samples) || samples.length === 0) throw new TypeError('samples must be a non-empty array of generate options');
    const os = samples.map((o, i) => nativeGenerateOptions(`samples[${i}]`, o));
    return this.#run((n) => n.decodeAdd(promptIds, os));
  }

  /** One token for every running sequence, by increasing sequence id; a finished sequence's last token has finishReason. */
  async decodeStep(): Promise<DecodeToken[]> {
    return this.#run((n) => n.decodeStep());
  }

  /** Ends a running sequence before its end; false when there is none with that id. */
  async decodeRemove(seq: number): Promise<boolean> {
    if (!Number.isSafeInteger(seq) || seq < 0) throw new RangeError(`seq must be a sequence id (non-negative integer), got ${seq}`);
    return this.#run((n) => n.decodeRemove(seq));
  }

  /** Packed log-probs: entry t = log p(ids[t] | earlier ids of its sequence); 0 for each first token. */
  async logprobs(batch: { ids: Int32Array; offsets: Int32Array }): Promise<Float32Array> {
    const ids = int32('batch.ids', batch.ids),
      offsets = int32('batch.offsets', batch.offsets);
    return this.#run((n) => n.logprobs(ids, offsets));
  }

  /** One GRPO++ (or GRPO) optimizer step over the packed batch (DESIGN §5). */
  async trainStep(batch: TrainBatch, hp: TrainHyper): Promise<TrainStats> {
    const a = trainArgs(batch);
    const st = await this.#changingWeights(() => this.#run((n) => n.trainStep(a.ids, a.offsets, a.mask, a.advantages, a.oldLogprobs, hp)));
    this.#step = st.step;
    return st;
  }

  /** Atomically writes model.safetensors (F32), config.json and optimizer.bin into dir. */
  async save(dir: string): Promise<void> {
    return this.#run((n) => n.save(dir));
  }

  /** Replaces the weights (and optimizer state when present) in place from dir; same model shape required. Ends every batched-decoding sequence. */
  async reload(dir: string): Promise<void> {
    this.#decoder?.failAll(new Error(`batched decoding: the model was reloaded from ${dir}`));
    await this.#run((n) => n.reload(dir));
    this.#step = await this.#run((n) => n.step());
  }

  /** Releases the native model (after any call in flight). */
  close(): void {
    this.#decoder?.failAll(new Error('batched decoding: the learner was closed'));
    const n = this.#native;
    this.#native = undefined;
    if (n) void this.#tail.then(() => n.close());
  }

  // ---- debugging / testing ----

  /** The loss of trainStep without stepping, and the gradient of every parameter tensor. */
  async debugGradients(batch: TrainBatch, hp: TrainHyper): Promise<{ loss: number; grads: Map<string, Float32Array> }> {
    const a = trainArgs(batch);
    return this.#run(async (n) => {
      const loss = await n.debugLoss(a.ids, a.offsets, a.mask, a.advantages, a.oldLogprobs, hp, true);
      const grads = new Map<string, Float32Array>();
      for (const p of n.paramInfo()) grads.set(p.name, n.getTensor(p.name, true));
      return { loss, grads };
    });
  }

  /** The loss of trainStep on the current weights, without gradients or a step. */
  async debugLoss(batch: TrainBatch, hp: TrainHyper): Promise<number> {
    const a = trainArgs(batch);
    return this.#run((n) => n.debugLoss(a.ids, a.offsets, a.mask, a.advantages, a.oldLogprobs, hp, false));
  }

  /** Parameter tensors in allocation order, with Hugging Face names and shapes. */
  async paramInfo(): Promise<{ name: string; shape: number[] }[]> {
    return this.#run((n) => n.paramInfo());
  }
  async getParam(name: string): Promise<Float32Array> {
    return this.#run((n) => n.getTensor(name, false));
  }
  async setParam(name: string, data: Float32Array): Promise<void> {
    float32('data', data);
    return this.#changingWeights(() => this.#run((n) => n.setTensor(name, data)));
  }
}

function nativeGenerateOptions(field: string, opts: GenerateOptions): object {
  if (typeof opts !== 'object' || opts === null) throw new TypeError(`${field} must be an object`);
  return {
    maxNewTokens: opts.maxNewTokens,
    temperature: opts.temperature ?? 1,
    topP: opts.topP ?? 1,
    seed: opts.seed ?? Math.floor(Math.random() * 2 ** 52),
    stopIds: idList(`${field}.stopIds`, opts.stopIds),
    allowedIds: idList(`${field}.allowedIds`, opts.allowedIds),
    topLogprobs: opts.topLogprobs ?? 0,
  };
}

/** A sequence BatchDecoder waits on: what it produced so far. */
interface Pending {
  ids: number[];
  logprobs: number[];
  topIds: number[];
  topLogprobs: number[];
  topK: number;
  done: (r: GenerateResult) => void;
  fail: (e: unknown) => void;
}

/** One generate() call: its samples, waiting for admission, then running as sequences. */
interface Call {
  prompt: Int32Array;
  samples: GenerateOptions[];
  /** one per sample */
  pending: Pending[];
  /** its sequence ids once admitted */
  seqs: number[];
  aborted: boolean;
}

/**
 * Continuous batching over one Learner: every generate() call joins the running batch at the next step and
 * leaves it when its sequences finish, so concurrent callers share decode steps (one read of the weights per
 * step for all of them). Calls waiting for the same step with the same prompt are admitted together, so their
 * prompt is prefilled once (a GRPO group's rollouts starting at once). Results equal Learner.generate's for the
 * same prompt and options, whatever else runs. The decoder drives decodeStep while any sequence runs; other
 * Learner calls (logprobs) interleave between steps; a weight change (trainStep, setParam) waits for the running
 * sequences and admits none meanwhile, so no sequence mixes weights; reload() and close() fail the calls in flight.
 */
export class BatchDecoder {
  readonly #learner: Learner;
  readonly #waiting = new Map<number, Pending>();
  /** calls not admitted yet, in arrival order */
  #queue: Call[] = [];
  #driving = false;
  /** weight changes waiting for the running sequences; no admission while > 0 */
  #holds = 0;
  #idle: (() => void)[] = [];
  /** observers (the policy server's metrics): sequences in each decoding step; sequences sharing each prefill */
  onStep?: (sequences: number) => void;
  onPrefill?: (sequences: number) => void;

  constructor(learner: Learner) {
    this.#learner = learner;
  }

  /** sequences running now */
  get running(): number {
    return this.#waiting.size;
  }

  /**
   * samples.length samples of one prompt (a GRPO group shares the prompt's prefill), decoded with everything
   * else running; resolves with one result per sample. An aborted signal ends them and rejects with its reason.
   */
  async generate(promptIds: Int32Array, samples: GenerateOptions[], signal?: AbortSignal): Promise<GenerateResult[]> {
    signal?.throwIfAborted();
    int32('promptIds', promptIds);
    if (!Array.isArray(samples)) throw new TypeError('samples must be an array of generate options');
    const live = samples.filter((o) => o?.maxNewTokens !== 0); // maxNewTokens 0: nothing to decode
    let got: GenerateResult[] = [];
    if (live.length) {
      const call: Call = { prompt: promptIds, samples: live, pending: [], seqs: [], aborted: false };
      const results = live.map(
        (o) =>
          new Promise<GenerateResult>((done, fail) => {
            call.pending.push({ ids: [], logprobs: [], topIds: [], topLogprobs: [], topK: o.topLogprobs ?? 0, done, fail });
          }),
      );
      const abort = () => this.#abort(call, signal!.reason);
      signal?.addEventListener('abort', abort, { once: true });
      this.#queue.push(call);
      this.#drive();
      try {
        got = await Promise.all(results);
      } finally {
        signal?.removeEventListener('abort', abort);
      }
    }
    let k = 0;
    return samples.map((o): GenerateResult => (o?.maxNewTokens === 0 ? { ids: new Int32Array(0), logprobs: new Float32Array(0), finishReason: 'length' } : got[k++]));
  }

  /** Rejects every call in flight, running or waiting (their native sequences are gone, e.g. after reload). */
  failAll(err: unknown): void {
    for (const w of this.#waiting.values()) w.fail(err);
    this.#waiting.clear();
    for (const c of this.#queue.splice(0)) for (const p of c.pending) p.fail(err);
  }

  /** Runs `fn` once the running sequences have finished, admitting none meanwhile (a weight change). */
  async whenIdle<T>(fn: () => Promise<T>): Promise<T> {
    this.#holds++;
    try {
      while (this.#driving) await new Promise<void>((r) => this.#idle.push(r));
      return await fn();
    } finally {
      if (--this.#holds === 0 && this.#queue.length) this.#drive();
    }
  }

  #abort(c: Call, reason: unknown): void {
    c.aborted = true;
    const q = this.#queue.indexOf(c);
    if (q >= 0) this.#queue.splice(q, 1);
    for (const seq of c.seqs) if (this.#waiting.delete(seq)) void this.#learner.decodeRemove(seq).catch(() => undefined);
    for (const p of c.pending) p.fail(reason);
  }

  /** Admits the waiting calls: one decodeAdd (one prefill) per distinct prompt. */
  async #admit(): Promise<void> {
    const byPrompt = new Map<string, Call[]>();
    for (const c of this.#queue.splice(0)) {
      const key = c.prompt.join(',');
      byPrompt.set(key, [...(byPrompt.get(key) ?? []), c]);
    }
    for (const group of byPrompt.values()) {
      const fail = (c: Call) => (err: unknown) => {
        for (const p of c.pending) p.fail(err);
      };
      if (group.length === 1) await this.#add(group).catch(fail(group[0]));
      // a merged admission that fails is retried call by call, so an error reaches only the call it belongs to
      else
        await this.#add(group).catch(async () => {
          for (const c of group) if (!c.aborted) await this.#add([c]).catch(fail(c));
        });
    }
  }

  async #add(group: Call[]): Promise<void> {
    const seqs = await this.#learner.decodeAdd(
      group[0].prompt,
      group.flatMap((c) => c.samples),
    );
    this.onPrefill?.(seqs.length);
    let k = 0;
    for (const c of group) {
      c.seqs = seqs.slice(k, (k += c.samples.length));
      c.seqs.forEach((seq, i) => this.#waiting.set(seq, c.pending[i]));
      if (c.aborted) this.#abort(c, undefined); // aborted while its prompt was prefilled (already rejected)
    }
  }

  #drive(): void {
    if (this.#driving) return;
    this.#driving = true;
    void (async () => {
      try {
        for (;;) {
          if (this.#queue.length && !this.#holds) await this.#admit();
          if (this.#waiting.size === 0) {
            if (this.#queue.length && !this.#holds) continue;
            break;
          }
          const toks = await this.#learner.decodeStep();
          if (toks.length === 0) {
            const err = new Error('batched decoding: the model ended every running sequence (reloaded or closed)');
            for (const w of this.#waiting.values()) w.fail(err);
            this.#waiting.clear();
            continue;
          }
          this.onStep?.(toks.length);
          for (const t of toks) this.#deliver(t);
        }
      } catch (e) {
        this.failAll(e);
      } finally {
        this.#driving = false;
        if (this.#waiting.size > 0 || (this.#queue.length > 0 && !this.#holds)) this.#drive();
        else for (const r of this.#idle.splice(0)) r();
      }
    })();
  }

  #deliver(t: DecodeToken): void {
    const w = this.#waiting.get(t.seq);
    if (!w) return; // aborted: its removal is queued
    w.ids.push(t.id);
    w.logprobs.push(t.logprob);
    if (w.topK > 0 && t.topIds && t.topLogprobs) {
      w.topIds.push(...t.topIds);
      w.topLogprobs.push(...t.topLogprobs);
    }
    if (!t.finishReason) return;
    this.#waiting.delete(t.seq);
    const r: GenerateResult = { ids: Int32Array.from(w.ids), logprobs: Float32Array.from(w.logprobs), finishReason: t.finishReason };
    if (w.topK > 0) {
      r.topIds = Int32Array.from(w.topIds);
      r.topLogprobs = Float32Array.from(w.topLogprobs);
    }
    w.done(r);
  }
}

function trainArgs(b: TrainBatch): Required<Omit<TrainBatch, 'oldLogprobs'>> & { oldLogprobs: Float32Array | undefined } {
  if (typeof b !== 'object' || b === null) throw new TypeError('batch must be an object');
  return {
    ids: int32('batch.ids', b.ids),
    offsets: int32('batch.offsets', b.offsets),
    mask: float32('batch.mask', b.mask),
    advantages: float32('batch.advantages', b.advantages),
    oldLogprobs: b.oldLogprobs === undefined ? undefined : float32('batch.oldLogprobs', b.oldLogprobs),
  };
}

// ---------------------------------------------------------------- checkpoints from TypeScript

/** Writes a safetensors file (tensors converted to dtype), atomically; part by part (a file may pass 2 GiB). */
export function writeSafetensors(path: string, tensors: NamedTensor[], dtype: StDtype = 'F32'): void {
  const tmp = `${path}.tmp${process.pid}`;
  const fd = openSync(tmp, 'w');
  try {
    for (const part of encodeSafetensors(tensors, { dtype })) {
      for (let off = 0; off < part.length;) off += writeSync(fd, part, off, Math.min(part.length - off, 1 << 30));
    }
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

/** lib/seed.ts's mulberry32; seed 0 walks from the golden ratio, as random checkpoints always have. */
const rng = (seed: number): (() => number) => mulberry32(seed >>> 0 || 0x9e3779b9);

export interface RandomCheckpointOptions {
  dtype?: StDtype;
  /** std of the matrices (default config.initializer_range ?? 0.02) */
  std?: number;
  /** uniform noise added to the norm weights (default 0: all ones, as Hugging Face initialises) */
  normNoise?: number;
}

/** Writes config.json + model.safetensors of a random model (config.model_type, default qwen3) into dir. */
export function writeRandomCheckpoint(dir: string, config: QwenConfig, seed: number, opts: RandomCheckpointOptions = {}): void {
  mkdirSync(dir, { recursive: true });
  const rand = rng(seed);
  const normal = () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
  const std = opts.std ?? (typeof config.initializer_range === 'number' ? config.initializer_range : 0.02);
  const noise = opts.normNoise ?? 0;
  const tensors = decoderTensorShapes(config).map(([name, shape]) => {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    const isNorm = name.endsWith('norm.weight');
    for (let i = 0; i < data.length; i++) data[i] = isNorm ? 1 + noise * (2 * rand() - 1) : std * normal();
    return { name, shape, data };
  });
  writeSafetensors(join(dir, 'model.safetensors'), tensors, opts.dtype ?? 'F32');
  const arch = config.model_type ?? 'qwen3';
  const full = { architectures: [DECODER_ARCHITECTURES[arch]], model_type: arch, hidden_act: 'silu', torch_dtype: 'float32', ...config };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(full, null, 2) + '\n');
}

/** Reads dir/config.json (no validation beyond JSON; the native loader validates). */
export function readConfig(dir: string): QwenConfig {
  return JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as QwenConfig;
}
