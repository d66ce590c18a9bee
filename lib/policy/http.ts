// The HTTP transport of every policy client (DESIGN §4): one JSON request with bounded retries, the errors that
// tell infrastructure (retry the activity) from a refusal, and the options every client takes.
import { z } from 'zod';

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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A 5xx that no retry can fix: the server says the feature is missing (vLLM's "Weight transfer not configured",
 * 501 Not Implemented, a NotImplementedError). Answered with PolicyResponseError (status kept), never ten retries.
 */
export function isPermanentServerError(status: number, body: string): boolean {
  return status === 501 || /not configured|not implemented|NotImplementedError|not supported|unsupported/i.test(body);
}

/** One JSON request with bounded retries on network errors, timeouts, 429 and 5xx (then PolicyUnavailableError). */
export function jsonRequester(o: z.infer<typeof PolicyClientOptionsSchema>) {
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

/** A bound request function (jsonRequester's result). */
export type Requester = ReturnType<typeof jsonRequester>;

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

/** `body` checked against `schema`; a mismatch is a PolicyResponseError naming the first issue and the body's start. */
export function parseServerResponse<T>(schema: z.ZodType<T>, body: unknown, server: string): T {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  throw new PolicyResponseError(
    `${server} returned an unexpected completion: ${issue.path.join('.') || '(root)'}: ${issue.message}; body starts ${JSON.stringify(body)?.slice(0, 200)}`,
  );
}
