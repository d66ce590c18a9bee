// The evaluation and Best@K configs (DESIGN §1 evaluationRun, §8), beside the training schema in
// lib/config.ts whose pieces (run ids, SWE environment fields, error formatting) they share.
// Pure (zod only): workflow code validates with it.
import { z } from 'zod';
import { formatIssues, RUN_ID, TrackingConfigSchema, type TrainingConfig } from '../config.ts';
import { SweEnvConfigSchema } from '../swe/env-config.ts';

const int = () => z.number().int();
const runId = () => z.string().regex(RUN_ID, 'must be an id ([A-Za-z0-9._:-], at most 200)');

/** How the agent calls tools (lib/swe/prompts.ts, lib/toolcall.ts); the evaluation report names the one used. */
export const ToolFormatSchema = z.enum(['text', 'openai', 'auto']).default('text');

/** An OpenAI-compatible server anywhere (ours, vLLM, SGLang, a hosted API). */
export const ServerModelSchema = z
  .object({
    baseUrl: z.string().url(),
    /** the `model` field of requests */
    model: z.string().min(1),
    /** `chat`: messages through the server's chat template; `completions`: token-id prompts from `tokenizer` */
    api: z.enum(['completions', 'chat']).default('chat'),
    /** a Hugging Face model directory holding tokenizer.json (+ tokenizer_config.json); needed by `completions` */
    tokenizer: z.string().min(1).optional(),
    /**
     * the R2E-Gym `<function=…>` text format (chat: stops at `</function>`), OpenAI tool calls (chat: the server's
     * template renders the tools and parses the calls; completions: ours does, `<tool_call>` JSON), or `auto`: `openai`
     * when the model's chat template (in `tokenizer`) renders tools as `<tool_call>` calls, else `text`
     */
    toolFormat: ToolFormatSchema,
    /** name of an environment variable of the rollout workers that holds the API key (never the key itself) */
    apiKeyEnv: z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name')
      .optional(),
    /**
     * the model's context window in tokens (prompt + reply of a turn), for servers whose GET /v1/models does not
     * report it (vLLM, SGLang and llama-server do); when both say, the smaller one counts
     */
    contextWindow: z
      .number()
      .int()
      .min(1)
      .max(1 << 24)
      .optional(),
  })
  .strict();
export type ServerModel = z.infer<typeof ServerModelSchema>;

/** The model under evaluation: a run's checkpoint, a Hugging Face directory, or a server anywhere. */
export const EvalModelSchema = z.union([
  z.object({ run: runId(), checkpoint: z.union([int().min(0), z.literal('latest')]).default('latest'), toolFormat: ToolFormatSchema }).strict(),
  z.object({ path: z.string().min(1), toolFormat: ToolFormatSchema }).strict(),
  ServerModelSchema,
]);
export type EvalModel = z.infer<typeof EvalModelSchema>;

/** SWE environment fields an evaluation may set (the task file, steps and grading limit have their own fields). */
const EvalEnvSchema = SweEnvConfigSchema.pick({
  backend: true,
  limits: true,
  commandTimeoutS: true,
  scratchGlobs: true,
  maxObservationChars: true,
  tokenWarningAt: true,
  gradeUnsubmitted: true,
})
  .partial()
  .strict();

const StoreSchema = z
  .object({
    url: z
      .string()
      .regex(/^file:\/\//, 'must be a file:// URL')
      .default('file://.runs/store'),
  })
  .strict()
  .prefault({});

export const EvalConfigSchema = z
  .object({
    /** evaluation id (store prefix evals/<id>/); defaults to the evaluationRun workflow id */
    evalId: runId().optional(),
    /** JSONL or parquet of SWE-bench records (lib/swe/task.ts) */
    tasksFile: z.string().min(1),
    /** only these instance ids (in this order) */
    tasks: z.array(z.string().min(1)).min(1).optional(),
    /** at most this many tasks (after `tasks`) */
    limit: int().min(1).optional(),
    model: EvalModelSchema,
    /** `model_name_or_path` of the predictions; derived from the model when absent */
    modelName: z.string().min(1).optional(),
    /** episodes per task (DeepSWE: 16) */
    runs: int().min(1).max(1000).default(1),
    seed: int().min(0).default(0),
    sampling: z
      .object({ temperature: z.number().min(0).max(5).default(1), topP: z.number().gt(0).max(1).default(1) })
      .strict()
      .prefault({}),
    /** steps per episode (DeepSWE evaluation: 100) */
    maxSteps: int().min(1).max(10_000).default(100),
    /**
     * generated tokens per episode, summed over its turns (DeepSWE evaluation: 64K; `max_context` when spent). It
     * does not bound the prompt: every turn's max_tokens is also clamped to the room left in the model's context
     * window, and an episode with no room left ends `context_exhausted` (DESIGN §9), so no request exceeds it.
     */
    contextBudget: int()
      .min(1)
      .max(1 << 22)
      .default(65_536),
    maxTokensPerTurn: int()
      .min(1)
      .max(1 << 20)
      .default(8192),
    episodeTimeoutMinutes: z
      .number()
      .gt(0)
      .max(24 * 60)
      .default(20),
    /** test-run limit of grading (DeepSWE: 5 min) */
    gradeTimeoutSeconds: int().min(1).max(7200).default(300),
    /** episodes in flight at once */
    concurrency: int().min(1).max(4096).default(16),
    /** attempts of an episode that could not happen (infrastructure) before it is reported as `error` */
    maxAttempts: int().min(1).max(100).default(3),
    heartbeatTimeoutSeconds: z.number().gt(0).max(3600).default(120),
    /** episodes per child workflow, so no history nears Temporal's event limit */
    shardSize: int().min(1).max(2000).default(500),
    env: EvalEnvSchema.prefault({}),
    store: StoreSchema,
    /** with `mlflow`, the evaluation is an MLflow run (pass@k, its config, its report files) */
    tracking: TrackingConfigSchema,
  })
  .strict()
  .superRefine((c, ctx) => {
    if ('baseUrl' in c.model && c.model.api === 'completions' && !c.model.tokenizer) {
      ctx.addIssue({ code: 'custom', path: ['model', 'tokenizer'], message: 'required with api "completions" (token-id prompts need the tokenizer directory)' });
    }
    if ('baseUrl' in c.model && c.model.api === 'chat' && c.model.toolFormat === 'auto' && !c.model.tokenizer) {
      ctx.addIssue({ code: 'custom', path: ['model', 'tokenizer'], message: 'required with toolFormat "auto" (the model directory whose chat template decides)' });
    }
    if (c.tasks && new Set(c.tasks).size !== c.tasks.length) ctx.addIssue({ code: 'custom', path: ['tasks'], message: 'lists an instance id twice' });
  });

export type EvalConfig = z.infer<typeof EvalConfigSchema>;
export type EvalConfigInput = z.input<typeof EvalConfigSchema>;

export function validateEvalConfig(input: unknown): { ok: true; config: EvalConfig } | { ok: false; errors: string[] } {
  const r = EvalConfigSchema.safeParse(input);
  if (r.success) return { ok: true, config: r.data };
  return { ok: false, errors: formatIssues(r.error, input, 'config') };
}

/** The verifier model of the execution-free verifier and of the reproduction-test generator. */
export const VerifierModelSchema = ServerModelSchema.omit({ toolFormat: true, tokenizer: true, contextWindow: true })
  .extend({ api: z.literal('chat').default('chat') })
  .strict();

export const BestOfKConfigSchema = z
  .object({
    /** the finished evaluation whose trajectories are the candidates */
    evalId: runId(),
    /** selection id (store prefix evals/<evalId>/selections/<id>/); defaults to the workflow id */
    selectionId: runId().optional(),
    /** Best@K curve up to this K (default: the evaluation's runs); selections are made among the first K runs */
    k: int().min(1).max(1000).optional(),
    /** random K-subsets per K for the curve (at least 1,000; all subsets when there are fewer) */
    subsets: int().min(1000).max(1_000_000).default(1000),
    seed: int().min(0).default(0),
    executionFree: z
      .object({
        model: VerifierModelSchema,
        /** tokens the verifier may think before its YES/NO */
        maxTokens: int()
          .min(1)
          .max(1 << 16)
          .default(1024),
        temperature: z.number().min(0).max(5).default(0),
        /** alternatives read at each position (the answer token's P(YES) and P(NO) come from these) */
        topLogprobs: int().min(2).max(20).default(20),
        /** the trajectory is condensed (longest thoughts first) until the prompt has at most this many characters */
        maxPromptChars: int().min(1000).max(10_000_000).default(120_000),
      })
      .strict()
      .optional(),
    executionBased: z
      .object({
        /** run the repository's own tests that pass at the base commit */
        regression: z.boolean().default(true),
        reproduction: z
          .object({
            model: VerifierModelSchema,
            /** generated tests per task */
            tests: int().min(1).max(50).default(3),
            maxTokens: int()
              .min(1)
              .max(1 << 16)
              .default(2048),
            temperature: z.number().min(0).max(5).default(1),
          })
          .strict()
          .optional(),
        timeoutSeconds: int().min(1).max(7200).default(300),
      })
      .strict()
      .optional(),
    concurrency: int().min(1).max(4096).default(8),
    maxAttempts: int().min(1).max(100).default(3),
    store: StoreSchema,
  })
  .strict()
  .superRefine((c, ctx) => {
    if (!c.executionFree && !c.executionBased) ctx.addIssue({ code: 'custom', path: ['executionFree'], message: 'set executionFree and/or executionBased' });
  });

export type BestOfKConfig = z.infer<typeof BestOfKConfigSchema>;
export type BestOfKConfigInput = z.input<typeof BestOfKConfigSchema>;

export function validateBestOfKConfig(input: unknown): { ok: true; config: BestOfKConfig } | { ok: false; errors: string[] } {
  const r = BestOfKConfigSchema.safeParse(input);
  if (r.success) return { ok: true, config: r.data };
  return { ok: false, errors: formatIssues(r.error, input, 'config') };
}

/** `model_name_or_path` of an evaluation's predictions. */
export function modelNameOf(c: EvalConfig): string {
  if (c.modelName) return c.modelName;
  const m = c.model;
  if ('run' in m) return `swerl/${m.run}@${m.checkpoint}`;
  if ('path' in m) return m.path;
  return m.model;
}

/** The evaluation id of a training run's validation of `checkpoint`. */
export const validationEvalId = (runId: string, checkpoint: number): string => `${runId}-eval-${checkpoint}`;

/** The evaluationRun config of a training run's validation: its checkpoint on the held-out tasks, with the run's SWE settings. */
export function validationEvalConfig(config: TrainingConfig, runId: string, checkpoint: number): EvalConfigInput {
  const v = config.eval!;
  const env = config.env.kind === 'swe' ? config.env : undefined;
  return {
    evalId: validationEvalId(runId, checkpoint),
    tasksFile: v.tasks,
    ...(v.limit ? { limit: v.limit } : {}),
    model: { run: runId, checkpoint },
    runs: v.runs,
    seed: config.seed,
    sampling: { temperature: config.episode.temperature, topP: config.episode.topP },
    maxSteps: v.maxSteps ?? env?.evalMaxSteps ?? 100,
    ...(v.contextBudget ? { contextBudget: v.contextBudget } : {}),
    maxTokensPerTurn: config.episode.maxTokensPerTurn,
    episodeTimeoutMinutes: config.episode.timeoutMinutes,
    concurrency: v.concurrency ?? config.maxInflightRollouts,
    maxAttempts: config.rollout.maxAttempts,
    heartbeatTimeoutSeconds: Math.max(30, config.rollout.heartbeatTimeoutSeconds),
    ...(env
      ? {
          gradeTimeoutSeconds: env.gradeTimeoutS,
          env: {
            backend: env.backend,
            limits: env.limits,
            commandTimeoutS: env.commandTimeoutS,
            scratchGlobs: env.scratchGlobs,
            maxObservationChars: env.maxObservationChars,
            tokenWarningAt: env.tokenWarningAt,
          },
        }
      : {}),
    store: config.store,
  };
}
