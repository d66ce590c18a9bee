// Generation: what one request asks of the engine, and the engine call. This is the seam between the
// HTTP side (validation, response shapes) and the engine: a scheduler that batches requests replaces
// `engineCall` and leaves the rest alone.
import type { Tokenizer } from '../lib/tokenizer.ts';
import { chunkSeed } from '../lib/seed.ts';
import { recordGeneration } from '../activities/metrics.ts';
import { HttpError } from './http.ts';
import type { ServableModel } from './models.ts';
import { untilStopString } from './stop-strings.ts';

/** What one generation asks of the engine, after validation. */
export interface GenerationRequest {
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

/** One engine call: up to `maxNew` tokens after `promptIds`. */
export async function engineCall(model: ServableModel, promptIds: readonly number[], g: GenerationRequest, maxNew: number, seed: number | undefined): Promise<EngineOutput> {
  let out: Awaited<ReturnType<ServableModel['generate']>>;
  const started = performance.now();
  try {
    out = await model.generate(Int32Array.from(promptIds), {
      maxNewTokens: maxNew,
      temperature: g.temperature,
      topP: g.topP,
      ...(seed !== undefined ? { seed } : {}),
      ...(g.stopIds.length ? { stopIds: g.stopIds } : {}),
      ...(g.allowedIds?.length ? { allowedIds: g.allowedIds } : {}),
      ...(g.topK > 0 ? { topLogprobs: g.topK } : {}),
    });
  } catch (e) {
    throw new HttpError(500, `generation failed: ${(e as Error).message}`);
  }
  const n = out.ids.length;
  recordGeneration(n, (performance.now() - started) / 1000);
  const top: EngineOutput['top'] = [];
  if (g.topK > 0) {
    if (!out.topIds || !out.topLogprobs || out.topIds.length !== n * g.topK) throw new HttpError(500, 'generation failed: the engine returned no top log-probs');
    for (let i = 0; i < n; i++) {
      top.push({ ids: Array.from(out.topIds.subarray(i * g.topK, (i + 1) * g.topK)), logprobs: Array.from(out.topLogprobs.subarray(i * g.topK, (i + 1) * g.topK)) });
    }
  }
  return { ids: Array.from(out.ids), logprobs: Array.from(out.logprobs), top, finishReason: out.finishReason };
}

/** Generates up to maxTokens; with stop strings, until the first one (stop-strings.ts). */
export async function generate(model: ServableModel, tokenizer: Tokenizer | undefined, promptIds: readonly number[], g: GenerationRequest): Promise<Generation> {
  const decode = (xs: number[], finish: 'stop' | 'length') => {
    const body = finish === 'stop' && xs.length && g.stopIds.includes(xs.at(-1)!) ? xs.slice(0, -1) : xs;
    return tokenizer ? tokenizer.decode(body, { skipSpecial: g.skipSpecial }) : '';
  };
  if (g.stop.length === 0) {
    const out = await engineCall(model, promptIds, g, g.maxTokens, g.seed);
    return { ...out, stopString: null, text: decode(out.ids, out.finishReason) };
  }
  return untilStopString({
    stop: g.stop,
    maxTokens: g.maxTokens,
    call: (soFar, maxNew, j) => engineCall(model, [...promptIds, ...soFar], g, maxNew, g.seed === undefined ? undefined : chunkSeed(g.seed, j)),
    decode,
    textLength: (xs) => tokenizer!.decode(xs, { skipSpecial: g.skipSpecial }).length,
  });
}
