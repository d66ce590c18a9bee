// Weight sync (DESIGN §4, §9): making a server reload a checkpoint directory from disk, and asking it which one
// it serves. SGLang's protocol (our policy server speaks it too) and vLLM's dev-mode endpoints.
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import type { ServedModel } from '../types.ts';
import { PolicyResponseError, PolicyUnavailableError, type Requester } from './http.ts';

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

/** Reloads checkpoint `checkpoint` from `dir` into the server, by its protocol. */
export async function loadCheckpoint(request: Requester, weightSync: WeightSync, dir: string, checkpoint: number): Promise<void> {
  if (weightSync === 'vllm') return vllmLoadWeights(request, dir, checkpoint);
  const r = SglangUpdateSchema.safeParse(await request('POST', '/update_weights_from_disk', { model_path: dir, checkpoint }));
  if (r.success && !r.data.success) throw new PolicyResponseError(`POST /update_weights_from_disk: ${r.data.message ?? 'success: false'}`);
}

/** Which checkpoint (and directory, when the server says) the server serves now. */
export async function servedModelOf(request: Requester, weightSync: WeightSync): Promise<ServedModel> {
  if (weightSync === 'vllm') {
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

export async function vllmServerInfo(request: Requester): Promise<VllmServerInfo> {
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
async function vllmLoadWeights(request: Requester, dir: string, checkpoint: number): Promise<void> {
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
