// How generations run on a served model: the engine side of generation.ts's `engineCall`. One scheduler per
// model object, so each model the server holds (a swap's old and new model, a cache of several) has its own batch.
// - Batched (the default): continuous batching through the model's decoder (gpu-learner's BatchDecoder).
//   Concurrent requests share decode steps, joining and leaving between steps; a request's n samples, and
//   requests with the same prompt admitted at the same step, share the prompt's prefill. At most `maxBatch`
//   sequences decode at once on a model (each holds a KV cache); later requests wait their turn in arrival order.
// - One at a time (`batching: false`, today's single-stream server, and engines without batched decoding: the
//   CUDA backend): one engine call per sample, in turn.
// Both give the same tokens and log-probs for the same request and seed, whatever else runs.
import { policyBatchSize, policyPrefillSequences, policyQueuedSequences } from '../lib/metrics.ts';
import type { ServableModel } from './models.ts';

/** One sample as the engine takes it (gpu-learner's GenerateOptions). */
export type EngineSample = Parameters<ServableModel['generate']>[1];
export type EngineResult = Awaited<ReturnType<ServableModel['generate']>>;

/** What the server needs of gpu-learner's BatchDecoder (`Learner.decoder`). */
export interface BatchDecoding {
  generate(promptIds: Int32Array, samples: EngineSample[], signal?: AbortSignal): Promise<EngineResult[]>;
  onStep?: (sequences: number) => void;
  onPrefill?: (sequences: number) => void;
}

export interface BatchingOptions {
  /** false: one request at a time per model (the single-stream server) */
  batching: boolean;
  /** most sequences decoding together on one model */
  maxBatch: number;
}

/** Sequences decoding together on one model by default: the 16 streams the server is measured at (bench/learner.ts). */
export const MAX_BATCH_DEFAULT = 16;

// Only the CPU backend decodes in batches; the others refuse, naming their device (gpu-learner/src/common.cpp).
const NO_BATCHED_DECODING = /batched decoding is implemented by the cpu backend only/;

const decoderOf = (m: ServableModel): BatchDecoding | undefined => (m as { decoder?: BatchDecoding }).decoder;

/** The schedulers of one server's models. */
export class Schedulers {
  readonly #byModel = new WeakMap<ServableModel, ModelScheduler>();

  constructor(readonly options: BatchingOptions) {
    if (!Number.isInteger(options.maxBatch) || options.maxBatch < 1) throw new RangeError(`maxBatch: must be a positive integer, got ${options.maxBatch}`);
  }

  of(model: ServableModel): ModelScheduler {
    let s = this.#byModel.get(model);
    if (!s) this.#byModel.set(model, (s = new ModelScheduler(model, this.options)));
    return s;
  }
}

export class ModelScheduler {
  #batched: boolean;
  /** sequences handed to the decoder and not finished */
  #admitted = 0;
  readonly #waiting: { sequences: number; admit: () => void }[] = [];

  constructor(
    private readonly model: ServableModel,
    private readonly options: BatchingOptions,
  ) {
    const decoder = options.batching ? decoderOf(model) : undefined;
    this.#batched = decoder !== undefined;
    if (decoder) {
      decoder.onStep = (n) => policyBatchSize.observe(n);
      decoder.onPrefill = (n) => policyPrefillSequences.observe(n);
    }
  }

  /** whether requests on this model decode together */
  get batched(): boolean {
    return this.#batched;
  }

  /** One result per sample, all continuing `promptIds`. An aborted signal ends the request and rejects with its reason. */
  async generate(promptIds: Int32Array, samples: EngineSample[], signal?: AbortSignal): Promise<EngineResult[]> {
    if (this.#batched) {
      await this.#admission(samples.length, signal);
      try {
        return await decoderOf(this.model)!.generate(promptIds, samples, signal);
      } catch (e) {
        if (!NO_BATCHED_DECODING.test((e as Error)?.message ?? '')) throw e;
        this.#batched = false; // nothing was decoded: this request and the later ones run one at a time
      } finally {
        this.#release(samples.length);
      }
    }
    const out: EngineResult[] = [];
    for (const s of samples) {
      signal?.throwIfAborted();
      out.push(await this.model.generate(promptIds, s));
    }
    return out;
  }

  /** Waits until `k` more sequences fit in the batch (a request larger than the batch runs when it is alone). */
  #admission(k: number, signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted();
    if (this.#waiting.length === 0 && this.#fits(k)) {
      this.#admitted += k;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const entry = {
        sequences: k,
        admit: () => {
          signal?.removeEventListener('abort', abort);
          policyQueuedSequences.dec(k);
          this.#admitted += k;
          resolve();
        },
      };
      const abort = () => {
        this.#waiting.splice(this.#waiting.indexOf(entry), 1);
        policyQueuedSequences.dec(k);
        reject(signal!.reason);
        this.#release(0);
      };
      signal?.addEventListener('abort', abort, { once: true });
      policyQueuedSequences.inc(k);
      this.#waiting.push(entry);
    });
  }

  #fits(k: number): boolean {
    return this.#admitted === 0 || this.#admitted + k <= this.options.maxBatch;
  }

  #release(k: number): void {
    this.#admitted -= k;
    while (this.#waiting.length && this.#fits(this.#waiting[0]!.sequences)) this.#waiting.shift()!.admit();
  }
}
