// The chat-completions episode mode: the same environments, steps, budgets and end reasons as the token
// loop (lib/episode.ts), for a model served anywhere behind `/v1/chat/completions`. The conversation is
// kept as OpenAI messages (no token ids: the server templates them). The agent calls tools in the
// R2E-Gym text format (the server stops at `</function>`) or as OpenAI tool calls; both reach the
// environment as the one text format (lib/toolcall.ts formats and parses it).
import { TOKEN_BUDGET_WARNING, turnSeed, type EpisodeStepEvent } from './episode.ts';
import type { ChatApiMessage, ChatClient, ChatResult } from './policy-client.ts';
import { formatToolCall, parseOpenAIToolCalls, type ToolSchemas } from './toolcall.ts';
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
  maxSteps: number;
  /** generated tokens over the episode (the server's usage.completion_tokens) */
  maxResponseTokens: number;
  maxTokensPerTurn: number;
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
  info: Record<string, unknown>;
}

const FUNCTION_OPEN = '<function=';
const FUNCTION_CLOSE = '</function>';

/** The text-format reply as the model meant it: a call cut by the `</function>` stop string is closed again. */
function closeCall(content: string, r: ChatResult): string {
  const open = content.lastIndexOf(FUNCTION_OPEN);
  if (r.finishReason !== 'stop' || open < 0 || content.indexOf(FUNCTION_CLOSE, open) >= 0) return content;
  return `${content.replace(/\s*$/, '')}\n${FUNCTION_CLOSE}`;
}

export async function runChatEpisode(o: RunChatEpisodeOptions): Promise<ChatEpisodeResult> {
  const now = o.now ?? Date.now;
  const info: Record<string, unknown> = {};
  const initial = await o.env.reset();
  const messages: ChatApiMessage[] = initial.map((m) =>
    m.role === 'system' && o.systemPrompt !== undefined ? { role: 'system', content: o.systemPrompt } : { role: m.role === 'assistant' ? 'user' : m.role, content: m.content },
  );
  let steps = 0;
  let responseTokens = 0;
  let promptTokens = 0;
  let lastCompletion = 0;
  let end: EndReason | undefined;

  while (end === undefined) {
    if (o.deadlineMs !== undefined && now() >= o.deadlineMs) {
      end = 'timeout';
      break;
    }
    const remaining = o.maxResponseTokens - responseTokens;
    if (remaining <= 0) {
      end = 'max_context';
      break;
    }
    const maxTokens = Math.min(o.maxTokensPerTurn, remaining);
    const r = await o.chat.chat({
      messages: messages.slice(),
      ...(o.toolFormat === 'openai' && o.tools?.length ? { tools: o.tools } : {}),
      maxTokens,
      temperature: o.sampling.temperature,
      topP: o.sampling.topP,
      seed: turnSeed(o.seed, steps),
      ...(o.toolFormat === 'text' ? { stop: [FUNCTION_CLOSE] } : {}),
    });
    responseTokens += r.completionTokens;
    promptTokens = r.promptTokens;
    lastCompletion = r.completionTokens;
    steps++;
    if (r.finishReason === 'length' && responseTokens >= o.maxResponseTokens && maxTokens < o.maxTokensPerTurn) {
      messages.push({ role: 'assistant', content: r.content ?? '' });
      end = 'max_context';
      break;
    }

    // what the environment executes (the one text format) and how its result goes back
    let action: string;
    let reply: (observation: string) => ChatApiMessage[];
    let refused: string | null = null;
    if (o.toolFormat === 'openai') {
      messages.push({ role: 'assistant', content: r.content, ...(r.toolCalls.length ? { tool_calls: r.toolCalls } : {}) });
      if (r.toolCalls.length) {
        const first = r.toolCalls[0]!;
        const parsed = parseOpenAIToolCalls([first], { ...(o.toolSchemas ? { tools: o.toolSchemas } : {}), ...(o.toolAliases ? { aliases: o.toolAliases } : {}) });
        action = parsed.ok ? formatToolCall(parsed.call) : '';
        if (!parsed.ok) refused = `ERROR: ${parsed.error}\nFix the function call and try again.`;
        // every call gets an answer; only the first one runs
        reply = (obs) =>
          r.toolCalls.map((c, i) => ({ role: 'tool', tool_call_id: c.id, content: i === 0 ? obs : 'Not executed: only the first function call of a reply runs.' }));
      } else {
        action = r.content ?? '';
        reply = (obs) => [{ role: 'user', content: obs }];
      }
    } else {
      action = closeCall(r.content ?? '', r);
      messages.push({ role: 'assistant', content: action });
      reply = (obs) => [{ role: 'user', content: obs }];
    }

    let observation: string;
    let done = false;
    let envEnd: EndReason | undefined;
    if (refused !== null) observation = refused;
    else {
      // environments throw from step only for infrastructure (a dead sandbox): it propagates and is retried (DESIGN §2)
      const s = await o.env.step(action);
      observation = s.observation;
      done = s.done;
      envEnd = s.end;
      if (s.info) Object.assign(info, s.info);
    }
    await o.onStep?.({ step: steps, responseTokens, action: o.toolFormat === 'openai' && r.toolCalls.length ? `${r.content ?? ''}\n${action}`.trim() : action, observation, done });
    if (done) {
      end = envEnd ?? 'done';
      break;
    }
    if (steps >= o.maxSteps) {
      end = 'max_steps';
      break;
    }
    if (o.deadlineMs !== undefined && now() >= o.deadlineMs) {
      end = 'timeout';
      break;
    }
    if (o.maxResponseTokens - responseTokens <= 0) {
      end = 'max_context';
      break;
    }
    let obs = observation;
    if (o.stepsRemainingSuffix) obs += `\nSteps Remaining: ${o.maxSteps - steps}`;
    const left = o.maxResponseTokens - responseTokens;
    if (o.tokenWarningAt !== undefined && left <= o.tokenWarningAt) obs += `\n${o.tokenWarning ? o.tokenWarning(left) : TOKEN_BUDGET_WARNING}`;
    messages.push(...reply(obs));
  }

  let reward = 0;
  if (end !== 'error') {
    // infrastructure: a grading run that cannot happen throws and the episode is retried
    const g = await o.env.reward(end);
    reward = g.reward;
    Object.assign(info, g.info ?? {});
  }
  return { messages, reward, end, steps, tokens: promptTokens + lastCompletion, responseTokens, info };
}
