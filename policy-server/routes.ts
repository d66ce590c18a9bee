// The server's routes: OpenAI's completions and models, health, and SGLang's model info and weight reload.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { policyModelLoads } from '../lib/metrics.ts';
import { chatCompletions, completions, type CompletionContext } from './completions.ts';
import { badRequest, HttpError, readJson, send, whileClientWaits } from './http.ts';
import { ServerClosingError, type LoadModel } from './models.ts';
import { UpdateWeightsBodySchema } from './schemas.ts';

export interface RouteContext extends CompletionContext {
  loadModel: LoadModel;
  maxBodyBytes: number;
  /** server start, seconds since the epoch (GET /v1/models) */
  created: number;
  closing(): boolean;
}

const KNOWN = ['/health', '/get_model_info', '/v1/models', '/v1/completions', '/v1/chat/completions', '/update_weights_from_disk'];

export async function route(ctx: RouteContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  const method = req.method ?? 'GET';
  const served = ctx.models.current;
  if (method === 'GET' && (path === '/health' || path === '/v1/health')) return send(res, 200, { status: 'ok', model: ctx.modelName, checkpoint: served.checkpoint });
  // SGLang's route: model_path is the directory served now, which tells the checkpoints of two runs apart
  if (method === 'GET' && path === '/get_model_info') {
    return send(res, 200, { model_path: served.path, tokenizer_path: served.path, is_generation: true, model: ctx.modelName, checkpoint: served.checkpoint });
  }
  if (method === 'GET' && path === '/v1/models') {
    return send(res, 200, {
      object: 'list',
      data: [
        {
          id: ctx.modelName,
          object: 'model',
          created: ctx.created,
          owned_by: 'swerl',
          checkpoint: served.checkpoint,
          max_model_len: served.learner.config?.max_position_embeddings ?? null,
        },
      ],
    });
  }
  if (method === 'POST' && path === '/v1/completions') return send(res, 200, await completions(ctx, await readJson(req, ctx.maxBodyBytes), whileClientWaits(res)));
  if (method === 'POST' && path === '/v1/chat/completions') return send(res, 200, await chatCompletions(ctx, await readJson(req, ctx.maxBodyBytes), whileClientWaits(res)));
  if (method === 'POST' && path === '/update_weights_from_disk') return send(res, 200, await updateWeights(ctx, await readJson(req, ctx.maxBodyBytes)));
  if (KNOWN.includes(path)) throw new HttpError(405, `method ${method} not allowed on ${path}`);
  throw new HttpError(404, `no route ${method} ${path}`);
}

/**
 * POST /update_weights_from_disk: serves the directory from now on, the copy held (no load) or a new one loaded
 * (requests still running on the previous model finish on it).
 */
async function updateWeights(ctx: RouteContext, body: unknown): Promise<unknown> {
  const parsed = UpdateWeightsBodySchema.safeParse(body);
  if (!parsed.success) throw badRequest(parsed.error, body);
  const { model_path: path, checkpoint } = parsed.data;
  let loaded: boolean;
  try {
    ({ loaded } = await ctx.models.serveDirectory(path, checkpoint ?? null, loadOrBadRequest(ctx.loadModel), ctx.closing));
  } catch (e) {
    if (e instanceof ServerClosingError) throw new HttpError(503, e.message);
    throw e;
  }
  if (loaded) policyModelLoads.inc({ via: 'update_weights_from_disk' });
  return { success: true, message: `serving ${path}`, checkpoint: checkpoint ?? null, loaded };
}

/** A directory that does not load is the request's fault (400 naming model_path). */
function loadOrBadRequest(load: LoadModel): LoadModel {
  return async (path) => {
    try {
      return await load(path);
    } catch (e) {
      throw new HttpError(400, `model_path: ${JSON.stringify(path)} does not load: ${(e as Error).message}`, 'model_path');
    }
  };
}
