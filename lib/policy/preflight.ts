// Before the first episode on a server: it answers, it serves the model, and the context window episodes must fit.
import { z } from 'zod';
import { createChatClient } from './chat.ts';
import { jsonRequester, PolicyClientOptionsSchema, PolicyResponseError, serverRoot, type PolicyClientOptions, type Requester } from './http.ts';

/**
 * The models a server lists (GET /v1/models). A client whose `model` is not among them gets a 404 on every
 * completion from vLLM ("The model … does not exist"): checkServedModel names the mismatch instead.
 */
export async function listedModels(request: Requester): Promise<string[] | null> {
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
