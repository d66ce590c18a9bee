// The two completion endpoints. Each parses its body into a prompt and a GenerationRequest, then both take
// one path (`generateOnServedModel`: hold the served model, check the request against it, generate its n
// samples on the model's scheduler, let go) and shape the result in their own API's form, a choice per sample.
import { randomUUID } from 'node:crypto';
import type { TemplateMessage, Tokenizer } from '../lib/tokenizer.ts';
import { generate, type Generation, type GenerationRequest } from './generation.ts';
import { badRequest, HttpError } from './http.ts';
import type { ServedModels, Slot } from './models.ts';
import type { Schedulers } from './scheduler.ts';
import { ChatBodySchema, CompletionBodySchema, textOf, type ChatBody, type CompletionBody } from './schemas.ts';
import { extractToolCallBlocks, type ExtractedToolCalls } from '../lib/toolcall.ts';

export interface CompletionContext {
  modelName: string;
  tokenizer?: Tokenizer;
  models: ServedModels;
  /** how requests share each model's engine (scheduler.ts) */
  schedulers: Schedulers;
}

/** A validated request, ready for the served model. */
interface Prepared {
  promptIds: number[];
  request: GenerationRequest;
  /** token-id lists of the request, checked against the vocabulary with the prompt */
  idLists: [string, readonly number[] | null | undefined][];
  /** only the model loaded from this directory may serve it (409 otherwise) */
  modelPath?: string | null;
}

/** Holds the served model for the whole generation (a swap waits for it), so every token comes from one model. */
async function generateOnServedModel(ctx: CompletionContext, p: Prepared, signal?: AbortSignal): Promise<{ generations: Generation[]; checkpoint: number | null }> {
  // a pinned request runs on the model of its directory when the server holds it, whichever one it serves now;
  // each held model has its own scheduler, so requests pinned to different versions decode in different batches
  const slot = ctx.models.acquire(p.modelPath);
  if (!slot) {
    const held = ctx.models.cachedPaths;
    throw new HttpError(409, `model_path: ${JSON.stringify(p.modelPath)} is not loaded (holding ${JSON.stringify(held)}); load it with /update_weights_from_disk`, 'model_path');
  }
  try {
    checkAgainstModel(slot, p.promptIds, p.request.maxTokens, p.idLists);
    return { generations: await generate(ctx.schedulers.of(slot.learner), ctx.tokenizer, p.promptIds, p.request, signal), checkpoint: slot.checkpoint };
  } finally {
    ctx.models.release(slot);
  }
}

/** Vocabulary and context checks against the served model. */
function checkAgainstModel(slot: Slot, promptIds: readonly number[], maxTokens: number, lists: Prepared['idLists']): void {
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

function needTokenizer(ctx: CompletionContext, param: string, what: string): Tokenizer {
  if (!ctx.tokenizer) throw new HttpError(400, `${param}: ${what} needs a tokenizer; this server has none (send token ids)`, param);
  return ctx.tokenizer;
}

function checkModelName(ctx: CompletionContext, model: string | undefined): void {
  if (model !== undefined && model !== ctx.modelName) {
    throw new HttpError(404, `model: the model ${JSON.stringify(model)} does not exist (serving ${JSON.stringify(ctx.modelName)})`, 'model');
  }
}

const stopList = (stop: string | string[] | null | undefined): string[] => (stop == null ? [] : typeof stop === 'string' ? [stop] : stop);

/** The sampling fields both endpoints share, as the engine takes them. */
function samplingOf(b: CompletionBody | ChatBody, maxTokens: number, stopIds: number[], topK: number): GenerationRequest {
  return {
    n: b.n ?? 1,
    maxTokens,
    temperature: b.temperature,
    topP: b.top_p,
    ...(b.seed != null ? { seed: b.seed } : {}),
    stopIds,
    ...(b.allowed_token_ids?.length ? { allowedIds: b.allowed_token_ids } : {}),
    stop: stopList(b.stop),
    topK,
    skipSpecial: b.skip_special_tokens ?? true,
  };
}

const usageOf = (promptIds: number[], gs: Generation[]) => {
  const completion = gs.reduce((a, g) => a + g.ids.length, 0);
  return { prompt_tokens: promptIds.length, completion_tokens: completion, total_tokens: promptIds.length + completion };
};

/** POST /v1/completions. */
export async function completions(ctx: CompletionContext, body: unknown, signal?: AbortSignal): Promise<unknown> {
  const parsed = CompletionBodySchema.safeParse(body);
  if (!parsed.success) throw badRequest(parsed.error, body);
  const b = parsed.data;
  checkModelName(ctx, b.model);
  const promptIds =
    typeof b.prompt === 'string' ? needTokenizer(ctx, 'prompt', 'a text prompt').encode(b.prompt) : Array.isArray(b.prompt[0]) ? (b.prompt[0] as number[]) : (b.prompt as number[]);
  if (stopList(b.stop).length) needTokenizer(ctx, 'stop', 'stop strings');
  const topK = b.logprobs ?? 0;
  const request = samplingOf(b, b.max_tokens ?? 16, b.stop_token_ids ?? [], topK);
  const { generations, checkpoint } = await generateOnServedModel(
    ctx,
    {
      promptIds,
      request,
      idLists: [
        ['stop_token_ids', b.stop_token_ids],
        ['allowed_token_ids', b.allowed_token_ids],
      ],
      modelPath: b.model_path,
    },
    signal,
  );
  const { tokenizer } = ctx;
  const asIds = b.return_tokens_as_token_ids || !tokenizer;
  const name = (id: number) => (asIds ? `token_id:${id}` : tokenizer!.decode([id]));
  return {
    id: `cmpl-${randomUUID()}`,
    object: 'text_completion',
    created: Math.floor(Date.now() / 1000),
    model: ctx.modelName,
    checkpoint,
    choices: generations.map((g, index) => ({
      index,
      text: g.text,
      finish_reason: g.finishReason,
      stop_reason: g.stopString,
      ...(b.return_token_ids === false ? {} : { token_ids: g.ids }),
      logprobs: {
        tokens: g.ids.map(name),
        token_logprobs: g.logprobs,
        top_logprobs: topK > 0 ? g.top.map((p) => Object.fromEntries(p.ids.map((id, k) => [name(id), p.logprobs[k]!]))) : null,
        text_offset: null,
      },
    })),
    usage: usageOf(promptIds, generations),
  };
}

/** The chat messages as the chat template takes them (`developer` is OpenAI's newer name for `system`). */
function templateMessages(b: ChatBody): TemplateMessage[] {
  return b.messages.map((m): TemplateMessage => {
    const content = textOf(m.content);
    if (m.role === 'assistant') return { role: 'assistant', content, ...(m.tool_calls?.length ? { tool_calls: m.tool_calls } : {}) };
    if (m.role === 'tool') return { role: 'tool', content: content ?? '', tool_call_id: m.tool_call_id };
    return { role: m.role === 'developer' ? 'system' : m.role, content: content ?? '' };
  });
}

/** POST /v1/chat/completions: the chat template renders the prompt; `<tool_call>` blocks come back as tool_calls. */
export async function chatCompletions(ctx: CompletionContext, body: unknown, signal?: AbortSignal): Promise<unknown> {
  const parsed = ChatBodySchema.safeParse(body);
  if (!parsed.success) throw badRequest(parsed.error, body);
  const b = parsed.data;
  checkModelName(ctx, b.model);
  const tok = needTokenizer(ctx, 'messages', 'chat completions');
  if (b.max_tokens != null && b.max_completion_tokens != null && b.max_tokens !== b.max_completion_tokens) {
    throw new HttpError(400, `max_completion_tokens: ${b.max_completion_tokens} contradicts max_tokens ${b.max_tokens}; send one`, 'max_completion_tokens');
  }
  if (b.top_logprobs && !b.logprobs) throw new HttpError(400, `top_logprobs: needs logprobs: true (got ${b.top_logprobs})`, 'top_logprobs');
  const useTools = !!b.tools?.length && b.tool_choice !== 'none';
  let promptText: string;
  try {
    promptText = tok.applyChatTemplate(templateMessages(b), {
      addGenerationPrompt: true,
      ...(useTools ? { tools: b.tools! } : {}),
      ...(b.chat_template_kwargs ? { kwargs: b.chat_template_kwargs } : {}),
    });
  } catch (e) {
    throw new HttpError(400, `messages: the chat template does not render them: ${(e as Error).message}`, 'messages');
  }
  const promptIds = tok.encode(promptText);
  const context = ctx.models.current.learner.config?.max_position_embeddings ?? promptIds.length + 16;
  const maxTokens = b.max_completion_tokens ?? b.max_tokens ?? Math.max(1, context - promptIds.length);
  const stopIds = [...new Set([tok.imEnd, tok.eos, ...(b.stop_token_ids ?? [])])];
  const topK = b.logprobs ? (b.top_logprobs ?? 0) : 0;
  const { generations, checkpoint } = await generateOnServedModel(
    ctx,
    {
      promptIds,
      request: samplingOf(b, maxTokens, stopIds, topK),
      idLists: [
        ['stop_token_ids', b.stop_token_ids],
        ['allowed_token_ids', b.allowed_token_ids],
      ],
    },
    signal,
  );

  const entry = (id: number, logprob: number) => {
    const token = tok.decode([id], { skipSpecial: false });
    return { token, logprob, bytes: [...Buffer.from(token, 'utf8')] };
  };
  return {
    id: `chatcmpl-${randomUUID()}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: ctx.modelName,
    checkpoint,
    choices: generations.map((g, index) => {
      let content: string | null = g.text;
      let toolCalls: ExtractedToolCalls['toolCalls'] = [];
      if (useTools) {
        const p = extractToolCallBlocks(g.text);
        content = p.content;
        toolCalls = b.parallel_tool_calls === false ? p.toolCalls.slice(0, 1) : p.toolCalls;
      }
      return {
        index,
        message: { role: 'assistant', content, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) },
        logprobs: b.logprobs
          ? { content: g.ids.map((id, i) => ({ ...entry(id, g.logprobs[i]!), top_logprobs: topK > 0 ? g.top[i]!.ids.map((t, k) => entry(t, g.top[i]!.logprobs[k]!)) : [] })) }
          : null,
        finish_reason: toolCalls.length && g.finishReason === 'stop' && g.stopString === null ? 'tool_calls' : g.finishReason,
        stop_reason: g.stopString,
        ...(b.return_token_ids ? { token_ids: g.ids } : {}),
      };
    }),
    ...(b.return_token_ids ? { prompt_token_ids: promptIds } : {}),
    usage: usageOf(promptIds, generations),
  };
}
