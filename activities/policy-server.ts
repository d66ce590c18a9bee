// Our OpenAI-compatible policy server (DESIGN §4), backed by gpu-learner: token-id completions with
// per-token log-probs, as vLLM speaks them, chat completions (chat template through @huggingface/jinja,
// tools, tool calls, log-probs), and SGLang's `update_weights_from_disk` for weight sync. A request
// parameter we do not implement is a 400 naming it, never silently ignored.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { z } from 'zod';
import type { TemplateMessage, Tokenizer } from '../lib/tokenizer.ts';
import { policyModelLoads, recordGeneration } from './metrics.ts';
import { chunkSeed } from '../lib/seed.ts';

/** What the server needs from gpu-learner's `Learner` (structural, so any engine with this shape serves). */
export interface ServableModel {
  readonly config?: { vocab_size?: number; max_position_embeddings?: number };
  generate(
    promptIds: Int32Array,
    opts: { maxNewTokens: number; temperature?: number; topP?: number; seed?: number; stopIds?: number[]; allowedIds?: number[]; topLogprobs?: number },
  ): Promise<{ ids: Int32Array; logprobs: Float32Array; finishReason: 'stop' | 'length'; topIds?: Int32Array; topLogprobs?: Float32Array }>;
  close(): void;
}

export type LoadModel = (dir: string) => Promise<ServableModel>;

export interface PolicyServerOptions {
  learner: ServableModel;
  /** enables string prompts, `text` in responses, `stop` strings and chat completions */
  tokenizer?: Tokenizer;
  /** 0 = ephemeral */
  port?: number;
  host?: string;
  modelName?: string;
  /** checkpoint index `learner` holds; null when unknown */
  checkpoint?: number | null;
  /** the directory `learner` was loaded from (GET /get_model_info's model_path); null when unknown */
  modelPath?: string | null;
  /** loads a checkpoint directory for /update_weights_from_disk; default: gpu-learner's Learner.load on the CPU */
  loadModel?: LoadModel;
  /** largest request body accepted, bytes */
  maxBodyBytes?: number;
}

export interface PolicyServer {
  url: string;
  port: number;
  /** stops accepting connections, waits for in-flight requests, closes learners the server loaded itself */
  close(): Promise<void>;
  /** serves `learner` from now on; resolves once requests still running on the previous one finished */
  setLearner(learner: ServableModel, checkpoint: number | null, modelPath?: string | null): Promise<void>;
  /** checkpoint index served now */
  readonly checkpoint: number | null;
}

/** Most top log-probs per position a request may ask for (OpenAI's limit). */
export const MAX_TOP_LOGPROBS = 20;

const int = z.number().int();
const ids = () => z.array(int.nonnegative());
/** Parameters whose only implemented value is the neutral one (0 penalty, no bias): anything else is a 400. */
const neutralOnly = (what: string) => z.number().refine((v) => v === 0, `${what} is not implemented by this server (only 0)`).nullish();

/** Sampling parameters both endpoints take. */
const samplingFields = {
  model: z.string().optional(),
  max_tokens: int.min(1).nullish(),
  temperature: z.number().min(0).default(1),
  top_p: z.number().gt(0).max(1).default(1),
  seed: int.nullish(),
  /** strings that end the completion; the text stops before the first one */
  stop: z.union([z.string().min(1), z.array(z.string().min(1)).max(16)]).nullish(),
  stop_token_ids: ids().nullish(),
  allowed_token_ids: ids().min(1).nullish(),
  skip_special_tokens: z.boolean().nullish(),
  n: z.literal(1).nullish(),
  stream: z.literal(false).nullish(),
  /** end-user id: metadata, no effect on sampling */
  user: z.string().nullish(),
  presence_penalty: neutralOnly('presence_penalty'),
  frequency_penalty: neutralOnly('frequency_penalty'),
  logit_bias: z.record(z.string(), z.number()).refine((v) => Object.keys(v).length === 0, 'logit_bias is not implemented by this server (only {})').nullish(),
};

const CompletionBodySchema = z
  .object({
    ...samplingFields,
    prompt: z.union([ids().min(1), z.array(ids().min(1)).length(1), z.string().min(1)], {
      error: 'expected a non-empty array of token ids (or [[ids]]), or a string',
    }),
    logprobs: int.min(0).max(MAX_TOP_LOGPROBS).nullish(),
    return_tokens_as_token_ids: z.boolean().nullish(),
    return_token_ids: z.boolean().nullish(),
    echo: z.literal(false).nullish(),
    best_of: z.literal(1).nullish(),
    /** swerl's extension: sample only from the model loaded from this directory, else 409 (the caller reloads it) */
    model_path: z.string().min(1).nullish(),
  })
  .strict();

const ContentSchema = z.union([
  z.string(),
  z.array(z.object({ type: z.literal('text'), text: z.string() }).strict(), { error: 'only text content parts are supported' }),
]);
const ToolCallSchema = z
  .object({
    id: z.string().optional(),
    type: z.literal('function').optional(),
    function: z.object({ name: z.string().min(1), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]) }).strict(),
  })
  .strict();
const MessageSchema = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content: ContentSchema, name: z.string().optional() }).strict(),
  z.object({ role: z.literal('developer'), content: ContentSchema, name: z.string().optional() }).strict(),
  z.object({ role: z.literal('user'), content: ContentSchema, name: z.string().optional() }).strict(),
  z
    .object({ role: z.literal('assistant'), content: ContentSchema.nullish(), tool_calls: z.array(ToolCallSchema).nullish(), name: z.string().optional() })
    .strict(),
  z.object({ role: z.literal('tool'), content: ContentSchema, tool_call_id: z.string() }).strict(),
]);
const ToolSchema = z
  .object({
    type: z.literal('function'),
    function: z
      .object({ name: z.string().min(1), description: z.string().optional(), parameters: z.record(z.string(), z.unknown()).optional(), strict: z.boolean().nullish() })
      .strict(),
  })
  .strict();

const ChatBodySchema = z
  .object({
    ...samplingFields,
    messages: z.array(MessageSchema).min(1),
    max_completion_tokens: int.min(1).nullish(),
    tools: z.array(ToolSchema).nullish(),
    /** 'required' and a named function would need constrained decoding: not implemented */
    tool_choice: z.enum(['auto', 'none']).nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    logprobs: z.boolean().nullish(),
    top_logprobs: int.min(0).max(MAX_TOP_LOGPROBS).nullish(),
    return_token_ids: z.boolean().nullish(),
    chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  })
  .strict();

const UpdateWeightsBodySchema = z.object({
  model_path: z.string().min(1),
  /** -1: a model directory that is no run's checkpoint (an evaluation of a path, as the learner worker serves it) */
  checkpoint: int.min(-1).nullish(),
});

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

function badRequest(err: z.ZodError, body: unknown): HttpError {
  const issue = err.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    const keys = (issue as unknown as { keys: string[] }).keys;
    const where = issue.path.length ? `${issue.path.map(String).join('.')}.` : '';
    return new HttpError(400, `${keys.map((k) => where + k).join(', ')}: not supported by this server (unknown or unimplemented parameter)`, where + keys[0]);
  }
  const field = issue.path.map(String).join('.') || '(body)';
  let value: unknown = body;
  for (const k of issue.path) value = value !== null && typeof value === 'object' ? (value as Record<PropertyKey, unknown>)[k as PropertyKey] : undefined;
  const shown = value === undefined ? 'missing' : JSON.stringify(value)?.slice(0, 100);
  return new HttpError(400, `${field}: ${issue.message} (got ${shown})`, field);
}

async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new HttpError(413, `body: larger than ${limit} bytes`, 'body');
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new HttpError(400, `body: not valid JSON (${(e as Error).message})`, 'body');
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

async function defaultLoadModel(dir: string): Promise<ServableModel> {
  const mod = (await import('../gpu-learner/index.ts')) as { Learner: { load(dir: string, opts?: { device?: 'cpu' | 'cuda' }): Promise<ServableModel> } };
  return mod.Learner.load(dir);
}

/** A served learner and the requests running on it. */
interface Slot {
  learner: ServableModel;
  checkpoint: number | null;
  /** where it was loaded from */
  path: string | null;
  inFlight: number;
  drained: (() => void)[];
  /** the server loaded it, so it closes it when replaced */
  owned: boolean;
}

/** What one generation asks of the engine, after validation. */
interface GenerationRequest {
  maxTokens: number;
  temperature: number;
  topP: number;
  seed?: number;
  stopIds: number[];
  allowedIds?: number[];
  stop: string[];
  topK: number;
  skipSpecial: boolean;
}

interface Generation {
  ids: number[];
  logprobs: number[];
  /** per position the top-K ids and log-probs (topK > 0) */
  top: { ids: number[]; logprobs: number[] }[];
  finishReason: 'stop' | 'length';
  /** the stop string that ended the completion, when one did */
  stopString: string | null;
  /** decoded text, before any stop string, without a final stop token */
  text: string;
}

/** Tokens of the first stop-string chunk; each later chunk doubles (so re-reading the prefix costs O(log n) prefills). */
const FIRST_STOP_CHUNK = 16;

/** `<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks (Qwen3 / Hermes format) in generated text. */
const TOOL_CALL_BLOCK = /<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/g;

export interface ParsedToolCalls {
  content: string | null;
  toolCalls: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
}

/** Splits generated text into content and tool calls; a block that is not valid JSON stays in the content. */
export function parseToolCallBlocks(text: string, idOf: () => string = () => `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`): ParsedToolCalls {
  const toolCalls: ParsedToolCalls['toolCalls'] = [];
  const content = text.replace(TOOL_CALL_BLOCK, (block, json: string) => {
    try {
      const v = JSON.parse(json) as { name?: unknown; arguments?: unknown };
      if (typeof v.name !== 'string' || !v.name) return block;
      const args = v.arguments === undefined ? {} : v.arguments;
      toolCalls.push({ id: idOf(), type: 'function', function: { name: v.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } });
      return '';
    } catch {
      return block;
    }
  });
  const trimmed = content.trim();
  return { content: toolCalls.length && trimmed === '' ? null : toolCalls.length ? trimmed : text, toolCalls };
}

const textOf = (c: z.infer<typeof ContentSchema> | null | undefined): string | null =>
  c === null || c === undefined ? null : typeof c === 'string' ? c : c.map((p) => p.text).join('');

export async function startPolicyServer(options: PolicyServerOptions): Promise<PolicyServer> {
  const host = options.host ?? '127.0.0.1';
  const modelName = options.modelName ?? 'policy';
  const tokenizer = options.tokenizer;
  const loadModel = options.loadModel ?? defaultLoadModel;
  const maxBody = options.maxBodyBytes ?? 64 * 1024 * 1024;
  const created = Math.floor(Date.now() / 1000);
  let current: Slot = { learner: options.learner, checkpoint: options.checkpoint ?? null, path: options.modelPath ?? null, inFlight: 0, drained: [], owned: false };
  policyModelLoads.inc({ via: 'start' });
  let swapChain: Promise<unknown> = Promise.resolve();
  let closed = false;

  const acquire = (): Slot => {
    const s = current;
    s.inFlight++;
    return s;
  };
  const release = (s: Slot): void => {
    if (--s.inFlight === 0) for (const f of s.drained.splice(0)) f();
  };
  const drain = (s: Slot): Promise<void> => (s.inFlight === 0 ? Promise.resolve() : new Promise((r) => s.drained.push(r)));

  /** Swaps in `next` for new requests, then waits for the old slot's requests and closes it when owned. */
  const swap = async (next: Slot): Promise<void> => {
    const old = current;
    current = next;
    await drain(old);
    if (old.owned) old.learner.close();
  };
  const serialised = <T>(fn: () => Promise<T>): Promise<T> => {
    const p = swapChain.then(fn, fn);
    swapChain = p.catch(() => undefined);
    return p;
  };

  const needTokenizer = (param: string, what: string): Tokenizer => {
    if (!tokenizer) throw new HttpError(400, `${param}: ${what} needs a tokenizer; this server has none (send token ids)`, param);
    return tokenizer;
  };

  /** Vocabulary and context checks against the served model. */
  function checkAgainstModel(slot: Slot, promptIds: readonly number[], maxTokens: number, lists: [string, readonly number[] | null | undefined][]): void {
    const vocab = slot.learner.config?.vocab_size;
    if (vocab !== undefined) {
      for (const [field, xs] of [['prompt', promptIds] as [string, readonly number[]], ...lists]) {
        const bad = xs?.findIndex((id) => id >= vocab) ?? -1;
        if (bad >= 0) throw new HttpError(400, `${field}.${bad}: token id ${xs![bad]} is outside the vocabulary [0, ${vocab})`, field);
      }
    }
    const maxLen = slot.learner.config?.max_position_embeddings;
    if (maxLen !== undefined && promptIds.length + maxTokens > maxLen) {
      throw new HttpError(400, `max_tokens: prompt (${promptIds.length} tokens) + max_tokens (${maxTokens}) exceeds the context of ${maxLen}`, 'max_tokens');
    }
  }

  /** One engine call, top log-probs unpacked per position. */
  async function engineCall(slot: Slot, promptIds: readonly number[], g: GenerationRequest, maxNew: number, seed: number | undefined) {
    let out: Awaited<ReturnType<ServableModel['generate']>>;
    const started = performance.now();
    try {
      out = await slot.learner.generate(Int32Array.from(promptIds), {
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
    const top: Generation['top'] = [];
    if (g.topK > 0) {
      if (!out.topIds || !out.topLogprobs || out.topIds.length !== n * g.topK) throw new HttpError(500, 'generation failed: the engine returned no top log-probs');
      for (let i = 0; i < n; i++) {
        top.push({ ids: Array.from(out.topIds.subarray(i * g.topK, (i + 1) * g.topK)), logprobs: Array.from(out.topLogprobs.subarray(i * g.topK, (i + 1) * g.topK)) });
      }
    }
    return { ids: Array.from(out.ids), logprobs: Array.from(out.logprobs), top, finishReason: out.finishReason };
  }

  /**
   * Generates up to maxTokens. With stop strings the engine runs in doubling chunks (each re-reads the
   * prompt and the tokens so far) and the completion ends at the token that completes the first stop
   * string; its text stops before it (OpenAI semantics).
   */
  async function generate(slot: Slot, promptIds: readonly number[], g: GenerationRequest): Promise<Generation> {
    const decode = (xs: number[], finish: 'stop' | 'length') => {
      const body = finish === 'stop' && xs.length && g.stopIds.includes(xs.at(-1)!) ? xs.slice(0, -1) : xs;
      return tokenizer ? tokenizer.decode(body, { skipSpecial: g.skipSpecial }) : '';
    };
    if (g.stop.length === 0) {
      const out = await engineCall(slot, promptIds, g, g.maxTokens, g.seed);
      return { ...out, stopString: null, text: decode(out.ids, out.finishReason) };
    }
    const tok = tokenizer!;
    const acc: { ids: number[]; logprobs: number[]; top: Generation['top'] } = { ids: [], logprobs: [], top: [] };
    const longest = Math.max(...g.stop.map((s) => s.length));
    let chunk = FIRST_STOP_CHUNK;
    let searchedTo = 0;
    for (let j = 0; ; j++) {
      const n = Math.min(chunk, g.maxTokens - acc.ids.length);
      const out = await engineCall(slot, [...promptIds, ...acc.ids], g, n, g.seed === undefined ? undefined : chunkSeed(g.seed, j));
      acc.ids.push(...out.ids);
      acc.logprobs.push(...out.logprobs);
      acc.top.push(...out.top);
      const text = decode(acc.ids, out.finishReason);
      // earliest occurrence of any stop string, searching only text that could hold a new one
      let at = -1;
      let which = '';
      for (const s of g.stop) {
        const k = text.indexOf(s, Math.max(0, searchedTo - longest));
        if (k >= 0 && (at < 0 || k < at)) [at, which] = [k, s];
      }
      if (at >= 0) {
        // the fewest tokens whose text reaches the end of the stop string
        let t = 1;
        while (t < acc.ids.length && tok.decode(acc.ids.slice(0, t), { skipSpecial: g.skipSpecial }).length < at + which.length) t++;
        return { ids: acc.ids.slice(0, t), logprobs: acc.logprobs.slice(0, t), top: acc.top.slice(0, t), finishReason: 'stop', stopString: which, text: text.slice(0, at) };
      }
      searchedTo = text.length;
      if (out.finishReason === 'stop' || acc.ids.length >= g.maxTokens || out.ids.length === 0) {
        return { ...acc, finishReason: out.finishReason === 'stop' ? 'stop' : 'length', stopString: null, text };
      }
      chunk *= 2;
    }
  }

  const stopList = (stop: string | string[] | null | undefined): string[] => (stop == null ? [] : typeof stop === 'string' ? [stop] : stop);

  async function completions(body: unknown): Promise<unknown> {
    const parsed = CompletionBodySchema.safeParse(body);
    if (!parsed.success) throw badRequest(parsed.error, body);
    const b = parsed.data;
    if (b.model !== undefined && b.model !== modelName) throw new HttpError(404, `model: the model ${JSON.stringify(b.model)} does not exist (serving ${JSON.stringify(modelName)})`, 'model');
    let promptIds: number[];
    if (typeof b.prompt === 'string') promptIds = needTokenizer('prompt', 'a text prompt').encode(b.prompt);
    else promptIds = Array.isArray(b.prompt[0]) ? (b.prompt[0] as number[]) : (b.prompt as number[]);
    const stop = stopList(b.stop);
    if (stop.length) needTokenizer('stop', 'stop strings');
    const maxTokens = b.max_tokens ?? 16;

    const slot = acquire();
    try {
      // checked on the slot this request holds: a swap waits for it, so the whole generation is that model's
      if (b.model_path != null && (slot.path === null || resolve(slot.path) !== resolve(b.model_path))) {
        throw new HttpError(409, `model_path: serving ${JSON.stringify(slot.path)}, not ${JSON.stringify(b.model_path)}; load it with /update_weights_from_disk`, 'model_path');
      }
      checkAgainstModel(slot, promptIds, maxTokens, [['stop_token_ids', b.stop_token_ids], ['allowed_token_ids', b.allowed_token_ids]]);
      const topK = b.logprobs ?? 0;
      const g = await generate(slot, promptIds, {
        maxTokens,
        temperature: b.temperature,
        topP: b.top_p,
        ...(b.seed != null ? { seed: b.seed } : {}),
        stopIds: b.stop_token_ids ?? [],
        ...(b.allowed_token_ids?.length ? { allowedIds: b.allowed_token_ids } : {}),
        stop,
        topK,
        skipSpecial: b.skip_special_tokens ?? true,
      });
      const asIds = b.return_tokens_as_token_ids || !tokenizer;
      const name = (id: number) => (asIds ? `token_id:${id}` : tokenizer!.decode([id]));
      const tokens = g.ids.map(name);
      return {
        id: `cmpl-${randomUUID()}`,
        object: 'text_completion',
        created: Math.floor(Date.now() / 1000),
        model: modelName,
        checkpoint: slot.checkpoint,
        choices: [
          {
            index: 0,
            text: g.text,
            finish_reason: g.finishReason,
            stop_reason: g.stopString,
            ...(b.return_token_ids === false ? {} : { token_ids: g.ids }),
            logprobs: {
              tokens,
              token_logprobs: g.logprobs,
              top_logprobs: topK > 0 ? g.top.map((p) => Object.fromEntries(p.ids.map((id, k) => [name(id), p.logprobs[k]!]))) : null,
              text_offset: null,
            },
          },
        ],
        usage: { prompt_tokens: promptIds.length, completion_tokens: g.ids.length, total_tokens: promptIds.length + g.ids.length },
      };
    } finally {
      release(slot);
    }
  }

  async function chatCompletions(body: unknown): Promise<unknown> {
    const parsed = ChatBodySchema.safeParse(body);
    if (!parsed.success) throw badRequest(parsed.error, body);
    const b = parsed.data;
    if (b.model !== undefined && b.model !== modelName) throw new HttpError(404, `model: the model ${JSON.stringify(b.model)} does not exist (serving ${JSON.stringify(modelName)})`, 'model');
    const tok = needTokenizer('messages', 'chat completions');
    if (b.max_tokens != null && b.max_completion_tokens != null && b.max_tokens !== b.max_completion_tokens) {
      throw new HttpError(400, `max_completion_tokens: ${b.max_completion_tokens} contradicts max_tokens ${b.max_tokens}; send one`, 'max_completion_tokens');
    }
    if (b.top_logprobs && !b.logprobs) throw new HttpError(400, `top_logprobs: needs logprobs: true (got ${b.top_logprobs})`, 'top_logprobs');
    const useTools = !!b.tools?.length && b.tool_choice !== 'none';
    const messages: TemplateMessage[] = b.messages.map((m) => {
      // `developer` is OpenAI's newer name for the system role
      const role = m.role === 'developer' ? 'system' : m.role;
      const content = textOf(m.content);
      if (m.role === 'assistant') return { role: 'assistant', content, ...(m.tool_calls?.length ? { tool_calls: m.tool_calls } : {}) };
      if (m.role === 'tool') return { role: 'tool', content: content ?? '', tool_call_id: m.tool_call_id };
      return { role, content: content ?? '' } as TemplateMessage;
    });
    let promptText: string;
    try {
      promptText = tok.applyChatTemplate(messages, { addGenerationPrompt: true, ...(useTools ? { tools: b.tools! } : {}), ...(b.chat_template_kwargs ? { kwargs: b.chat_template_kwargs } : {}) });
    } catch (e) {
      throw new HttpError(400, `messages: the chat template does not render them: ${(e as Error).message}`, 'messages');
    }
    const promptIds = tok.encode(promptText);
    const maxTokens = b.max_completion_tokens ?? b.max_tokens ?? Math.max(1, (current.learner.config?.max_position_embeddings ?? promptIds.length + 16) - promptIds.length);
    const stopIds = [...new Set([tok.imEnd, tok.eos, ...(b.stop_token_ids ?? [])])];

    const slot = acquire();
    try {
      checkAgainstModel(slot, promptIds, maxTokens, [['stop_token_ids', b.stop_token_ids], ['allowed_token_ids', b.allowed_token_ids]]);
      const topK = b.logprobs ? (b.top_logprobs ?? 0) : 0;
      const g = await generate(slot, promptIds, {
        maxTokens,
        temperature: b.temperature,
        topP: b.top_p,
        ...(b.seed != null ? { seed: b.seed } : {}),
        stopIds,
        ...(b.allowed_token_ids?.length ? { allowedIds: b.allowed_token_ids } : {}),
        stop: stopList(b.stop),
        topK,
        skipSpecial: b.skip_special_tokens ?? true,
      });
      let content: string | null = g.text;
      let toolCalls: ParsedToolCalls['toolCalls'] = [];
      if (useTools) {
        const p = parseToolCallBlocks(g.text);
        content = p.content;
        toolCalls = b.parallel_tool_calls === false ? p.toolCalls.slice(0, 1) : p.toolCalls;
      }
      const tokenText = (id: number) => tok.decode([id], { skipSpecial: false });
      const entry = (id: number, logprob: number) => {
        const token = tokenText(id);
        return { token, logprob, bytes: [...Buffer.from(token, 'utf8')] };
      };
      return {
        id: `chatcmpl-${randomUUID()}`,
        object: 'chat.completion',
        created: Math.floor(Date.now() / 1000),
        model: modelName,
        checkpoint: slot.checkpoint,
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) },
            logprobs: b.logprobs
              ? { content: g.ids.map((id, i) => ({ ...entry(id, g.logprobs[i]!), top_logprobs: topK > 0 ? g.top[i]!.ids.map((t, k) => entry(t, g.top[i]!.logprobs[k]!)) : [] })) }
              : null,
            finish_reason: toolCalls.length && g.finishReason === 'stop' && g.stopString === null ? 'tool_calls' : g.finishReason,
            stop_reason: g.stopString,
            ...(b.return_token_ids ? { token_ids: g.ids } : {}),
          },
        ],
        ...(b.return_token_ids ? { prompt_token_ids: promptIds } : {}),
        usage: { prompt_tokens: promptIds.length, completion_tokens: g.ids.length, total_tokens: promptIds.length + g.ids.length },
      };
    } finally {
      release(slot);
    }
  }

  async function updateWeights(body: unknown): Promise<unknown> {
    const parsed = UpdateWeightsBodySchema.safeParse(body);
    if (!parsed.success) throw badRequest(parsed.error, body);
    const { model_path: path, checkpoint } = parsed.data;
    return serialised(async () => {
      let learner: ServableModel;
      try {
        learner = await loadModel(path);
      } catch (e) {
        throw new HttpError(400, `model_path: ${JSON.stringify(path)} does not load: ${(e as Error).message}`, 'model_path');
      }
      if (closed) {
        learner.close();
        throw new HttpError(503, 'server is closing');
      }
      await swap({ learner, checkpoint: checkpoint ?? null, path, inFlight: 0, drained: [], owned: true });
      policyModelLoads.inc({ via: 'update_weights_from_disk' });
      return { success: true, message: `serving ${path}`, checkpoint: checkpoint ?? null };
    });
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    const method = req.method ?? 'GET';
    if (method === 'GET' && (path === '/health' || path === '/v1/health')) return send(res, 200, { status: 'ok', model: modelName, checkpoint: current.checkpoint });
    // SGLang's route: model_path is the directory served now, which tells the checkpoints of two runs apart
    if (method === 'GET' && path === '/get_model_info') {
      return send(res, 200, { model_path: current.path, tokenizer_path: current.path, is_generation: true, model: modelName, checkpoint: current.checkpoint });
    }
    if (method === 'GET' && path === '/v1/models') {
      return send(res, 200, {
        object: 'list',
        data: [
          {
            id: modelName,
            object: 'model',
            created,
            owned_by: 'swerl',
            checkpoint: current.checkpoint,
            max_model_len: current.learner.config?.max_position_embeddings ?? null,
          },
        ],
      });
    }
    if (method === 'POST' && path === '/v1/completions') return send(res, 200, await completions(await readJson(req, maxBody)));
    if (method === 'POST' && path === '/v1/chat/completions') return send(res, 200, await chatCompletions(await readJson(req, maxBody)));
    if (method === 'POST' && path === '/update_weights_from_disk') return send(res, 200, await updateWeights(await readJson(req, maxBody)));
    const known = ['/health', '/get_model_info', '/v1/models', '/v1/completions', '/v1/chat/completions', '/update_weights_from_disk'];
    if (known.includes(path ?? '')) throw new HttpError(405, `method ${method} not allowed on ${path}`);
    throw new HttpError(404, `no route ${method} ${path}`);
  }

  const server = createServer((req, res) => {
    route(req, res).catch((e: unknown) => {
      const err = e instanceof HttpError ? e : new HttpError(500, (e as Error)?.message ?? String(e));
      if (res.headersSent) return res.destroy();
      send(res, err.status, {
        error: { message: err.message, type: err.status >= 500 ? 'internal_error' : 'invalid_request_error', param: err.param, code: err.status },
      });
    });
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}`,
    port,
    get checkpoint() {
      return current.checkpoint;
    },
    setLearner(learner: ServableModel, checkpoint: number | null, modelPath: string | null = null): Promise<void> {
      policyModelLoads.inc({ via: 'learner' });
      return serialised(() => swap({ learner, checkpoint, path: modelPath, inFlight: 0, drained: [], owned: false }));
    },
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      const stopped = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections();
      await swapChain;
      await drain(current);
      server.closeIdleConnections();
      const force = setTimeout(() => server.closeAllConnections(), 1_000);
      await stopped;
      clearTimeout(force);
      if (current.owned) current.learner.close();
    },
  };
}
