// Our OpenAI-compatible policy server (DESIGN §4), backed by gpu-learner: token-id completions with
// per-token log-probs, as vLLM speaks them, and SGLang's `update_weights_from_disk` for weight sync.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { Tokenizer } from '../lib/tokenizer.ts';

/** What the server needs from gpu-learner's `Learner` (structural, so any engine with this shape serves). */
export interface ServableModel {
  readonly config?: { vocab_size?: number; max_position_embeddings?: number };
  generate(
    promptIds: Int32Array,
    opts: { maxNewTokens: number; temperature?: number; topP?: number; seed?: number; stopIds?: number[]; allowedIds?: number[] },
  ): Promise<{ ids: Int32Array; logprobs: Float32Array; finishReason: 'stop' | 'length' }>;
  close(): void;
}

export type LoadModel = (dir: string) => Promise<ServableModel>;

export interface PolicyServerOptions {
  learner: ServableModel;
  /** enables string prompts and `text` in responses */
  tokenizer?: Tokenizer;
  /** 0 = ephemeral */
  port?: number;
  host?: string;
  modelName?: string;
  /** checkpoint index `learner` holds; null when unknown */
  checkpoint?: number | null;
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
  setLearner(learner: ServableModel, checkpoint: number | null): Promise<void>;
  /** checkpoint index served now */
  readonly checkpoint: number | null;
}

const int = z.number().int();
const CompletionBodySchema = z.object({
  model: z.string().optional(),
  prompt: z.union([z.array(int.nonnegative()).min(1), z.array(z.array(int.nonnegative()).min(1)).length(1), z.string().min(1)], {
    error: 'expected a non-empty array of token ids (or [[ids]]), or a string',
  }),
  max_tokens: int.min(1).default(16),
  temperature: z.number().min(0).default(1),
  top_p: z.number().gt(0).max(1).default(1),
  seed: int.nullish(),
  logprobs: int.min(0).max(20).nullish(),
  stop_token_ids: z.array(int.nonnegative()).nullish(),
  allowed_token_ids: z.array(int.nonnegative()).min(1).nullish(),
  return_tokens_as_token_ids: z.boolean().nullish(),
  n: z.literal(1).nullish(),
  stream: z.literal(false).nullish(),
  echo: z.literal(false).nullish(),
  best_of: z.literal(1).nullish(),
});

const UpdateWeightsBodySchema = z.object({
  model_path: z.string().min(1),
  checkpoint: int.nonnegative().nullish(),
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
  inFlight: number;
  drained: (() => void)[];
  /** the server loaded it, so it closes it when replaced */
  owned: boolean;
}

export async function startPolicyServer(options: PolicyServerOptions): Promise<PolicyServer> {
  const host = options.host ?? '127.0.0.1';
  const modelName = options.modelName ?? 'policy';
  const tokenizer = options.tokenizer;
  const loadModel = options.loadModel ?? defaultLoadModel;
  const maxBody = options.maxBodyBytes ?? 64 * 1024 * 1024;
  const created = Math.floor(Date.now() / 1000);
  let current: Slot = { learner: options.learner, checkpoint: options.checkpoint ?? null, inFlight: 0, drained: [], owned: false };
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

  async function completions(body: unknown): Promise<unknown> {
    const parsed = CompletionBodySchema.safeParse(body);
    if (!parsed.success) throw badRequest(parsed.error, body);
    const b = parsed.data;
    if (b.model !== undefined && b.model !== modelName) throw new HttpError(404, `model: the model ${JSON.stringify(b.model)} does not exist (serving ${JSON.stringify(modelName)})`, 'model');
    let promptIds: number[];
    if (typeof b.prompt === 'string') {
      if (!tokenizer) throw new HttpError(400, 'prompt: a text prompt needs a tokenizer; send token ids', 'prompt');
      promptIds = tokenizer.encode(b.prompt);
    } else promptIds = Array.isArray(b.prompt[0]) ? (b.prompt[0] as number[]) : (b.prompt as number[]);

    const slot = acquire();
    try {
      const vocab = slot.learner.config?.vocab_size;
      if (vocab !== undefined) {
        const check = (field: string, ids: readonly number[] | null | undefined) => {
          const bad = ids?.findIndex((id) => id >= vocab) ?? -1;
          if (bad >= 0) throw new HttpError(400, `${field}.${bad}: token id ${ids![bad]} is outside the vocabulary [0, ${vocab})`, field);
        };
        check('prompt', promptIds);
        check('stop_token_ids', b.stop_token_ids);
        check('allowed_token_ids', b.allowed_token_ids);
      }
      const maxLen = slot.learner.config?.max_position_embeddings;
      if (maxLen !== undefined && promptIds.length + b.max_tokens > maxLen) {
        throw new HttpError(400, `max_tokens: prompt (${promptIds.length} tokens) + max_tokens (${b.max_tokens}) exceeds the context of ${maxLen}`, 'max_tokens');
      }
      let out: Awaited<ReturnType<ServableModel['generate']>>;
      try {
        out = await slot.learner.generate(Int32Array.from(promptIds), {
          maxNewTokens: b.max_tokens,
          temperature: b.temperature,
          topP: b.top_p,
          ...(b.seed != null ? { seed: b.seed } : {}),
          ...(b.stop_token_ids?.length ? { stopIds: b.stop_token_ids } : {}),
          ...(b.allowed_token_ids?.length ? { allowedIds: b.allowed_token_ids } : {}),
        });
      } catch (e) {
        throw new HttpError(500, `generation failed: ${(e as Error).message}`);
      }
      const ids = Array.from(out.ids);
      const logprobs = Array.from(out.logprobs);
      const asIds = b.return_tokens_as_token_ids || !tokenizer;
      const tokens = ids.map((id) => (asIds ? `token_id:${id}` : tokenizer!.decode([id])));
      const topK = b.logprobs ?? 0;
      return {
        id: `cmpl-${randomUUID()}`,
        object: 'text_completion',
        created: Math.floor(Date.now() / 1000),
        model: modelName,
        checkpoint: slot.checkpoint,
        choices: [
          {
            index: 0,
            text: tokenizer ? tokenizer.decode(ids, { skipSpecial: true }) : '',
            finish_reason: out.finishReason,
            stop_reason: null,
            token_ids: ids,
            logprobs: {
              tokens,
              token_logprobs: logprobs,
              // only the sampled token's log-prob is known to the engine
              top_logprobs: topK > 0 ? tokens.map((t, i) => ({ [t]: logprobs[i]! })) : null,
              text_offset: null,
            },
          },
        ],
        usage: { prompt_tokens: promptIds.length, completion_tokens: ids.length, total_tokens: promptIds.length + ids.length },
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
      await swap({ learner, checkpoint: checkpoint ?? null, inFlight: 0, drained: [], owned: true });
      return { success: true, message: `serving ${path}`, checkpoint: checkpoint ?? null };
    });
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    const method = req.method ?? 'GET';
    if (method === 'GET' && (path === '/health' || path === '/v1/health')) return send(res, 200, { status: 'ok', model: modelName, checkpoint: current.checkpoint });
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
    if (method === 'POST' && path === '/update_weights_from_disk') return send(res, 200, await updateWeights(await readJson(req, maxBody)));
    const known = ['/health', '/v1/models', '/v1/completions', '/update_weights_from_disk'];
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
    setLearner(learner: ServableModel, checkpoint: number | null): Promise<void> {
      return serialised(() => swap({ learner, checkpoint, inFlight: 0, drained: [], owned: false }));
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
