// The episode loop shared by FrozenLake and SWE tasks (DESIGN §3–§4). It owns tokens, budgets and
// step counting; the environment owns the world. One ChatML token stream per episode:
//   prompt  = chat template of [system, user] + generation prompt, encoded once       (mask 0)
//   turn    = sampled ids exactly as generated, with their log-probs                  (mask 1)
//             + `<|im_end|>` when the turn did not end with it                        (mask 0)
//   obs     = `\n<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n`          (mask 0)
//             (with `tools`: the result of a `<tool_call>` turn as the chat template renders a tool message)
// Sampled ids are never re-tokenised. Model garbage never throws out of the loop. What is not the
// agent's doing throws, so the rollout activity is retried (DESIGN §2): policy-server failures
// (PolicyUnavailableError), an environment that cannot start (reset), fails under a tool call (step:
// environments turn everything the agent causes into observations and throw only for infrastructure)
// or cannot be graded (reward).

import type { ChatMessage, CompletionRequest, CompletionResult, EndReason, TextEnvironment, Trajectory } from './types.ts';
import type { ChatTemplateOptions, TemplateMessage } from './tokenizer.ts';
import { hashInts } from './seed.ts';
import { afterStep, cutTurnEnd, planTurn } from './episode-rules.ts';

export { TOKEN_BUDGET_WARNING } from './episode-rules.ts';

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

export interface EpisodeStepEvent {
  step: number;
  responseTokens: number;
  action: string;
  observation: string;
  done: boolean;
}

export interface RunEpisodeOptions {
  env: TextEnvironment & { actionTokens?: readonly string[] };
  policy: EpisodePolicy;
  tokenizer: EpisodeTokenizer;
  /**
   * OpenAI tool definitions the chat template renders into the prompt (toolFormat "openai" in token mode): the model
   * calls them as `<tool_call>` JSON, and the observation of such a turn goes back as the template's tool message
   */
  tools?: readonly unknown[];
  /** replaces the environment's system prompt (the tool-call format's prompt) */
  systemPrompt?: string;
  maxSteps: number;
  /** total budget of sampled assistant tokens over the episode */
  maxResponseTokens: number;
  maxTokensPerTurn: number;
  /** the model's context window (prompt + reply of a turn); absent: not checked (lib/episode-rules.ts) */
  contextWindow?: number;
  sampling: { temperature: number; topP: number };
  seed: number;
  /** restrict sampling to these tokens; `true` takes the environment's actionTokens */
  allowedActionTokens?: readonly string[] | boolean;
  /** append `\nSteps Remaining: N` to each observation (SWE) */
  stepsRemainingSuffix?: boolean;
  /** warn in the observation once fewer than this many tokens remain (of the budget or the context) */
  tokenWarningAt?: number;
  /** the warning's text given the response tokens left; TOKEN_BUDGET_WARNING by default (SWE: lib/swe/prompts.ts) */
  tokenWarning?: (tokensLeft: number) => string;
  /** wall-clock deadline (ms since epoch); the loop ends with 'timeout' after it */
  deadlineMs?: number;
  /** clock for the deadline; Date.now by default */
  now?: () => number;
  onStep?: (e: EpisodeStepEvent) => void | Promise<void>;
}

/** The token stream and outcome of one episode: a Trajectory before its run/task/sample identity. */
export interface EpisodeResult extends Pick<Trajectory, 'ids' | 'mask' | 'logprobs' | 'promptLength' | 'reward' | 'end' | 'steps' | 'versions'> {
  responseTokens: number;
  info: Record<string, unknown>;
}

/** Sampling seed of one turn, from (episode seed, turn); a positive 31-bit integer. */
export function turnSeed(seed: number, turn: number): number {
  return hashInts(seed, turn, 0x7e5) & 0x7fffffff;
}

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

export async function runEpisode(o: RunEpisodeOptions): Promise<EpisodeResult> {
  const now = o.now ?? Date.now;
  const tok = o.tokenizer;
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
  const info: Record<string, unknown> = {};
  const progress = { steps: 0, responseTokens: 0 };
  let end: EndReason | undefined;

  const actionTokens = o.allowedActionTokens === true ? o.env.actionTokens : o.allowedActionTokens === false ? undefined : o.allowedActionTokens;
  const allowedIds = actionTokens?.length ? actionTokens.map((t) => tok.tokenId(t)) : undefined;
  const stopIds = [...new Set([tok.imEnd, tok.eos])];

  // infrastructure: a sandbox that cannot start is retried, never scored
  const messages: ChatMessage[] = (await o.env.reset()).map((m) => (m.role === 'system' && o.systemPrompt !== undefined ? { ...m, content: o.systemPrompt } : m));
  const tools = o.tools?.length ? o.tools : undefined;
  const frame = tools ? toolResultFrame(tok, tools) : null;
  push(tok.encode(tok.applyChatTemplate(messages, { addGenerationPrompt: true, ...(tools ? { tools } : {}) })), 0);
  const promptLength = ids.length;

  while (end === undefined) {
    // the prompt of a turn is the whole stream so far
    const plan = planTurn(o, progress, ids.length, now());
    if ('end' in plan) {
      end = plan.end;
      break;
    }
    const out = await o.policy.complete({
      promptIds: ids.slice(),
      maxTokens: plan.maxTokens,
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
    progress.responseTokens += out.ids.length;
    if (out.ids.at(-1) !== tok.imEnd) push([tok.imEnd], 0);
    progress.steps++;
    const text = tok.decode(
      out.ids.filter((id) => id !== tok.imEnd && id !== tok.eos),
      { skipSpecial: false },
    );

    const cut = cutTurnEnd(plan, out.finishReason);
    if (cut) {
      end = cut;
      break;
    }

    // infrastructure as well: the environment throws only when its sandbox or backend failed
    const step = await o.env.step(text);
    if (step.info) Object.assign(info, step.info);
    await o.onStep?.({ step: progress.steps, responseTokens: progress.responseTokens, action: text, observation: step.observation, done: step.done });
    const next = afterStep(o, progress, step, now(), o.contextWindow === undefined ? null : o.contextWindow - ids.length);
    if ('end' in next) {
      end = next.end;
      break;
    }
    const asToolResult = frame && text.includes('<tool_call>');
    push(tok.encode(asToolResult ? `${frame.before}${next.observation}${frame.after}` : observationText(next.observation)), 0);
  }

  let reward = 0;
  if (end !== 'error') {
    // infrastructure too: a grading run that cannot happen is retried (test failures are a reward of 0, not a throw)
    const r = await o.env.reward(end);
    reward = r.reward;
    Object.assign(info, r.info ?? {});
  }
  return { ids, mask, logprobs, promptLength, reward, end, steps: progress.steps, responseTokens: progress.responseTokens, info, ...(version !== undefined ? { versions } : {}) };
}
