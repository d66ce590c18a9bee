// The check after every weight sync to an external server (DESIGN §9): the server samples a seeded continuation
// of a fixed prompt and returns its log-probs; the learner computes the log-probs of the same tokens on the
// checkpoint it meant to serve. Equal to rounding (or, for a half-precision server, within what the learner's own
// emulation of that precision measures): the server serves that checkpoint. A server that kept a stale
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
 * bf16 (or fp16) server: the learner emulates one (LoadOptions.emulateHalf: the weights and every tensor its forward
 * keeps rounded to the half type, products summed in fp32) and measures m, the mean |logπ(W) − logπ_half(W)| over the
 * probe's tokens. The server is another realization of the same rounding, with kernels of its own (its attention
 * and RoPE tables in bf16 too), so its mean error from fp32 is of the same size, not the same: under vLLM's CPU bf16,
 * 0.80–1.40 m on SmolLM2-135M and 0.83–1.94 m on Qwen2.5-Coder-0.5B (5 probe seeds each). Rounding the weights alone
 * gives a fifth of the server's error, too little to bound it. The bound is 3·m plus the fp32 tolerance, on the mean
 * |Δ|: the max over 16 tokens of bf16 noise varied 0.7–2.5× between the two realizations.
 */
export function halfPrecisionProbeTolerance(emulatedMeanDelta: number): number {
  return 3 * emulatedMeanDelta + FP32_PROBE_TOLERANCE;
}

/** What the tolerance bounds: fp32, the largest |Δ|; half precision, the mean |Δ| (halfPrecisionProbeTolerance). */
export type ProbeStatistic = 'max' | 'mean';

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
  /** which |Δ| the tolerance bounds */
  statistic: ProbeStatistic;
  /** the server's dtype class the tolerance is for */
  dtype: string;
  ok: boolean;
}

/** Compares the server's log-probs of the probe's tokens with the learner's: ok when the statistic's |Δ| ≤ tolerance. */
export function compareProbe(server: readonly number[], learner: ArrayLike<number>, tolerance: number, dtype: string, statistic: ProbeStatistic = 'max'): ProbeResult {
  if (server.length !== learner.length) throw new Error(`compareProbe: ${server.length} server log-probs but ${learner.length} from the learner`);
  if (server.length === 0) throw new Error('compareProbe: the server generated no token for the probe');
  let sum = 0;
  let max = 0;
  for (let i = 0; i < server.length; i++) {
    const d = Math.abs(server[i]! - learner[i]!);
    sum += d;
    max = Math.max(max, Number.isNaN(d) ? Infinity : d);
  }
  const mean = Number.isFinite(max) ? sum / server.length : Infinity;
  return { tokens: server.length, meanAbsDelta: mean, maxAbsDelta: max, tolerance, statistic, dtype, ok: (statistic === 'max' ? max : mean) <= tolerance };
}
