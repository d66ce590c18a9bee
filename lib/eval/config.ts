// The evaluation and Best@K configs (DESIGN §1 evaluationRun, §8), beside the training schema in
// lib/config.ts whose pieces (run ids, SWE environment fields, error formatting) they share.
// Pure (zod only): workflow code validates with it.
import { z } from 'zod';
import {
  formatIssues,
  maxTokensPerTurnField,
  renamedTo,
  RUN_ID,
  StoreSchema,
  TrackingConfigSchema,
  TRAINING_RENAMED,
  withRenamedFields,
  type RenamedField,
  type TrainingConfig,
} from '../config.ts';
import { EditConfigSchema, editSettingsError, modeRewardError, SweEnvConfigSchema } from '../swe/env-config.ts';

const int = () => z.number().int();
const runId = () => z.string().regex(RUN_ID, 'must be an id ([A-Za-z0-9._:-], at most 200)');

/** How the agent calls tools (lib/swe/prompts.ts, lib/toolcall.ts); the evaluation report names the one used. */
export const ToolFormatSchema = z
  .enum(['text', 'openai', 'auto'])
  .default('text')
  .describe(
    'the R2E-Gym `<function=…>` text format (chat: stops at `</function>`), OpenAI tool calls (chat: the server\'s template renders the tools and parses the calls; completions: ours does, `<tool_call>` JSON), or "auto": "openai" when the model\'s chat template renders tools as `<tool_call>` calls, else "text"',
  );

/** An OpenAI-compatible server anywhere (ours, vLLM, SGLang, a hosted API). */
export const ServerModelSchema = z
  .object({
    baseUrl: z.string().url().describe("the server's root or its /v1, as OpenAI clients write it"),
    model: z.string().min(1).describe('the `model` field of requests'),
    api: z.enum(['completions', 'chat']).default('chat').describe('"chat": messages through the server\'s chat template; "completions": token-id prompts from `tokenizer`'),
    tokenizer: z.string().min(1).optional().describe('a Hugging Face model directory holding tokenizer.json (+ tokenizer_config.json); needed by "completions"'),
    toolFormat: ToolFormatSchema,
    apiKeyEnv: z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name')
      .optional()
      .describe('name of an environment variable of the rollout workers that holds the API key (never the key itself)'),
    contextWindow: z
      .number()
      .int()
      .min(1)
      .max(1 << 24)
      .optional()
      .describe(
        "the model's context window in tokens (prompt + reply of a turn), for servers whose GET /v1/models does not report it (vLLM, SGLang and llama-server do); when both say, the smaller one counts",
      ),
  })
  .strict();
export type ServerModel = z.infer<typeof ServerModelSchema>;

/** The model under evaluation: a run's checkpoint, a Hugging Face directory, or a server anywhere. */
export const EvalModelSchema = z
  .union([
    z
      .object({
        run: runId().describe("a training run of the same store: its checkpoint, served by the learner worker's policy server"),
        checkpoint: z
          .union([int().min(0), z.literal('latest')])
          .default('latest')
          .describe('the checkpoint index, or the newest'),
        toolFormat: ToolFormatSchema,
      })
      .strict(),
    z.object({ path: z.string().min(1).describe('a Hugging Face model directory, served by the learner worker'), toolFormat: ToolFormatSchema }).strict(),
    ServerModelSchema,
  ])
  .describe('the model under evaluation');
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
  grade: true,
})
  .partial()
  .strict();

export const EvalConfigSchema = z
  .object({
    evalId: runId().optional().describe('evaluation id: the store prefix evals/<id>/; default: the evaluationRun workflow id'),
    tasksFile: z.string().min(1).describe('JSONL or parquet of SWE-bench records (lib/swe/task.ts)'),
    tasks: z.array(z.string().min(1)).min(1).optional().describe('only these instance ids (in this order)'),
    limit: int().min(1).optional().describe('at most this many tasks (after `tasks`)'),
    model: EvalModelSchema,
    mode: z
      .enum(['agent', 'edit'])
      .default('agent')
      .describe('"agent": the multi-turn tool loop; "edit": one reply of edits to the oracle files (docs/edit-mode.md), as training\'s env.mode'),
    reward: z
      .enum(['tests', 'similarity', 'hybrid'])
      .default('tests')
      .describe('what metrics.meanReward averages (edit mode; agent mode is graded by tests); pass@1 is by tests either way'),
    edit: EditConfigSchema.prefault({}).describe("edit mode's format, context budget and scoring, as training's env.edit"),
    quality: z
      .object({
        minStrength: z.number().min(0).max(1).optional().describe('the least test strength of a strong task (default 0.8)'),
        file: z.string().min(1).optional().describe("a `swerl validate-tasks --quality-out` file; default: the records' own `quality`"),
      })
      .strict()
      .optional()
      .describe('which tasks count as strong, for pass@1 on strong tasks reported beside pass@1 on all'),
    modelName: z.string().min(1).optional().describe('`model_name_or_path` of the predictions; derived from the model when absent'),
    runs: int().min(1).max(1000).default(1).describe('episodes per task: n of pass@k (DeepSWE: 16)'),
    seed: int().min(0).default(0).describe("the evaluation's seed: each (task, run) episode's sampling seed derives from it"),
    sampling: z
      .object({
        temperature: z.number().min(0).max(5).default(1).describe('sampling temperature (0: greedy)'),
        topP: z.number().gt(0).max(1).default(1).describe('nucleus sampling'),
      })
      .strict()
      .prefault({}),
    maxSteps: int().min(1).max(10_000).default(100).describe('steps per episode (DeepSWE evaluation: 100)'),
    responseBudget: int()
      .min(1)
      .max(1 << 22)
      .default(65_536)
      .describe(
        "generated tokens per episode, summed over its turns (max_context when spent); twice training's episode.responseBudget default on purpose: DeepSWE trains at 32K and evaluates at 64K. Each turn is also clamped to the room left in the model's context window (docs/design.md §9)",
      ),
    contextBudget: renamedTo('responseBudget'),
    maxTokensPerTurn: maxTokensPerTurnField(),
    episodeTimeoutMinutes: z
      .number()
      .gt(0)
      .max(24 * 60)
      .default(20)
      .describe('wall-clock limit of an episode (DeepSWE: 20 min)'),
    gradeTimeoutSeconds: int().min(1).max(7200).default(300).describe('test-run limit of grading (DeepSWE: 5 min)'),
    concurrency: int().min(1).max(4096).default(16).describe('episodes in flight at once'),
    maxAttempts: int().min(1).max(100).default(3).describe('attempts of an episode that could not happen (infrastructure) before it is reported as `error`'),
    heartbeatTimeoutSeconds: z.number().gt(0).max(3600).default(120).describe('an episode whose worker is silent this long is retried'),
    shardSize: int().min(1).max(2000).default(500).describe("episodes per child workflow, so no history nears Temporal's event limit"),
    env: EvalEnvSchema.prefault({}).describe('the SWE environment fields an evaluation may set (their meaning: the training config\'s env with kind "swe")'),
    store: StoreSchema,
    tracking: TrackingConfigSchema.describe('with `mlflow`, the evaluation is an MLflow run (pass@k, its config, its report files)'),
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
    const modeReward = modeRewardError(c);
    if (modeReward) ctx.addIssue({ code: 'custom', path: ['reward'], message: modeReward });
    const edit = editSettingsError(c.edit);
    if (edit) ctx.addIssue({ code: 'custom', path: ['edit', 'lineNumbers'], message: edit });
    if (c.mode === 'agent' && c.reward !== 'tests') ctx.addIssue({ code: 'custom', path: ['reward'], message: 'agent mode is graded by tests: "tests"' });
  });

export type EvalConfig = z.infer<typeof EvalConfigSchema>;
export type EvalConfigInput = z.input<typeof EvalConfigSchema>;

/** The evaluation config's renamed fields (lib/config.ts's withRenamedFields). */
export const EVAL_RENAMED: readonly RenamedField[] = [{ at: [], from: 'contextBudget', to: 'responseBudget' }];

/** `recorded`: a config written before a field was renamed (stored, or a workflow's input) is read under the new names. */
export function validateEvalConfig(raw: unknown, opts: { recorded?: boolean } = {}): { ok: true; config: EvalConfig } | { ok: false; errors: string[] } {
  const input = opts.recorded ? withRenamedFields(raw, EVAL_RENAMED) : raw;
  const r = EvalConfigSchema.safeParse(input);
  if (r.success) return { ok: true, config: r.data };
  return { ok: false, errors: formatIssues(r.error, input, 'config') };
}

/** The verifier model of the execution-free verifier and of the reproduction-test generator. */
export const VerifierModelSchema = ServerModelSchema.omit({ toolFormat: true, tokenizer: true, contextWindow: true })
  .extend({ api: z.literal('chat').default('chat').describe('verifiers speak the chat API') })
  .strict();

export const BestOfKConfigSchema = z
  .object({
    evalId: runId().describe('the finished evaluation whose trajectories are the candidates'),
    selectionId: runId().optional().describe('selection id: the store prefix evals/<evalId>/selections/<id>/; default: the workflow id'),
    k: int().min(1).max(1000).optional().describe("Best@K curve up to this K (default: the evaluation's runs); selections are made among the first K runs"),
    subsets: int().min(1000).max(1_000_000).default(1000).describe('random K-subsets per K for the curve (at least 1,000; all subsets when there are fewer)'),
    seed: int().min(0).default(0).describe('seed of the subsets and of the deterministic tie-breaks'),
    executionFree: z
      .object({
        model: VerifierModelSchema.describe('the verifier: any OpenAI-compatible chat server'),
        maxTokens: int()
          .min(1)
          .max(1 << 16)
          .default(1024)
          .describe('tokens the verifier may think before its YES/NO'),
        temperature: z.number().min(0).max(5).default(0).describe("the verifier's sampling temperature"),
        topLogprobs: int().min(2).max(20).default(20).describe("alternatives read at each position (the answer token's P(YES) and P(NO) come from these)"),
        maxPromptChars: int()
          .min(1000)
          .max(10_000_000)
          .default(120_000)
          .describe('the trajectory is condensed (longest thoughts first) until the prompt has at most this many characters'),
      })
      .strict()
      .optional()
      .describe('the execution-free verifier: score = P(YES)/(P(YES)+P(NO)) of its judgement (docs/design.md §8)'),
    executionBased: z
      .object({
        regression: z.boolean().default(true).describe("run the repository's own tests that pass at the base commit, with each candidate"),
        reproduction: z
          .object({
            model: VerifierModelSchema.describe('the model that writes issue-reproducing tests'),
            tests: int().min(1).max(50).default(3).describe('generated tests per task'),
            maxTokens: int()
              .min(1)
              .max(1 << 16)
              .default(2048)
              .describe('tokens per generated test'),
            temperature: z.number().min(0).max(5).default(1).describe('sampling temperature of the test writer'),
          })
          .strict()
          .optional()
          .describe('generated reproduction tests, run against every candidate'),
        timeoutSeconds: int().min(1).max(7200).default(300).describe('limit of one verifier test run, seconds'),
      })
      .strict()
      .optional()
      .describe('the execution-based verifiers (docs/design.md §8)'),
    concurrency: int().min(1).max(4096).default(8).describe('verifier activities in flight at once'),
    maxAttempts: int().min(1).max(100).default(3).describe('attempts of a verifier activity that could not happen (infrastructure)'),
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
  // a run started before eval.contextBudget was renamed carries the old name in its workflow input
  const v = (withRenamedFields(config, TRAINING_RENAMED) as TrainingConfig).eval!;
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
    ...(env ? { mode: env.mode, reward: env.mode === 'edit' ? env.reward : 'tests', edit: env.edit } : {}),
    ...(v.responseBudget ? { responseBudget: v.responseBudget } : {}),
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
            grade: env.grade,
          },
        }
      : {}),
    store: config.store,
  };
}
