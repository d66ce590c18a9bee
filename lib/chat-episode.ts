// The chat-completions episode mode: the same environments, steps, budgets and end reasons as the token
// loop (lib/episode.ts), for a model served anywhere behind `/v1/chat/completions`. The conversation is
// kept as OpenAI messages (no token ids: the server templates them). The agent calls tools in the
// R2E-Gym text format (the server stops at `</function>`) or as OpenAI tool calls; both reach the
// environment as the one text format (lib/toolcall.ts formats and parses it). The end rules and each
// turn's max_tokens are lib/episode-rules.ts's, as in the token loop; the prompt of a turn is counted by
// the server (see promptTokens below).
import { turnSeed, type EpisodeStepEvent } from './episode.ts';
import { afterStep, cutTurnEnd, planTurn, type EpisodeProgress } from './episode-rules.ts';
import { isContextOverflow } from './policy/http.ts';
import { type ChatApiMessage, type ChatClient, type ChatRequest, type ChatResult } from './policy/chat.ts';
import { extractToolCallBlocks, formatToolCall, parseOpenAIToolCalls, type ToolSchemas } from './toolcall.ts';
import type { EndReason, TextEnvironment } from './types.ts';

export interface RunChatEpisodeOptions {
  env: TextEnvironment;
  chat: ChatClient;
  /** `text`: `<function=…>` blocks in the content; `openai`: tool calls against `tools` */
  toolFormat: 'text' | 'openai';
  /** OpenAI tool definitions (openai format) */
  tools?: readonly unknown[];
  /** argument schemas to check OpenAI tool calls with before they reach the environment */
  toolSchemas?: ToolSchemas;
  toolAliases?: Record<string, string>;
  /** replaces the environment's system prompt (the text format's prompt describes `<function=…>`) */
  systemPrompt?: string;
  /** openai format: the observation of a reply without a tool call, given its text (default: genericNoToolCallReminder) */
  noCallReminder?: (content: string | null) => string;
  maxSteps: number;
  /** generated tokens over the episode (the server's usage.completion_tokens) */
  maxResponseTokens: number;
  maxTokensPerTurn: number;
  /** the model's context window on the server (prompt + reply of a turn); absent: not checked */
  contextWindow?: number;
  sampling: { temperature: number; topP: number };
  seed: number;
  stepsRemainingSuffix?: boolean;
  tokenWarningAt?: number;
  tokenWarning?: (tokensLeft: number) => string;
  deadlineMs?: number;
  now?: () => number;
  onStep?: (e: EpisodeStepEvent) => void | Promise<void>;
}

export interface ChatEpisodeResult {
  messages: ChatApiMessage[];
  reward: number;
  end: EndReason;
  steps: number;
  /** tokens of the final conversation: the last request's prompt and its completion */
  tokens: number;
  responseTokens: number;
  /** turns whose prompt the server was asked to count (a 1-token request) because the bound did not leave room */
  contextProbes: number;
  info: Record<string, unknown>;
}

const FUNCTION_OPEN = '<function=';
const FUNCTION_CLOSE = '</function>';

/** Template tokens a chat template may add per message (role markers, separators), and once per prompt (tool preambles). */
const TEMPLATE_TOKENS_PER_MESSAGE = 16;
const TEMPLATE_TOKENS_PER_PROMPT = 256;
const utf8 = new TextEncoder();

/** An upper bound of a message's tokens: its UTF-8 bytes (a byte-level BPE or byte-fallback token covers at least one byte). */
function messageBound(m: ChatApiMessage): number {
  const calls = 'tool_calls' in m && m.tool_calls ? JSON.stringify(m.tool_calls) : '';
  return utf8.encode(m.content ?? '').length + utf8.encode(calls).length + TEMPLATE_TOKENS_PER_MESSAGE;
}

/** The observation of a reply without an OpenAI tool call (the generic text; SWE passes lib/swe/prompts.ts's). */
export function genericNoToolCallReminder(content: string | null): string {
  const stray = (content ?? '').includes('<function=') ? ' Your reply has a `<function=...>` block in its text: text is not executed.' : '';
  return `No tool call was found in your reply.${stray} Call exactly one of the provided functions as a tool call.`;
}

/** The text-format reply as the model meant it: a call cut by the `</function>` stop string is closed again. */
function closeCall(content: string, r: ChatResult): string {
  const open = content.lastIndexOf(FUNCTION_OPEN);
  if (r.finishReason !== 'stop' || open < 0 || content.indexOf(FUNCTION_CLOSE, open) >= 0) return content;
  return `${content.replace(/\s*$/, '')}\n${FUNCTION_CLOSE}`;
}

/** A turn as the environment sees it: the action to run (or the refusal that answers it), and how its result goes back. */
interface InterpretedTurn {
  /** the reply, with `<tool_call>` text turned into tool calls for a server without a tool-call parser */
  r: ChatResult;
  assistant: ChatApiMessage;
  action: string;
  refused: string | null;
  reply: (observation: string) => ChatApiMessage[];
}

function interpretReply(o: RunChatEpisodeOptions, reply: ChatResult): InterpretedTurn {
  const user = (obs: string): ChatApiMessage[] => [{ role: 'user', content: obs }];
  if (o.toolFormat !== 'openai') {
    const action = closeCall(reply.content ?? '', reply);
    return { r: reply, assistant: { role: 'assistant', content: action }, action, refused: null, reply: user };
  }
  let r = reply;
  if (!r.toolCalls.length && r.content?.includes('<tool_call>')) {
    // a server without a tool-call parser (vLLM without --tool-call-parser) returns the template's calls as text
    const found = extractToolCallBlocks(r.content);
    if (found.toolCalls.length) r = { ...r, content: found.content, toolCalls: found.toolCalls };
  }
  const assistant: ChatApiMessage = { role: 'assistant', content: r.content, ...(r.toolCalls.length ? { tool_calls: r.toolCalls } : {}) };
  if (!r.toolCalls.length) {
    // text is never executed in this format: the reminder speaks of tool calls, not of `<function=…>` text
    return { r, assistant, action: r.content ?? '', refused: (o.noCallReminder ?? genericNoToolCallReminder)(r.content), reply: user };
  }
  const calls = r.toolCalls;
  const parsed = parseOpenAIToolCalls([calls[0]!], { ...(o.toolSchemas ? { tools: o.toolSchemas } : {}), ...(o.toolAliases ? { aliases: o.toolAliases } : {}) });
  return {
    r,
    assistant,
    action: parsed.ok ? formatToolCall(parsed.call) : '',
    refused: parsed.ok ? null : `ERROR: ${parsed.error}\nFix the function call and try again.`,
    // every call gets an answer; only the first one runs
    reply: (obs) => calls.map((c, i) => ({ role: 'tool', tool_call_id: c.id, content: i === 0 ? obs : 'Not executed: only the first function call of a reply runs.' })),
  };
}

/**
 * A chat episode's requests and the prompt counts of its context rule. Only the server knows its chat template: a
 * bound of the prompt's tokens (the server's count of the last prompt plus the bytes of what came since) is used while
 * it leaves room for the whole reply, and the server counts the prompt (a 1-token request) when it does not.
 */
function chatTurns(o: RunChatEpisodeOptions, messages: ChatApiMessage[], tools: readonly unknown[] | undefined, progress: EpisodeProgress) {
  const t = {
    /** the server's count of the last prompt sent: messages[0, counted.messages) were counted.tokens tokens */
    counted: null as { messages: number; tokens: number } | null,
    contextProbes: 0,
    request: (maxTokens: number): ChatRequest => ({
      messages: messages.slice(),
      ...(tools ? { tools } : {}),
      maxTokens,
      temperature: o.sampling.temperature,
      topP: o.sampling.topP,
      seed: turnSeed(o.seed, progress.steps),
      ...(o.toolFormat === 'text' ? { stop: [FUNCTION_CLOSE] } : {}),
    }),
    promptBound: (): number => {
      const from = t.counted?.messages ?? 0;
      let n = t.counted ? t.counted.tokens : TEMPLATE_TOKENS_PER_PROMPT + (tools ? utf8.encode(JSON.stringify(tools)).length : 0);
      for (const m of messages.slice(from)) n += messageBound(m);
      return n;
    },
    /** the server's own count (usage.prompt_tokens of a 1-token request), or 'overflow' when the prompt alone exceeds the context */
    probe: async (): Promise<number | 'overflow'> => {
      t.contextProbes++;
      try {
        const r = await o.chat.chat(t.request(1));
        return r.usageReported ? r.promptTokens : t.promptBound();
      } catch (e) {
        if (isContextOverflow(e)) return 'overflow';
        throw e;
      }
    },
    /** the prompt's tokens for the context rule (null: no context window to check) */
    promptTokensFor: async (): Promise<number | 'overflow' | null> => {
      if (o.contextWindow === undefined) return null;
      const bound = t.promptBound();
      const want = Math.min(o.maxTokensPerTurn, o.maxResponseTokens - progress.responseTokens);
      return bound + want <= o.contextWindow ? bound : t.probe();
    },
  };
  return t;
}

export async function runChatEpisode(o: RunChatEpisodeOptions): Promise<ChatEpisodeResult> {
  const now = o.now ?? Date.now;
  const info: Record<string, unknown> = {};
  const initial = await o.env.reset();
  const messages: ChatApiMessage[] = initial.map((m) =>
    m.role === 'system' && o.systemPrompt !== undefined ? { role: 'system', content: o.systemPrompt } : { role: m.role === 'assistant' ? 'user' : m.role, content: m.content },
  );
  const tools = o.toolFormat === 'openai' && o.tools?.length ? o.tools : undefined;
  const progress: EpisodeProgress = { steps: 0, responseTokens: 0 };
  let promptTokens = 0;
  let lastCompletion = 0;
  const turns = chatTurns(o, messages, tools, progress);
  let end: EndReason | undefined;

  while (end === undefined) {
    let prompt = await turns.promptTokensFor();
    let plan = prompt === 'overflow' ? ({ end: 'context_exhausted' } as const) : planTurn(o, progress, prompt, now());
    if ('end' in plan) {
      end = plan.end;
      break;
    }
    let r: ChatResult;
    try {
      r = await o.chat.chat(turns.request(plan.maxTokens));
    } catch (e) {
      // the bound was not one for this server's template (or the context it reports is larger than it is): ask it to count, once
      if (!isContextOverflow(e) || o.contextWindow === undefined) throw e;
      prompt = await turns.probe();
      plan = prompt === 'overflow' ? ({ end: 'context_exhausted' } as const) : planTurn(o, progress, prompt, now());
      if ('end' in plan) {
        end = plan.end;
        break;
      }
      try {
        r = await o.chat.chat(turns.request(plan.maxTokens));
      } catch (e2) {
        if (!isContextOverflow(e2)) throw e2;
        end = 'context_exhausted';
        break;
      }
    }
    if (r.usageReported) turns.counted = { messages: messages.length, tokens: r.promptTokens };
    progress.responseTokens += r.completionTokens;
    promptTokens = r.promptTokens;
    lastCompletion = r.completionTokens;
    progress.steps++;
    const cut = cutTurnEnd(plan, r.finishReason);
    if (cut) {
      messages.push({ role: 'assistant', content: r.content ?? '' });
      end = cut;
      break;
    }

    // what the environment executes (the one text format) and how its result goes back
    const turn = interpretReply(o, r);
    r = turn.r;
    messages.push(turn.assistant);
    const { action, reply, refused } = turn;

    let step: { observation: string; done: boolean; end?: EndReason };
    if (refused !== null) step = { observation: refused, done: false };
    else {
      // environments throw from step only for infrastructure (a dead sandbox): it propagates and is retried (DESIGN §2)
      const s = await o.env.step(action);
      step = s;
      if (s.info) Object.assign(info, s.info);
    }
    await o.onStep?.({
      step: progress.steps,
      responseTokens: progress.responseTokens,
      action: o.toolFormat === 'openai' && r.toolCalls.length ? `${r.content ?? ''}\n${action}`.trim() : action,
      observation: step.observation,
      done: step.done,
    });
    const contextLeft = o.contextWindow === undefined || !r.usageReported ? null : o.contextWindow - r.promptTokens - r.completionTokens;
    const next = afterStep(o, progress, step, now(), contextLeft);
    if ('end' in next) {
      end = next.end;
      break;
    }
    messages.push(...reply(next.observation));
  }

  let reward = 0;
  if (end !== 'error') {
    // infrastructure: a grading run that cannot happen throws and the episode is retried
    const g = await o.env.reward(end);
    reward = g.reward;
    Object.assign(info, g.info ?? {});
  }
  return { messages, reward, end, steps: progress.steps, tokens: promptTokens + lastCompletion, responseTokens: progress.responseTokens, contextProbes: turns.contextProbes, info };
}
