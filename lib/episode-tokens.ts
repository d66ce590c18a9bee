// The token-completions transport of the episode loop (lib/episode.ts): one ChatML token stream per episode,
//   prompt  = chat template of [system, user] + generation prompt, encoded once       (mask 0)
//   turn    = sampled ids exactly as generated, with their log-probs                  (mask 1)
//             + `<|im_end|>` when the turn did not end with it                        (mask 0)
//   obs     = `\n<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n`          (mask 0)
//             (with `tools`: the result of a `<tool_call>` turn as the chat template renders a tool message)
// Sampled ids are never re-tokenised. Policy-server failures (PolicyUnavailableError) propagate: the
// rollout is retried (DESIGN §2).
import type { ChatMessage, CompletionRequest, CompletionResult, Trajectory } from './types.ts';
import type { ChatTemplateOptions, TemplateMessage } from './tokenizer.ts';
import type { EpisodeCommon, EpisodeTransport, SampledReply } from './episode.ts';
import type { EpisodeProgress } from './episode-rules.ts';
import { turnSeed } from './seed.ts';

/** The part of lib/tokenizer.ts's Tokenizer the loop needs. */
export interface EpisodeTokenizer {
  encode(text: string): number[];
  decode(ids: ArrayLike<number>, opts?: { skipSpecial?: boolean }): string;
  tokenId(token: string): number;
  readonly imEnd: number;
  readonly eos: number;
  applyChatTemplate(messages: readonly TemplateMessage[], opts: ChatTemplateOptions): string;
}

/** A PolicyClient whose complete() may take allowed token ids (ours, vLLM). */
export interface EpisodePolicy {
  complete(req: CompletionRequest & { allowedIds?: number[] }): Promise<CompletionResult>;
}

export interface TokenTransportOptions {
  policy: EpisodePolicy;
  tokenizer: EpisodeTokenizer;
  /**
   * OpenAI tool definitions the chat template renders into the prompt (toolFormat "openai" in token mode): the model
   * calls them as `<tool_call>` JSON, and the observation of such a turn goes back as the template's tool message
   */
  tools?: readonly unknown[];
  /** restrict sampling to these tokens; `true` takes the environment's actionTokens */
  allowedActionTokens?: readonly string[] | boolean;
}

/** The token stream of one episode: a Trajectory's record before its run/task/sample identity and outcome. */
export type TokenEpisodeRecord = Pick<Trajectory, 'ids' | 'mask' | 'logprobs' | 'promptLength' | 'versions'>;

/** The mask-0 tokens that follow an assistant turn: the observation as a user message + generation prompt. */
export function observationText(observation: string): string {
  return `\n<|im_start|>user\n${observation}<|im_end|>\n<|im_start|>assistant\n`;
}

/**
 * How the chat template renders a tool result after an assistant turn, up to the next generation prompt: the text
 * around the result (Qwen2.5: `<|im_start|>user\n<tool_response>\n` … `\n</tool_response><|im_end|>\n<|im_start|>assistant\n`),
 * taken as the difference of two renders, so the stream holds exactly what the template would write. The stream's
 * assistant turn ends at `<|im_end|>`; the template's newline after it comes first.
 */
export function toolResultFrame(tok: Pick<EpisodeTokenizer, 'applyChatTemplate'>, tools: readonly unknown[]): { before: string; after: string } {
  const mark = '\u0000RESULT\u0000';
  const turn: TemplateMessage[] = [
    { role: 'user', content: 'u' },
    { role: 'assistant', content: 'a' },
  ];
  const head = tok.applyChatTemplate(turn, { addGenerationPrompt: false, tools });
  const full = tok.applyChatTemplate([...turn, { role: 'tool', content: mark, tool_call_id: 'call_0' }], { addGenerationPrompt: true, tools });
  const i = full.indexOf(mark);
  if (!full.startsWith(head) || !head.endsWith('<|im_end|>\n') || i < head.length) {
    throw new Error('the chat template does not render a tool result after an assistant turn as a ChatML continuation: use toolFormat "text"');
  }
  return { before: `\n${full.slice(head.length, i)}`, after: full.slice(i + mark.length) };
}

/** Token completions as the loop's transport: the prompt of a turn is the whole stream so far. */
export function tokenTransport(t: TokenTransportOptions): EpisodeTransport<TokenEpisodeRecord> {
  return { start: (o, messages, progress) => tokenSession(t, o, messages, progress) };
}

function tokenSession(t: TokenTransportOptions, o: EpisodeCommon, messages: ChatMessage[], progress: Readonly<EpisodeProgress>) {
  const tok = t.tokenizer;
  const ids: number[] = [];
  const mask: number[] = [];
  const logprobs: number[] = [];
  // per token, the checkpoint of its turn, when the policy says which sampled it (a streaming episode switches
  // between turns, DESIGN §10): the prompt takes the first turn's, an observation the turn before it
  const versions: number[] = [];
  let version: number | undefined;
  const push = (xs: readonly number[], m: 0 | 1, lps?: readonly number[]) => {
    xs.forEach((x, i) => {
      ids.push(x);
      mask.push(m);
      logprobs.push(m === 1 && lps ? lps[i] : 0);
      versions.push(version ?? -1);
    });
  };
  const actionTokens = t.allowedActionTokens === true ? o.env.actionTokens : t.allowedActionTokens === false ? undefined : t.allowedActionTokens;
  const allowedIds = actionTokens?.length ? actionTokens.map((a) => tok.tokenId(a)) : undefined;
  const stopIds = [...new Set([tok.imEnd, tok.eos])];
  const tools = t.tools?.length ? t.tools : undefined;
  const frame = tools ? toolResultFrame(tok, tools) : null;
  push(tok.encode(tok.applyChatTemplate(messages, { addGenerationPrompt: true, ...(tools ? { tools } : {}) })), 0);
  const promptLength = ids.length;

  const sample = async (maxTokens: number): Promise<SampledReply> => {
    const out = await t.policy.complete({
      promptIds: ids.slice(),
      maxTokens,
      temperature: o.sampling.temperature,
      topP: o.sampling.topP,
      seed: turnSeed(o.seed, progress.steps),
      stopIds,
      ...(allowedIds ? { allowedIds } : {}),
    });
    if (out.ids.length !== out.logprobs.length) throw new Error(`policy returned ${out.ids.length} ids but ${out.logprobs.length} log-probs`);
    if (out.version !== undefined) {
      if (version === undefined) versions.fill(out.version);
      version = out.version;
    }
    push(out.ids, 1, out.logprobs);
    if (out.ids.at(-1) !== tok.imEnd) push([tok.imEnd], 0);
    const text = tok.decode(
      out.ids.filter((id) => id !== tok.imEnd && id !== tok.eos),
      { skipSpecial: false },
    );
    const asToolResult = frame && text.includes('<tool_call>');
    return {
      generated: out.ids.length,
      finishReason: out.finishReason,
      // the stream already holds the cut reply
      cut: () => {},
      interpret: () => ({
        action: text,
        refused: null,
        shown: text,
        contextLeft: () => (o.contextWindow === undefined ? null : o.contextWindow - ids.length),
        answer: (obs) => push(tok.encode(asToolResult ? `${frame.before}${obs}${frame.after}` : observationText(obs)), 0),
      }),
    };
  };
  return {
    promptTokens: async () => ids.length,
    recount: async () => ids.length,
    sample,
    result: (): TokenEpisodeRecord => ({ ids, mask, logprobs, promptLength, ...(version !== undefined ? { versions } : {}) }),
  };
}
