// Client of any OpenAI-compatible `/v1/chat/completions` (ours, vLLM, SGLang, llama.cpp, hosted APIs).
import { z } from 'zod';
import { jsonRequester, parseServerResponse, PolicyClientOptionsSchema, type PolicyClientOptions } from './http.ts';

/** An OpenAI tool call as the chat API returns it (arguments are a JSON string). */
export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A chat-completions message (OpenAI shape). */
export type ChatApiMessage =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[] }
  | { role: 'tool'; content: string; tool_call_id: string };

export interface ChatRequest {
  messages: ChatApiMessage[];
  /** OpenAI tool definitions (`[{type: 'function', function: {name, description, parameters}}]`) */
  tools?: readonly unknown[];
  maxTokens: number;
  temperature: number;
  topP: number;
  seed?: number;
  stop?: string[];
  /** per-token log-probs; with topLogprobs k, the k most likely tokens of each position */
  logprobs?: boolean;
  topLogprobs?: number;
}

export interface TokenLogprob {
  token: string;
  logprob: number;
  top: { token: string; logprob: number }[];
}

export interface ChatResult {
  content: string | null;
  toolCalls: ChatToolCall[];
  finishReason: 'stop' | 'length' | 'tool_calls' | 'content_filter';
  promptTokens: number;
  completionTokens: number;
  /** whether the server sent `usage` (the token counts are 0 when it did not) */
  usageReported: boolean;
  logprobs: TokenLogprob[] | null;
}

const ChatResponseSchema = z.object({
  choices: z
    .array(
      z.object({
        message: z.object({
          content: z.string().nullish(),
          tool_calls: z
            .array(z.object({ id: z.string().optional(), type: z.string().optional(), function: z.object({ name: z.string(), arguments: z.string().optional() }) }))
            .nullish(),
        }),
        finish_reason: z.string().nullish(),
        logprobs: z
          .object({
            content: z.array(z.object({ token: z.string(), logprob: z.number(), top_logprobs: z.array(z.object({ token: z.string(), logprob: z.number() })).nullish() })).nullish(),
          })
          .nullish(),
      }),
    )
    .min(1),
  usage: z.object({ prompt_tokens: z.number().int(), completion_tokens: z.number().int() }).nullish(),
});

/** Parses the first choice of a chat-completions response. */
export function parseChatResponse(body: unknown): ChatResult {
  const data = parseServerResponse(ChatResponseSchema, body, 'chat server');
  const ch = data.choices[0];
  const fr = ch.finish_reason;
  return {
    content: ch.message.content ?? null,
    toolCalls: (ch.message.tool_calls ?? []).map((c, i) => ({
      id: c.id ?? `call_${i}`,
      type: 'function',
      function: { name: c.function.name, arguments: c.function.arguments ?? '{}' },
    })),
    finishReason: fr === 'length' || fr === 'tool_calls' || fr === 'content_filter' ? fr : 'stop',
    promptTokens: data.usage?.prompt_tokens ?? 0,
    completionTokens: data.usage?.completion_tokens ?? 0,
    usageReported: !!data.usage,
    logprobs: ch.logprobs?.content ? ch.logprobs.content.map((p) => ({ token: p.token, logprob: p.logprob, top: p.top_logprobs ?? [] })) : null,
  };
}

export interface ChatClient {
  chat(req: ChatRequest): Promise<ChatResult>;
}

/** Client of any OpenAI-compatible `/v1/chat/completions` (ours, vLLM, SGLang, hosted APIs). */
export function createChatClient(options: PolicyClientOptions): ChatClient {
  const o = PolicyClientOptionsSchema.parse(options);
  const request = jsonRequester(o);
  return {
    async chat(req: ChatRequest): Promise<ChatResult> {
      const body: Record<string, unknown> = {
        model: o.model,
        messages: req.messages,
        max_tokens: req.maxTokens,
        temperature: req.temperature,
        top_p: req.topP,
      };
      if (req.tools?.length) body.tools = req.tools;
      if (req.seed !== undefined) body.seed = req.seed;
      if (req.stop?.length) body.stop = req.stop;
      if (req.logprobs) {
        body.logprobs = true;
        if (req.topLogprobs) body.top_logprobs = req.topLogprobs;
      }
      return parseChatResponse(await request('POST', '/v1/chat/completions', body));
    },
  };
}
