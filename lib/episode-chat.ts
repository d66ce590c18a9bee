// The chat-completions transport of the episode loop (lib/episode.ts), for a model served anywhere behind
// `/v1/chat/completions`. The conversation is kept as OpenAI messages (no token ids: the server templates them). The agent calls tools in the
// R2E-Gym text format (the server stops at `</function>`) or as OpenAI tool calls; both reach the
// environment as the one text format (lib/toolcall.ts formats and parses it). The prompt of a turn is
// counted by the server (see chatTurns below).
import type { EpisodeCommon, EpisodeTransport, SampledReply } from './episode.ts';
import type { EpisodeProgress } from './episode-rules.ts';
import { turnSeed } from './seed.ts';
import { isContextOverflow } from './policy/http.ts';
import { type ChatApiMessage, type ChatClient, type ChatRequest, type ChatResult } from './policy/chat.ts';
import { extractToolCallBlocks, formatToolCall, parseOpenAIToolCalls, type ToolSchemas } from './toolcall.ts';
import type { ChatMessage } from './types.ts';

export interface ChatTransportOptions {
  chat: ChatClient;
  /** `text`: `<function=…>` blocks in the content; `openai`: tool calls against `tools` */
  toolFormat: 'text' | 'openai';
  /** OpenAI tool definitions (openai format) */
  tools?: readonly unknown[];
  /** argument schemas to check OpenAI tool calls with before they reach the environment */
  toolSchemas?: ToolSchemas;
  toolAliases?: Record<string, string>;
  /** openai format: the observation of a reply without a tool call, given its text (default: genericNoToolCallReminder) */
  noCallReminder?: (content: string | null) => string;
}

/** What a chat episode records besides its outcome. */
export interface ChatEpisodeRecord {
  messages: ChatApiMessage[];
  /** tokens of the final conversation: the last request's prompt and its completion */
  tokens: number;
  /** turns whose prompt the server was asked to count (a 1-token request) because the bound did not leave room */
  contextProbes: number;
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

function interpretReply(o: ChatTransportOptions, reply: ChatResult): InterpretedTurn {
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
function chatTurns(c: EpisodeCommon, o: ChatTransportOptions, messages: ChatApiMessage[], tools: readonly unknown[] | undefined, progress: Readonly<EpisodeProgress>) {
  const t = {
    /** the server's count of the last prompt sent: messages[0, counted.messages) were counted.tokens tokens */
    counted: null as { messages: number; tokens: number } | null,
    contextProbes: 0,
    request: (maxTokens: number): ChatRequest => ({
      messages: messages.slice(),
      ...(tools ? { tools } : {}),
      maxTokens,
      temperature: c.sampling.temperature,
      topP: c.sampling.topP,
      seed: turnSeed(c.seed, progress.steps),
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
      if (c.contextWindow === undefined) return null;
      const bound = t.promptBound();
      const want = Math.min(c.maxTokensPerTurn, c.responseBudget - progress.responseTokens);
      return bound + want <= c.contextWindow ? bound : t.probe();
    },
  };
  return t;
}

/** Chat completions as the loop's transport. */
export function chatTransport(t: ChatTransportOptions): EpisodeTransport<ChatEpisodeRecord> {
  return { start: (o, first, progress) => chatSession(t, o, first, progress) };
}

function chatSession(t: ChatTransportOptions, o: EpisodeCommon, first: ChatMessage[], progress: Readonly<EpisodeProgress>) {
  const messages: ChatApiMessage[] = first.map((m) => ({ role: m.role === 'assistant' ? 'user' : m.role, content: m.content }));
  const tools = t.toolFormat === 'openai' && t.tools?.length ? t.tools : undefined;
  const turns = chatTurns(o, t, messages, tools, progress);
  let promptTokens = 0;
  let lastCompletion = 0;

  const sample = async (maxTokens: number): Promise<SampledReply | 'overflow'> => {
    let r: ChatResult;
    try {
      r = await t.chat.chat(turns.request(maxTokens));
    } catch (e) {
      // the server's count decides: the loop asks it to count (recount) and plans the turn again
      if (isContextOverflow(e) && o.contextWindow !== undefined) return 'overflow';
      throw e;
    }
    if (r.usageReported) turns.counted = { messages: messages.length, tokens: r.promptTokens };
    promptTokens = r.promptTokens;
    lastCompletion = r.completionTokens;
    return {
      generated: r.completionTokens,
      finishReason: r.finishReason,
      cut: () => void messages.push({ role: 'assistant', content: r.content ?? '' }),
      interpret: () => {
        // what the environment executes (the one text format) and how its result goes back
        const turn = interpretReply(t, r);
        messages.push(turn.assistant);
        const { action } = turn;
        return {
          action,
          refused: turn.refused,
          shown: t.toolFormat === 'openai' && turn.r.toolCalls.length ? `${turn.r.content ?? ''}\n${action}`.trim() : action,
          contextLeft: () => (o.contextWindow === undefined || !r.usageReported ? null : o.contextWindow - r.promptTokens - r.completionTokens),
          answer: (obs) => void messages.push(...turn.reply(obs)),
        };
      },
    };
  };
  return {
    promptTokens: () => turns.promptTokensFor(),
    recount: () => turns.probe(),
    sample,
    result: (): ChatEpisodeRecord => ({ messages, tokens: promptTokens + lastCompletion, contextProbes: turns.contextProbes }),
  };
}
