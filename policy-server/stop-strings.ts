// Stop strings (OpenAI semantics): the completion ends at the token that completes the first stop string,
// and its text stops before it. The engine only knows stop ids, so generation runs in doubling chunks
// (each re-reads the prompt and the tokens so far: O(log n) prefills) and the text is searched after each.
import type { EngineOutput, Generation } from './generation.ts';

/** Tokens of the first chunk; each later chunk doubles. */
const FIRST_STOP_CHUNK = 16;

export interface StopStringRun {
  stop: string[];
  maxTokens: number;
  /** the j-th engine call: up to `maxNew` tokens after the prompt and `soFar` */
  call(soFar: number[], maxNew: number, j: number): Promise<EngineOutput>;
  /** the text of generated tokens (without a final stop token when the engine stopped) */
  decode(ids: number[], finish: 'stop' | 'length'): string;
  /** length of the text of a prefix of the generated tokens */
  textLength(ids: number[]): number;
}

export async function untilStopString(r: StopStringRun): Promise<Generation> {
  const acc: Pick<EngineOutput, 'ids' | 'logprobs' | 'top'> = { ids: [], logprobs: [], top: [] };
  const longest = Math.max(...r.stop.map((s) => s.length));
  let chunk = FIRST_STOP_CHUNK;
  let searchedTo = 0;
  for (let j = 0; ; j++) {
    const n = Math.min(chunk, r.maxTokens - acc.ids.length);
    const out = await r.call(acc.ids, n, j);
    acc.ids.push(...out.ids);
    acc.logprobs.push(...out.logprobs);
    acc.top.push(...out.top);
    const text = r.decode(acc.ids, out.finishReason);
    // earliest occurrence of any stop string, searching only text that could hold a new one
    let at = -1;
    let which = '';
    for (const s of r.stop) {
      const k = text.indexOf(s, Math.max(0, searchedTo - longest));
      if (k >= 0 && (at < 0 || k < at)) [at, which] = [k, s];
    }
    if (at >= 0) {
      // the fewest tokens whose text reaches the end of the stop string
      let t = 1;
      while (t < acc.ids.length && r.textLength(acc.ids.slice(0, t)) < at + which.length) t++;
      return { ids: acc.ids.slice(0, t), logprobs: acc.logprobs.slice(0, t), top: acc.top.slice(0, t), finishReason: 'stop', stopString: which, text: text.slice(0, at) };
    }
    searchedTo = text.length;
    if (out.finishReason === 'stop' || acc.ids.length >= r.maxTokens || out.ids.length === 0) {
      return { ...acc, finishReason: out.finishReason === 'stop' ? 'stop' : 'length', stopString: null, text };
    }
    chunk *= 2;
  }
}
