// HTTP client for an OpenAI-compatible policy server (ours, vLLM, SGLang) with token-id prompts
// (DESIGN §4). Transient failures are retried a bounded number of times, then surface as
// PolicyUnavailableError so the rollout activity fails and Temporal retries it.

import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import type { CompletionRequest, CompletionResult, PolicyClient, ServedModel } from './types.ts';

/** A completion request that may restrict sampling to some token ids (small action vocabularies). */
export interface ConstrainedCompletionRequest extends CompletionRequest {
  allowedIds?: number[];
}

/** Infrastructure failure (server down, 5xx, timeouts after retries): retry the activity. */
export class PolicyUnavailableError extends Error {
  override name = 'PolicyUnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The server answered, but not in the expected shape, or refused the request (4xx: `status`). */
export class PolicyResponseError extends Error {
  override name = 'PolicyResponseError';
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

/** times a pinned completion reloads its model before giving up (another user of the server keeps taking it) */
const PIN_ATTEMPTS = 8;

export const PolicyClientOptionsSchema = z.object({
  baseUrl: z.string().url(),
  model: z.string().default('policy'),
  timeoutMs: z.number().int().positive().default(120_000),
  /** extra attempts after the first, for transient errors */
  retries: z.number().int().min(0).max(100).default(3),
  /** first back-off delay; doubles per attempt */
  backoffMs: z.number().int().min(0).default(200),
  /** sent as `Authorization: Bearer …` when set (hosted OpenAI-compatible endpoints) */
  apiKey: z.string().optional(),
  /** how loadWeights makes the server reload a checkpoint from disk (see WEIGHT_SYNC) */
  weightSync: z.enum(['sglang', 'vllm']).default('sglang'),
  /**
   * Our policy server only: every completion must come from checkpoint `checkpoint` at `dir`. The request
   * carries `model_path`; a server serving another model (a second run or an evaluation sharing the
   * learner worker swapped it) answers 409, and the client reloads `dir` and asks again, so no token of
   * an episode is sampled from another run's weights.
   */
  pin: z.object({ dir: z.string().min(1), checkpoint: z.number().int() }).optional(),
});
export type PolicyClientOptions = z.input<typeof PolicyClientOptionsSchema>;

const TOKEN_ID = /^token_id:(-?\d+)$/;

const CompletionResponseSchema = z.object({
  choices: z
    .array(
      z.object({
        text: z.string().optional(),
        finish_reason: z.string().nullable().optional(),
        token_ids: z.array(z.number().int()).nullable().optional(),
        logprobs: z
          .object({
            tokens: z.array(z.string()).optional(),
            token_logprobs: z.array(z.number().nullable()),
          })
          .nullable()
          .optional(),
      }),
    )
    .min(1),
});

const HealthSchema = z.object({ status: z.string().optional(), checkpoint: z.number().int().nullable().optional() }).passthrough();
/** SGLang's GET /get_model_info (model_path follows /update_weights_from_disk); ours adds the checkpoint index */
const ModelInfoSchema = z.object({ model_path: z.string().nullable().optional(), checkpoint: z.number().int().nullable().optional() }).passthrough();
const WeightInfoSchema = z.object({ weight_version: z.string().nullable().optional() }).passthrough();
const SglangUpdateSchema = z.object({ success: z.boolean(), message: z.string().optional() }).passthrough();

/**
 * Reloading a checkpoint directory from disk (DESIGN §4, §9), per server:
 *   sglang: SGLang's native `POST /update_weights_from_disk {"model_path"}` (our policy server speaks it too;
 *           the extra `checkpoint` field is ours and SGLang ignores it).
 *   vllm:   vLLM in dev mode (`VLLM_SERVER_DEV_MODE=1`): reload_weights through `/collective_rpc` between `/pause`
 *           and `/resume` (vllmLoadWeights); `GET /weight_info` tells the version served.
 */
export const WEIGHT_SYNC = ['sglang', 'vllm'] as const;
export type WeightSync = (typeof WEIGHT_SYNC)[number];

/** The weight_version label of checkpoint n at `dir` (vLLM stores it; servedModel reads n and dir back). */
export function weightVersion(dir: string, checkpoint: number): string {
  return `swerl-checkpoint-${checkpoint}:${dir}`;
}
const WEIGHT_VERSION = /^swerl-checkpoint-(-?\d+):(.*)$/s;

/**
 * Whether `served` is checkpoint `checkpoint` loaded from `dir`. The directory decides when the server
 * reports one: two runs sharing a server both have a checkpoint 3, and only the directory tells them apart.
 */
export function servesCheckpoint(served: ServedModel, dir: string, checkpoint: number): boolean {
  return served.path !== null ? resolve(served.path) === resolve(dir) : served.checkpoint === checkpoint;
}

/** Parses the first choice of a completions response into ids + logprobs. */
export function parseCompletionResponse(body: unknown): CompletionResult {
  const parsed = CompletionResponseSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new PolicyResponseError(
      `policy server returned an unexpected completion: ${issue.path.join('.') || '(root)'}: ${issue.message}; body starts ${JSON.stringify(body)?.slice(0, 200)}`,
    );
  }
  const choice = parsed.data.choices[0];
  let ids: number[];
  if (choice.token_ids) ids = choice.token_ids;
  else if (choice.logprobs?.tokens) {
    ids = choice.logprobs.tokens.map((t, i) => {
      const m = TOKEN_ID.exec(t);
      if (!m) throw new PolicyResponseError(`policy server token ${i} is ${JSON.stringify(t)}, expected "token_id:N" (return_tokens_as_token_ids)`);
      return Number(m[1]);
    });
  } else throw new PolicyResponseError('policy server returned neither token_ids nor logprobs.tokens');
  const lps = choice.logprobs?.token_logprobs;
  if (!lps) throw new PolicyResponseError('policy server returned no token_logprobs');
  if (lps.length !== ids.length) {
    throw new PolicyResponseError(`policy server returned ${ids.length} tokens but ${lps.length} log-probs`);
  }
  const logprobs = lps.map((x, i) => {
    if (x === null) throw new PolicyResponseError(`policy server log-prob ${i} is ${x}`);
    return x;
  });
  const finishReason = choice.finish_reason === 'length' ? 'length' : 'stop';
  return { ids, logprobs, finishReason };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A 5xx that no retry can fix: the server says the feature is missing (vLLM's "Weight transfer not configured",
 * 501 Not Implemented, a NotImplementedError). Answered with PolicyResponseError (status kept), never ten retries.
 */
export function isPermanentServerError(status: number, body: string): boolean {
  return status === 501 || /not configured|not implemented|NotImplementedError|not supported|unsupported/i.test(body);
}

/** One JSON request with bounded retries on network errors, timeouts, 429 and 5xx (then PolicyUnavailableError). */
function jsonRequester(o: z.infer<typeof PolicyClientOptionsSchema>) {
  const base = serverRoot(o.baseUrl);
  return async function request(method: 'GET' | 'POST', path: string, body?: unknown, retries = o.retries): Promise<unknown> {
    let last = '';
    for (let attempt = 0; attempt <= retries; attempt++) {
      if (attempt > 0) await sleep(o.backoffMs * 2 ** (attempt - 1));
      let res: Response;
      try {
        res = await fetch(base + path, {
          method,
          headers: body === undefined ? undefined : { 'content-type': 'application/json', ...(o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {}) },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(o.timeoutMs),
        });
      } catch (err) {
        const cause = (err as { cause?: { code?: string; message?: string } }).cause;
        last = `${(err as Error).name}: ${cause?.code ?? cause?.message ?? (err as Error).message}`;
        continue;
      }
      const text = await res.text().catch((e: Error) => `(body unreadable: ${e.message})`);
      if ((res.status >= 500 || res.status === 429) && !isPermanentServerError(res.status, text)) {
        last = `HTTP ${res.status}: ${text.slice(0, 200)}`;
        continue;
      }
      if (!res.ok) throw new PolicyResponseError(`${method} ${path} → HTTP ${res.status}: ${text.slice(0, 500)}`, res.status);
      try {
        return text === '' ? {} : JSON.parse(text);
      } catch {
        throw new PolicyResponseError(`${method} ${path} returned non-JSON: ${text.slice(0, 200)}`);
      }
    }
    throw new PolicyUnavailableError(`policy server ${base}${path} unavailable after ${retries + 1} attempts: ${last}`);
  };
}

export function createPolicyClient(options: PolicyClientOptions): PolicyClient & {
  complete(req: ConstrainedCompletionRequest): Promise<CompletionResult>;
  vllmInfo(): Promise<VllmServerInfo>;
  checkServedModel(): Promise<void>;
} {
  const o = PolicyClientOptionsSchema.parse(options);
  const request = jsonRequester(o);

  async function loadWeights(dir: string, checkpoint: number): Promise<void> {
    if (o.weightSync === 'vllm') return vllmLoadWeights(request, dir, checkpoint);
    const r = SglangUpdateSchema.safeParse(await request('POST', '/update_weights_from_disk', { model_path: dir, checkpoint }));
    if (r.success && !r.data.success) throw new PolicyResponseError(`POST /update_weights_from_disk: ${r.data.message ?? 'success: false'}`);
  }

  return {
    async complete(req: ConstrainedCompletionRequest): Promise<CompletionResult> {
      const body: Record<string, unknown> = {
        model: o.model,
        prompt: req.promptIds,
        max_tokens: req.maxTokens,
        temperature: req.temperature,
        top_p: req.topP,
        logprobs: 1,
        return_tokens_as_token_ids: true,
        return_token_ids: true,
        skip_special_tokens: false,
      };
      if (req.seed !== undefined) body.seed = req.seed;
      if (req.stopIds?.length) body.stop_token_ids = req.stopIds;
      if (req.allowedIds?.length) body.allowed_token_ids = req.allowedIds;
      if (!o.pin) return parseCompletionResponse(await request('POST', '/v1/completions', body));
      body.model_path = o.pin.dir;
      for (let attempt = 1; ; attempt++) {
        try {
          return parseCompletionResponse(await request('POST', '/v1/completions', body));
        } catch (e) {
          if (!(e instanceof PolicyResponseError && e.status === 409)) throw e;
          if (attempt === PIN_ATTEMPTS) {
            throw new PolicyUnavailableError(`policy server ${o.baseUrl}: another model was loaded over ${o.pin.dir} ${PIN_ATTEMPTS} times in a row (${e.message})`);
          }
          await loadWeights(o.pin.dir, o.pin.checkpoint);
        }
      }
    },

    loadWeights,

    /** vLLM only: what the server says about its dtype, head and weight-transfer backend (dev mode). */
    async vllmInfo(): Promise<VllmServerInfo> {
      return vllmServerInfo(request);
    },

    /**
     * Fails (PolicyResponseError, permanent) when the server lists its models and `model` is not one of them,
     * naming both: vLLM answers every completion for an unknown name with 404.
     */
    async checkServedModel(): Promise<void> {
      const names = await listedModels(request);
      if (names && !names.includes(o.model)) {
        throw new PolicyResponseError(
          `policy.model ${JSON.stringify(o.model)} is not a model ${o.baseUrl} serves (GET /v1/models lists ${JSON.stringify(names)}): ` +
            `set policy.model to one of them, or start vLLM with --served-model-name ${JSON.stringify(o.model)}`,
          404,
        );
      }
    },

    async servedModel(): Promise<ServedModel> {
      if (o.weightSync === 'vllm') {
        const info = WeightInfoSchema.safeParse(await request('GET', '/weight_info'));
        if (!info.success) throw new PolicyResponseError(`vLLM GET /weight_info: ${info.error.issues[0].message}`);
        const m = WEIGHT_VERSION.exec(info.data.weight_version ?? '');
        return m ? { checkpoint: Number(m[1]), path: m[2]! } : { checkpoint: null, path: null };
      }
      let info: unknown;
      try {
        info = await request('GET', '/get_model_info');
      } catch (e) {
        if (!(e instanceof PolicyResponseError)) throw e;
        // a server without SGLang's model info: the index from /health, no directory
        const parsed = HealthSchema.safeParse(await request('GET', '/health'));
        if (!parsed.success) throw new PolicyResponseError(`policy server /health: ${parsed.error.issues[0].message}`);
        return { checkpoint: parsed.data.checkpoint ?? null, path: null };
      }
      const parsed = ModelInfoSchema.safeParse(info);
      if (!parsed.success) throw new PolicyResponseError(`policy server /get_model_info: ${parsed.error.issues[0].message}`);
      return { checkpoint: parsed.data.checkpoint ?? null, path: parsed.data.model_path ?? null };
    },
  };
}

/** What a vLLM server in dev mode says about itself (GET /server_info?config_format=json), as the weight sync needs it. */
export interface VllmServerInfo {
  /** the dtype it computes in ("float32", "bfloat16", ...) */
  dtype: string;
  /** the weight-transfer backend it was started with (`--weight-transfer-config`); null: none (released vLLM: no "disk") */
  weightTransferBackend: string | null;
  /** started with `--hf-overrides '{"tie_word_embeddings": false}'`: the output head is a parameter of its own */
  untiedHead: boolean;
  servedModelNames: string[];
  maxModelLen: number | null;
}

const VllmServerInfoSchema = z.object({
  vllm_config: z
    .object({
      model_config: z
        .object({
          dtype: z.string().nullish(),
          hf_overrides: z.record(z.string(), z.unknown()).nullish(),
          served_model_name: z.union([z.string(), z.array(z.string())]).nullish(),
          max_model_len: z.number().nullish(),
        })
        .passthrough(),
      weight_transfer_config: z.object({ backend: z.string().nullish() }).passthrough().nullish(),
    })
    .passthrough(),
});

/** Parses vLLM's /server_info (json config format). */
export function parseVllmServerInfo(body: unknown): VllmServerInfo {
  const r = VllmServerInfoSchema.safeParse(body);
  if (!r.success) throw new PolicyResponseError(`vLLM GET /server_info: ${r.error.issues[0].path.join('.')}: ${r.error.issues[0].message}`);
  const mc = r.data.vllm_config.model_config;
  const names = mc.served_model_name ?? [];
  return {
    dtype: String(mc.dtype ?? 'unknown').replace(/^torch\./, ''),
    weightTransferBackend: r.data.vllm_config.weight_transfer_config?.backend ?? null,
    untiedHead: mc.hf_overrides?.tie_word_embeddings === false,
    servedModelNames: Array.isArray(names) ? names : [names],
    maxModelLen: mc.max_model_len ?? null,
  };
}

/** The flags a vLLM server needs for swerl's weight sync (named in errors and docs; tested on vLLM 0.32). */
export const VLLM_SYNC_FLAGS = 'VLLM_SERVER_DEV_MODE=1 (and, for a model with tied embeddings, --hf-overrides \'{"tie_word_embeddings": false}\')';

async function vllmServerInfo(request: ReturnType<typeof jsonRequester>): Promise<VllmServerInfo> {
  try {
    return parseVllmServerInfo(await request('GET', '/server_info?config_format=json'));
  } catch (e) {
    if (e instanceof PolicyResponseError && e.status === 404) {
      throw new PolicyResponseError(`vLLM weight sync: GET /server_info is not served (404): start vLLM with ${VLLM_SYNC_FLAGS} (${e.message})`, 404);
    }
    throw e;
  }
}

/**
 * Reloads checkpoint directory `dir` into a vLLM server (DESIGN §9), inside `POST /pause?mode=wait` … `POST /resume`
 * (dev mode; in-flight requests finish first, generation resumes whatever happened):
 *   released vLLM (0.32, 0.33): `POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}`
 *     (in place, any directory of the same architecture), then `POST /update_weight_version {"new_version"}`;
 *   a server that reports the `disk` weight-transfer backend (only an unreleased vLLM has it):
 *     `/init_weight_transfer_engine`, `/start_weight_update`, `/update_weights {"update_info": {"path"}}`,
 *     `/finish_weight_update {"weight_version"}`.
 * The version label `swerl-checkpoint-N:DIR` is what servedModel() reads back from `GET /weight_info`. The steps
 * are sent once each (a failed sync fails as a whole and is retried by its activity); errors that no retry can fix
 * (4xx, "not configured") are PolicyResponseError. That the server now computes what the checkpoint computes is
 * checked by the caller (the learner's probe), not here.
 */
async function vllmLoadWeights(request: ReturnType<typeof jsonRequester>, dir: string, checkpoint: number): Promise<void> {
  const path = resolve(dir); // vLLM takes absolute paths only
  if (!isAbsolute(path)) throw new PolicyResponseError(`vLLM weight sync: ${JSON.stringify(dir)} is not an absolute path`);
  const info = await vllmServerInfo(request);
  const once = (p: string, body?: unknown) => request('POST', p, body, 0);
  await request('POST', '/pause?mode=wait');
  let failure: unknown = null;
  try {
    if (info.weightTransferBackend === 'disk') {
      await once('/init_weight_transfer_engine', { init_info: {} }); // a no-op for the disk backend, so safe on every sync
      try {
        await once('/start_weight_update');
      } catch (e) {
        if (!(e instanceof PolicyUnavailableError)) throw e;
        // a session an interrupted sync left open: finishing it closes it (the disk backend aborts an empty one)
        await once('/finish_weight_update').catch(() => undefined);
        await once('/start_weight_update');
      }
      await once('/update_weights', { update_info: { path } });
      await once('/finish_weight_update', { weight_version: weightVersion(path, checkpoint) });
    } else {
      await once('/collective_rpc', { method: 'reload_weights', kwargs: { weights_path: path } });
      await once('/update_weight_version', { new_version: weightVersion(path, checkpoint) });
    }
  } catch (e) {
    failure = e;
  }
  await request('POST', '/resume').catch((e) => {
    failure ??= e;
  });
  if (failure) throw failure;
}

/**
 * The models a server lists (GET /v1/models). A client whose `model` is not among them gets a 404 on every
 * completion from vLLM ("The model … does not exist"): checkServedModel names the mismatch instead.
 */
async function listedModels(request: ReturnType<typeof jsonRequester>): Promise<string[] | null> {
  try {
    const r = z
      .object({ data: z.array(z.object({ id: z.string() }).passthrough()) })
      .passthrough()
      .safeParse(await request('GET', '/v1/models'));
    return r.success ? r.data.data.map((m) => m.id) : null;
  } catch (e) {
    if (e instanceof PolicyResponseError) return null; // a server without the listing: nothing to compare
    throw e;
  }
}

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
  const parsed = ChatResponseSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new PolicyResponseError(
      `chat server returned an unexpected completion: ${issue.path.join('.') || '(root)'}: ${issue.message}; body starts ${JSON.stringify(body)?.slice(0, 200)}`,
    );
  }
  const ch = parsed.data.choices[0];
  const fr = ch.finish_reason;
  return {
    content: ch.message.content ?? null,
    toolCalls: (ch.message.tool_calls ?? []).map((c, i) => ({
      id: c.id ?? `call_${i}`,
      type: 'function',
      function: { name: c.function.name, arguments: c.function.arguments ?? '{}' },
    })),
    finishReason: fr === 'length' || fr === 'tool_calls' || fr === 'content_filter' ? fr : 'stop',
    promptTokens: parsed.data.usage?.prompt_tokens ?? 0,
    completionTokens: parsed.data.usage?.completion_tokens ?? 0,
    usageReported: !!parsed.data.usage,
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

/** What the in-process adapter needs from gpu-learner's Learner (structural, so lib/ stays import-free). */
export interface TokenGenerator {
  generate(
    promptIds: Int32Array,
    opts: { maxNewTokens: number; temperature: number; topP: number; seed?: number; stopIds?: number[]; allowedIds?: number[] },
  ): Promise<{ ids: ArrayLike<number>; logprobs: ArrayLike<number>; finishReason: string }>;
}

/**
 * A PolicyClient over a Learner in the same process (benchmarks, tests): same interface as the
 * HTTP client, no server. Weights are the Learner's own, so loadWeights only records the index.
 */
export function createInProcessPolicyClient(
  generator: TokenGenerator,
  checkpoint: number | null = 0,
): PolicyClient & {
  complete(req: ConstrainedCompletionRequest): Promise<CompletionResult>;
} {
  let served = checkpoint;
  let servedPath: string | null = null;
  return {
    async complete(req: ConstrainedCompletionRequest): Promise<CompletionResult> {
      const out = await generator.generate(Int32Array.from(req.promptIds), {
        maxNewTokens: req.maxTokens,
        temperature: req.temperature,
        topP: req.topP,
        ...(req.seed !== undefined ? { seed: req.seed } : {}),
        ...(req.stopIds?.length ? { stopIds: req.stopIds } : {}),
        ...(req.allowedIds?.length ? { allowedIds: req.allowedIds } : {}),
      });
      return { ids: Array.from(out.ids), logprobs: Array.from(out.logprobs), finishReason: out.finishReason === 'length' ? 'length' : 'stop' };
    },
    async loadWeights(dir: string, cp: number): Promise<void> {
      served = cp;
      servedPath = dir;
    },
    async servedModel(): Promise<ServedModel> {
      return { checkpoint: served, path: servedPath };
    },
  };
}

// --- The server of an evaluation or a run: its root URL, what it serves, its context window ----------------

/**
 * The server's root for request paths (`/v1/...`, `/health`): `http://host:port/v1`, the form OpenAI clients
 * document, and `http://host:port` name the same server (a trailing `/v1` is dropped, never doubled).
 */
export function serverRoot(baseUrl: string): string {
  return baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '');
}

/**
 * Whether a refusal says the prompt plus max_tokens do not fit the model's context (ours, vLLM, SGLang,
 * llama.cpp's `exceed_context_size_error`, OpenAI's `context_length_exceeded`): a model outcome, not an error.
 */
export function isContextOverflow(e: unknown): boolean {
  return (
    e instanceof PolicyResponseError &&
    (e.status === 400 || e.status === 413) &&
    /context[ _](size|length|window)|maximum context|exceeds? the (available )?context|exceed_context_size/i.test(e.message)
  );
}

const ModelListSchema = z.object({
  data: z.array(
    z
      .object({
        id: z.string(),
        /** vLLM, SGLang, ours */
        max_model_len: z.number().int().positive().nullish(),
        /** llama.cpp's llama-server: the context of one slot */
        meta: z.object({ n_ctx: z.number().int().positive().nullish() }).passthrough().nullish(),
      })
      .passthrough(),
  ),
});

export interface ServerModels {
  /** the model ids of GET /v1/models */
  models: string[];
  /** the context window the server reports for `model` (or its only model), null when it does not say */
  contextWindow: number | null;
}

/** What GET /v1/models says: the model ids and the context window of `model` (max_model_len, or llama.cpp's meta.n_ctx). */
export async function listServerModels(options: PolicyClientOptions): Promise<ServerModels> {
  const o = PolicyClientOptionsSchema.parse(options);
  let body: unknown;
  try {
    body = await jsonRequester(o)('GET', '/v1/models');
  } catch (e) {
    if (e instanceof PolicyResponseError && e.status === 404) {
      throw new PolicyResponseError(
        `${serverRoot(o.baseUrl)}/v1/models is not served (404): is baseUrl ${JSON.stringify(o.baseUrl)} the OpenAI-compatible server's address (http://host:port or http://host:port/v1)?`,
        404,
      );
    }
    throw e;
  }
  const parsed = ModelListSchema.safeParse(body);
  if (!parsed.success)
    throw new PolicyResponseError(
      `GET ${serverRoot(o.baseUrl)}/v1/models: unexpected answer (${parsed.error.issues[0]!.path.join('.')}: ${parsed.error.issues[0]!.message}); body starts ${JSON.stringify(body)?.slice(0, 200)}`,
    );
  const data = parsed.data.data;
  const entry = data.find((m) => m.id === o.model) ?? (data.length === 1 ? data[0] : undefined);
  return { models: data.map((m) => m.id), contextWindow: entry?.max_model_len ?? entry?.meta?.n_ctx ?? null };
}

/**
 * The context window an episode must fit: the smaller of the server's (null: it does not say) and the
 * config's (null: not set); null when neither says.
 */
export function effectiveContextWindow(server: number | null, configured: number | null | undefined): number | null {
  if (server === null) return configured ?? null;
  return configured == null ? server : Math.min(server, configured);
}

export interface PreflightResult {
  models: string[];
  /** what the server reports (null: nothing) */
  serverContextWindow: number | null;
  /** what episodes must fit: effectiveContextWindow(server, config) */
  contextWindow: number | null;
}

/**
 * Before the first episode on a server: it answers, and it serves `model`. A model missing from /v1/models is
 * tried with a 1-token request (servers of one model, such as llama-server, take any name): refused, it fails
 * naming the model and the served ones. Throws PolicyUnavailableError (unreachable) or PolicyResponseError.
 */
export async function preflightServer(options: PolicyClientOptions, api: 'chat' | 'completions', configuredContext?: number): Promise<PreflightResult> {
  const o = PolicyClientOptionsSchema.parse(options);
  const listed = await listServerModels(o);
  if (!listed.models.includes(o.model)) {
    try {
      if (api === 'chat') await createChatClient(o).chat({ messages: [{ role: 'user', content: 'ping' }], maxTokens: 1, temperature: 0, topP: 1 });
      else await jsonRequester(o)('POST', '/v1/completions', { model: o.model, prompt: 'ping', max_tokens: 1, temperature: 0 });
    } catch (e) {
      if (!(e instanceof PolicyResponseError)) throw e;
      throw new PolicyResponseError(
        `the server at ${serverRoot(o.baseUrl)} does not serve model ${JSON.stringify(o.model)} (GET /v1/models lists ${listed.models.map((m) => JSON.stringify(m)).join(', ') || 'none'}; a request for it got: ${e.message.slice(0, 300)})`,
        e.status,
      );
    }
  }
  return { models: listed.models, serverContextWindow: listed.contextWindow, contextWindow: effectiveContextWindow(listed.contextWindow, configuredContext) };
}
