// Client of a token-in, token-out completions server (ours, vLLM, SGLang) with token-id prompts (DESIGN §4), and
// its in-process twin over a Learner. Transient failures are retried a bounded number of times, then surface as
// PolicyUnavailableError so the rollout activity fails and Temporal retries it.
import { z } from 'zod';
import type { CompletionRequest, CompletionResult, PolicyClient, ServedModel } from '../types.ts';
import { jsonRequester, parseServerResponse, PolicyClientOptionsSchema, PolicyResponseError, PolicyUnavailableError, type PolicyClientOptions } from './http.ts';
import { listedModels } from './preflight.ts';
import { loadCheckpoint, servedModelOf, vllmServerInfo, type VllmServerInfo } from './weight-sync.ts';

/** A completion request that may restrict sampling to some token ids (small action vocabularies). */
export interface ConstrainedCompletionRequest extends CompletionRequest {
  allowedIds?: number[];
}

/** times a pinned completion reloads its model before giving up (another user of the server keeps taking it) */
const PIN_ATTEMPTS = 8;

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

/** Parses the first choice of a completions response into ids + logprobs. */
export function parseCompletionResponse(body: unknown): CompletionResult {
  const choice = parseServerResponse(CompletionResponseSchema, body, 'policy server').choices[0];
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

export function createPolicyClient(options: PolicyClientOptions): PolicyClient & {
  complete(req: ConstrainedCompletionRequest): Promise<CompletionResult>;
  vllmInfo(): Promise<VllmServerInfo>;
  checkServedModel(): Promise<void>;
} {
  const o = PolicyClientOptionsSchema.parse(options);
  const request = jsonRequester(o);

  const loadWeights = (dir: string, checkpoint: number): Promise<void> => loadCheckpoint(request, o.weightSync, dir, checkpoint);

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
    vllmInfo: () => vllmServerInfo(request),

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

    servedModel: () => servedModelOf(request, o.weightSync),
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
