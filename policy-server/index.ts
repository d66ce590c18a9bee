// Our OpenAI-compatible policy server (DESIGN §4), backed by gpu-learner: token-id completions with
// per-token log-probs, as vLLM speaks them, chat completions (chat template through @huggingface/jinja,
// tools, tool calls parsed by lib/toolcall.ts, log-probs), and SGLang's `update_weights_from_disk` for weight sync. A request
// parameter we do not implement is a 400 naming it, never silently ignored.
//
// schemas.ts request bodies · http.ts errors and JSON · routes.ts routes and weight reload ·
// completions.ts the two endpoints · generation.ts the engine call · scheduler.ts how requests share a
// model (continuous batching) · stop-strings.ts · models.ts the served model and swapping it.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Tokenizer } from '../lib/tokenizer.ts';
import { policyModelLoads } from '../lib/metrics.ts';
import { sendError } from './http.ts';
import { defaultLoadModel, ServedModels, slot, type LoadModel, type ServableModel, type Slot } from './models.ts';
import { route, type RouteContext } from './routes.ts';
import { MAX_BATCH_DEFAULT, Schedulers } from './scheduler.ts';

export type { LoadModel, ServableModel } from './models.ts';
export { MODEL_CACHE_DEFAULT } from './models.ts';
export { MAX_SAMPLES, MAX_TOP_LOGPROBS } from './schemas.ts';
export { MAX_BATCH_DEFAULT } from './scheduler.ts';

export interface PolicyServerOptions {
  /** the model served first (not closed by the server); absent: the server loads `modelPath` with `loadModel` */
  learner?: ServableModel;
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
  /** models held at once, by directory (models.ts; default MODEL_CACHE_DEFAULT) */
  modelCache?: number;
  /** largest request body accepted, bytes */
  maxBodyBytes?: number;
  /** concurrent requests share decode steps (continuous batching, scheduler.ts); false: one request at a time per model (default true) */
  batching?: boolean;
  /** most sequences decoding together on one model; more wait their turn (default MAX_BATCH_DEFAULT) */
  maxBatch?: number;
}

export interface PolicyServer {
  url: string;
  port: number;
  /** stops accepting connections, waits for in-flight requests, closes learners the server loaded itself */
  close(): Promise<void>;
  /** serves `learner` (not closed by the server) from now on */
  setLearner(learner: ServableModel, checkpoint: number | null, modelPath?: string | null): Promise<void>;
  /** serves the model in `dir` from now on: the server's copy, held or loaded (`loaded`); never the caller's object */
  serveDirectory(dir: string, checkpoint: number | null): Promise<{ loaded: boolean }>;
  /** checkpoint index served now */
  readonly checkpoint: number | null;
}

export async function startPolicyServer(options: PolicyServerOptions): Promise<PolicyServer> {
  const host = options.host ?? '127.0.0.1';
  const loadModel = options.loadModel ?? defaultLoadModel;
  let first: Slot;
  if (options.learner) first = slot(options.learner, options.checkpoint ?? null, options.modelPath ?? null, false);
  else if (options.modelPath) first = slot(await loadModel(options.modelPath), options.checkpoint ?? null, options.modelPath, true);
  else throw new Error('startPolicyServer: give a learner or a modelPath to load');
  const models = new ServedModels(first, options.modelCache);
  policyModelLoads.inc({ via: 'start' });
  let closed = false;
  const ctx: RouteContext = {
    modelName: options.modelName ?? 'policy',
    ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
    models,
    schedulers: new Schedulers({ batching: options.batching ?? true, maxBatch: options.maxBatch ?? MAX_BATCH_DEFAULT }),
    loadModel,
    maxBodyBytes: options.maxBodyBytes ?? 64 * 1024 * 1024,
    created: Math.floor(Date.now() / 1000),
    closing: () => closed,
  };

  const server = createServer((req, res) => {
    route(ctx, req, res).catch((e: unknown) => sendError(res, e));
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
      return models.current.checkpoint;
    },
    setLearner(learner: ServableModel, checkpoint: number | null, modelPath: string | null = null): Promise<void> {
      policyModelLoads.inc({ via: 'learner' });
      return models.serialised(() => models.swapIn(slot(learner, checkpoint, modelPath, false)));
    },
    async serveDirectory(dir: string, checkpoint: number | null): Promise<{ loaded: boolean }> {
      const r = await models.serveDirectory(dir, checkpoint, loadModel, () => closed);
      if (r.loaded) policyModelLoads.inc({ via: 'learner' });
      return r;
    },
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      const stopped = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections();
      await models.settle();
      server.closeIdleConnections();
      const force = setTimeout(() => server.closeAllConnections(), 1_000);
      await stopped;
      clearTimeout(force);
      models.closeOwned();
    },
  };
}
