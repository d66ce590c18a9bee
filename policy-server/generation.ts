// Generation: what one request asks of the engine, and the engine call. This is the seam between the
// HTTP side (validation, response shapes) and the engine; scheduler.ts decides how calls share the engine
// (batched with other requests or one at a time).
import type { Tokenizer } from '../lib/tokenizer.ts';
import { chunkSeed, sampleSeed } from '../lib/seed.ts';
import { recordGeneration } from '../lib/metrics.ts';
import { HttpError } from './http.ts';
import type { EngineResult, ModelScheduler } from './scheduler.ts';
import { untilStopString } from './stop-strings.ts';

/** What one generation asks of the engine, after validation. */
export interface GenerationRequest {
  /** samples of the prompt (choices) */
  n: number;
  maxTokens: number;
  temperature: number;
  topP: number;
  seed?: number;
  stopIds: number[];
  allowedIds?: number[];
  /** strings that end the completion (need a tokenizer) */
  stop: string[];
  /** top log-probs per position (0: none) */
  topK: number;
  skipSpecial: boolean;
}

/** Tokens an engine call produced, top log-probs unpacked per position. */
export interface EngineOutput {
  ids: number[];
  logprobs: number[];
  /** per position the top-K ids and log-probs (topK > 0) */
  top: { ids: number[]; logprobs: number[] }[];
  finishReason: 'stop' | 'length';
}

export interface Generation extends EngineOutput {
  /** the stop string that ended the completion, when one did */
  stopString: string | null;
  /** decoded text, before any stop string, without a final stop token */
  text: string;
}

/** One engine call: up to `maxNew` tokens after `promptIds` for each sample (its seed; one prefill for all). */
export async function engineCall(
  engine: ModelScheduler,
  promptIds: readonly number[],
  g: GenerationRequest,
  maxNew: number,
  seeds: (number | undefined)[],
  signal?: AbortSignal,
): Promise<EngineOutput[]> {
  let outs: EngineResult[];
  const started = performance.now();
  const sample = (seed: number | undefined) => ({
    maxNewTokens: maxNew,
    temperature: g.temperature,
    topP: g.topP,
    ...(seed !== undefined ? { seed } : {}),
    ...(g.stopIds.length ? { stopIds: g.stopIds } : {}),
    ...(g.allowedIds?.length ? { allowedIds: g.allowedIds } : {}),
    ...(g.topK > 0 ? { topLogprobs: g.topK } : {}),
  });
  try {
    outs = await engine.generate(Int32Array.from(promptIds), seeds.map(sample), signal);
  } catch (e) {
    if (signal?.aborted) throw e;
    throw new HttpError(500, `generation failed: ${(e as Error).message}`);
  }
  recordGeneration(
    outs.reduce((a, o) => a + o.ids.length, 0),
    (performance.now() - started) / 1000,
  );
  return outs.map((out) => {
    const n = out.ids.length;
    const top: EngineOutput['top'] = [];
    if (g.topK > 0) {
      if (!out.topIds || !out.topLogprobs || out.topIds.length !== n * g.topK) throw new HttpError(500, 'generation failed: the engine returned no top log-probs');
      for (let i = 0; i < n; i++) {
        top.push({ ids: Array.from(out.topIds.subarray(i * g.topK, (i + 1) * g.topK)), logprobs: Array.from(out.topLogprobs.subarray(i * g.topK, (i + 1) * g.topK)) });
      }
    }
    return { ids: Array.from(out.ids), logprobs: Array.from(out.logprobs), top, finishReason: out.finishReason };
  });
}

/** Generates `g.n` samples of up to maxTokens each; with stop strings, each until its first one (stop-strings.ts). */
export async function generate(
  engine: ModelScheduler,
  tokenizer: Tokenizer | undefined,
  promptIds: readonly number[],
  g: GenerationRequest,
  signal?: AbortSignal,
): Promise<Generation[]> {
  const decode = (xs: number[], finish: 'stop' | 'length') => {
    const body = finish === 'stop' && xs.length && g.stopIds.includes(xs.at(-1)!) ? xs.slice(0, -1) : xs;
    return tokenizer ? tokenizer.decode(body, { skipSpecial: g.skipSpecial }) : '';
  };
  const seeds = Array.from({ length: g.n }, (_, i) => (g.seed === undefined ? undefined : sampleSeed(g.seed, i)));
  if (g.stop.length === 0) {
    const outs = await engineCall(engine, promptIds, g, g.maxTokens, seeds, signal);
    return outs.map((out) => ({ ...out, stopString: null, text: decode(out.ids, out.finishReason) }));
  }
  return Promise.all(
    seeds.map((seed) =>
      untilStopString({
        stop: g.stop,
        maxTokens: g.maxTokens,
        call: async (soFar, maxNew, j) => (await engineCall(engine, [...promptIds, ...soFar], g, maxNew, [seed === undefined ? undefined : chunkSeed(seed, j)], signal))[0]!,
        decode,
        textLength: (xs) => tokenizer!.decode(xs, { skipSpecial: g.skipSpecial }).length,
      }),
    ),
  );
}
