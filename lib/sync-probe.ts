// The check after every weight sync to an external server (DESIGN §9): the server samples a seeded continuation
// of a fixed prompt and returns its log-probs; the learner computes the log-probs of the same tokens on the
// checkpoint it meant to serve. Equal to rounding: the server serves that checkpoint. A server that kept a stale
// output head (vLLM's in-place reload of a tied model), another checkpoint or a wrong dtype is off by ≥ 0.1.
// Pure: no I/O (the activity does the requests and the learner call).

/** generated tokens of the probe (their log-probs are compared) */
export const PROBE_NEW_TOKENS = 16;
export const PROBE_PROMPT_TOKENS = 16;
export const PROBE_SEED = 9_176_301;

/** The fixed prompt: PROBE_PROMPT_TOKENS ids spread evenly over the vocabulary (every model has them). */
export function probePrompt(vocabSize: number, length = PROBE_PROMPT_TOKENS): number[] {
  if (!Number.isInteger(vocabSize) || vocabSize < 2) throw new Error(`probePrompt: vocabSize must be an integer ≥ 2, got ${vocabSize}`);
  return Array.from({ length }, (_, i) => Math.floor(((2 * i + 1) * vocabSize) / (2 * length)));
}

/**
 * fp32 server: exact to rounding. The server and the learner add the same products in other orders (other
 * kernels, threads): fp32's unit roundoff 6e-8 grows with depth and width, measured ≤ 5e-7 nats on the presets
 * (vLLM 0.32 CPU vs gpu-learner). 1e-4 leaves 200× that for larger models and is 1,000× below what a stale head
 * or another checkpoint gives (≥ 0.1).
 */
export const FP32_PROBE_TOLERANCE = 1e-4;

/**
 * bf16 (or fp16) server: the learner measures what rounding its own weights to bf16 does to the probe's
 * log-probs (d = max |logπ(W) − logπ(bf16(W))|). The server also rounds each matmul input (activations) to
 * bf16, an error of the same order (unit roundoff 2^-8 on either factor of every product), so the bound is
 * 2·d for weights and activations, doubled for the accumulation order and the nonlinearities between:
 * 4·d, plus the fp32 tolerance.
 */
export function halfPrecisionProbeTolerance(weightRoundingDelta: number): number {
  return 4 * weightRoundingDelta + FP32_PROBE_TOLERANCE;
}

/** A server dtype as vLLM reports it ("float32", "torch.bfloat16", "half") in one of three classes. */
export function dtypeClass(dtype: string): 'fp32' | 'bf16' | 'fp16' | 'unknown' {
  const d = dtype.replace(/^torch\./, '').toLowerCase();
  if (d === 'float32' || d === 'float' || d === 'fp32') return 'fp32';
  if (d === 'bfloat16' || d === 'bf16') return 'bf16';
  if (d === 'float16' || d === 'half' || d === 'fp16') return 'fp16';
  return 'unknown';
}

export interface ProbeResult {
  /** tokens compared */
  tokens: number;
  meanAbsDelta: number;
  maxAbsDelta: number;
  tolerance: number;
  /** the server's dtype class the tolerance is for */
  dtype: string;
  ok: boolean;
}

/** Compares the server's log-probs of the probe's tokens with the learner's: ok when max |Δ| ≤ tolerance. */
export function compareProbe(server: readonly number[], learner: ArrayLike<number>, tolerance: number, dtype: string): ProbeResult {
  if (server.length !== learner.length) throw new Error(`compareProbe: ${server.length} server log-probs but ${learner.length} from the learner`);
  if (server.length === 0) throw new Error('compareProbe: the server generated no token for the probe');
  let sum = 0;
  let max = 0;
  for (let i = 0; i < server.length; i++) {
    const d = Math.abs(server[i]! - learner[i]!);
    sum += d;
    max = Math.max(max, Number.isNaN(d) ? Infinity : d);
  }
  return { tokens: server.length, meanAbsDelta: sum / server.length, maxAbsDelta: max, tolerance, dtype, ok: max <= tolerance };
}
