// The one config schema for a training run (DESIGN §1, §5). Defaults are DeepSWE's published settings.
// Pure and deterministic: imported by workflow code as well as by activities and the CLI.
import { z } from 'zod';
import { FrozenLakeConfigSchema } from './envs/frozenlake.ts';
import { editSettingsError, modeRewardError, SweEnvConfigSchema as SweFieldsSchema } from './swe/env-config.ts';

const int = () => z.number().int();

/** A field that was renamed: setting it fails validation with the new name (configs written before the rename). */
export const renamedTo = (name: string) =>
  z
    .never({ error: `renamed: use ${name}` })
    .optional()
    .describe(`renamed: use \`${name}\``);

/** max_tokens of one turn, one default for training and evaluation (docs/config.md says why 8,192). */
export const maxTokensPerTurnField = () =>
  int()
    .min(1)
    .max(1 << 20)
    .default(8192)
    .describe(
      "max_tokens of one turn, also clamped to the budget left and to the room left in the model's context window (docs/design.md §9); the same default in training and evaluation: a reasoning model's turn (thinking, then its tool call) often runs past 4K tokens, and a turn cut there loses its call",
    );

/** A renamed field of configs recorded before the rename: `at` the object holding it (a path), `from` → `to`. */
export interface RenamedField {
  at: readonly string[];
  from: string;
  to: string;
}

/**
 * A recorded config (a stored config, a workflow input in a history) with renamed fields under their new name, so a
 * run or evaluation started before a rename goes on as it was; a config a user gives is validated as it is.
 */
export function withRenamedFields(raw: unknown, renamed: readonly RenamedField[]): unknown {
  const isObj = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
  let out = raw;
  for (const r of renamed) {
    const parents: Record<string, unknown>[] = [];
    let node: unknown = out;
    for (const k of r.at) {
      if (!isObj(node)) break;
      parents.push(node);
      node = node[k];
    }
    if (!isObj(node) || parents.length !== r.at.length || !(r.from in node)) continue;
    const { [r.from]: value, ...rest } = node;
    let copy: Record<string, unknown> = r.to in rest ? rest : { ...rest, [r.to]: value };
    for (let i = r.at.length - 1; i >= 0; i--) copy = { ...parents[i], [r.at[i]!]: copy };
    out = copy;
  }
  return out;
}

/** The training config's renamed fields (see withRenamedFields). */
export const TRAINING_RENAMED: readonly RenamedField[] = [{ at: ['eval'], from: 'contextBudget', to: 'responseBudget' }];

/**
 * Fan-out bounds (DESIGN §1, docs/limits.md). Temporal allows 2,000 pending activities per workflow and
 * warns at 10,240 history events (a rollout costs its 3 activity events plus its share of the workflow tasks
 * that take its completion; measured in docs/benchmarks.md): one workflow schedules at most
 * ROLLOUTS_PER_WORKFLOW_MAX rollouts; a larger batch fans out through child workflows of whole tasks.
 */
export const ROLLOUTS_PER_WORKFLOW_DEFAULT = 1000;
export const ROLLOUTS_PER_WORKFLOW_MAX = 1900;
/** child workflows of one iteration (each costs the parent about 6 history events plus progress signals) */
export const ROLLOUT_CHILD_WORKFLOWS_MAX = 200;

/** Tasks per rollout child workflow: whole groups, so advantages are computed where the rollouts ran. */
export function tasksPerChildWorkflow(rolloutsPerWorkflow: number, samples: number): number {
  return Math.max(1, Math.floor(rolloutsPerWorkflow / samples));
}

/** FrozenLake (lib/envs/frozenlake.ts owns its fields) plus the discriminator. */
export const FrozenLakeEnvConfigSchema = FrozenLakeConfigSchema.extend({ kind: z.literal('frozenlake').describe('FrozenLake maps (lib/envs/frozenlake.ts)') }).strict();

/** SWE tasks (lib/swe/env-config.ts owns its fields) plus the discriminator. */
export const SweEnvConfigSchema = SweFieldsSchema.extend({ kind: z.literal('swe').describe('SWE tasks in sandboxes (lib/swe/env-config.ts)') }).strict();

export const EnvConfigSchema = z.discriminatedUnion('kind', [FrozenLakeEnvConfigSchema, SweEnvConfigSchema]);

/** Run ids are store path segments and workflow ids; ':' allows a Schedule's `<id>-<RFC 3339 time>` workflow ids. */
export const RUN_ID = /^[A-Za-z0-9._:-]{1,200}$/;
const runIdSchema = () => z.string().regex(RUN_ID, 'must be a run id ([A-Za-z0-9._:-], at most 200)');

export const ModelSourceSchema = z
  .union([
    z
      .object({
        preset: z
          .enum(['tiny', 'frozenlake', 'frozenlake32', 'frozenlake32-tied', 'frozenlake-rows'])
          .describe(
            "a random Qwen3-shaped model of lib/presets.ts (frozenlake32*: head_dim 32, which vLLM serves on a CPU; frozenlake-rows: a map row per token and RoPE θ 10, the demo's)",
          ),
        seed: int().min(0).default(0).describe('seed of the random weights'),
      })
      .strict(),
    z.object({ path: z.string().min(1).describe('a Hugging Face model directory (config.json, safetensors, tokenizer.json)') }).strict(),
    z
      .object({
        fromRun: runIdSchema().describe(
          'start from the newest complete checkpoint of this earlier run in the same store (retraining); "latest": the newest earlier run of the same Schedule',
        ),
        initialRun: runIdSchema().optional().describe('with fromRun "latest": the run to start from when the Schedule has none yet'),
      })
      .strict(),
  ])
  .describe('the policy at checkpoint 0');
export type ModelSource = z.infer<typeof ModelSourceSchema>;

/**
 * The FSDP engine (`learner.engine: "fsdp"`, gpu-learner/fsdp/): a torchrun process group the learner worker
 * starts and keeps; defaults fit one node. DeepSWE's job: nprocPerNode 8, nnodes 8, cpuOffload true.
 */
export const FsdpConfigSchema = z
  .object({
    nprocPerNode: int().min(1).max(64).default(1).describe("processes (devices) per node; at most the node's GPUs (cuda) or CPU cores (cpu)"),
    nnodes: int().min(1).max(1024).default(1).describe('nodes of the process group (DeepSWE: 8)'),
    rdzvEndpoint: z
      .string()
      .regex(/^[^\s:]+:\d+$/, 'must be HOST:PORT')
      .optional()
      .describe("HOST:PORT of torchrun's c10d rendezvous, on the learner worker's node; required when nnodes > 1"),
    controlHost: z.string().min(1).default('127.0.0.1').describe("the address other nodes' rank 0 reaches the learner worker's control socket on"),
    paramDtype: z
      .enum(['auto', 'bfloat16', 'float32'])
      .default('auto')
      .describe('compute dtype of gathered parameters ("auto": bfloat16 on cuda, float32 on cpu); master weights and AdamW state stay fp32'),
    reduceDtype: z.enum(['float32', 'bfloat16']).default('float32').describe('dtype of the gradient reduce-scatter'),
    cpuOffload: z.boolean().default(false).describe('sharded parameters, gradients and AdamW state in host memory (FSDP2 CPUOffloadPolicy)'),
    activationCheckpointing: z.boolean().default(true).describe('recompute each decoder block in the backward pass instead of keeping its activations'),
    maxTokensPerMicroBatch: int()
      .min(1)
      .max(1 << 22)
      .default(32768)
      .describe('tokens per micro-batch and device (whole sequences; a longer sequence is refused); DeepSWE: 32K'),
    attnImplementation: z.string().min(1).default('sdpa').describe('transformers attention ("sdpa"; "flash_attention_2" on GPUs with flash-attn installed)'),
    checkpointShardMB: z
      .number()
      .gt(0)
      .max(1 << 20)
      .default(4096)
      .describe('largest safetensors file of a checkpoint, MB'),
    stallTimeoutSeconds: z
      .number()
      .gt(0)
      .max(24 * 3600)
      .default(600)
      .describe('no progress from the group for this long while it works: it is killed and the step retried'),
    collectiveTimeoutSeconds: z
      .number()
      .gt(0)
      .max(24 * 3600)
      .default(600)
      .describe('torch.distributed timeout of one collective (a dead peer is noticed by then at the latest)'),
  })
  .strict();
export type FsdpConfig = z.infer<typeof FsdpConfigSchema>;

/** The importance-weight cap of decoupled PPO when the config gives none (the usual TIS cap; AReaL's behaviour-weight cap plays this part). */
export const DECOUPLED_CAP_DEFAULT = 2;

/** `learner.correction` (DESIGN §9, §10): the per-token weight folded into the loss mask (lib/grpo.ts correctedMask). */
export const CorrectionSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('none').describe('no correction: every token weighs 1') }).strict(),
  z.object({ kind: z.literal('tis').describe('truncated importance sampling: weight min(ρ, cap)'), cap: z.number().min(1).max(1e6).describe('C of min(ρ, C)') }).strict(),
  z
    .object({
      kind: z.literal('mis').describe('masked importance sampling: tokens with ρ outside [1/cap, cap] dropped'),
      cap: z.number().min(1).max(1e6).describe('C of [1/C, C]'),
    })
    .strict(),
  z
    .object({
      kind: z.literal('decoupled').describe('decoupled PPO (asynchronous runs): weight min(π_prox/π_behaviour, cap), the clip around π_prox'),
      cap: z.number().min(1).max(1e6).default(DECOUPLED_CAP_DEFAULT).describe('C of the behaviour weight'),
    })
    .strict(),
]);
export type CorrectionConfig = z.infer<typeof CorrectionSchema>;

/** The largest staleness bound a pump takes (each version in use is a model the policy server holds). */
export const MAX_STALENESS = 16;

/**
 * Asynchronous RL (DESIGN §10, README "Asynchronous training"). "off" (or absent): the synchronous loop.
 * "one-step": iteration n+1's rollouts run on checkpoint n while learner step n trains.
 * "pump": up to maxInflightRollouts rollouts in flight continuously, in groups (one task's samples) admitted
 * under AReaL's rule (lib/pump.ts), no trained token more than maxStaleness versions old; order "admission"
 * samples batch n exactly from checkpoint n − maxStaleness (bit-for-bit), "streaming" switches weights
 * between the turns of an episode.
 */
export const AsyncConfigSchema = z.discriminatedUnion('mode', [
  z.object({ mode: z.literal('off').describe('the synchronous loop') }).strict(),
  z.object({ mode: z.literal('one-step').describe("iteration n+1's rollouts run on checkpoint n while learner step n trains") }).strict(),
  z
    .object({
      mode: z.literal('pump').describe("up to maxInflightRollouts rollouts in flight continuously, in groups admitted under AReaL's rule (lib/pump.ts)"),
      maxStaleness: int().min(0).max(MAX_STALENESS).describe('η: no trained token was sampled more than η checkpoints before the one it trains'),
      order: z
        .enum(['admission', 'streaming'])
        .default('admission')
        .describe('"admission": batch n sampled exactly from checkpoint n − η (deterministic); "streaming": episodes move to newer checkpoints between turns'),
    })
    .strict(),
]);
export type AsyncConfig = z.infer<typeof AsyncConfigSchema>;
export type AsyncMode = AsyncConfig['mode'];

/** Hyperparameters that `updateHyperparameters` may change while a run goes on. */
export const HyperparametersSchema = z.object({
  lr: z.number().gt(0).max(1),
  weightDecay: z.number().min(0).max(1),
  clipLow: z.number().min(0).max(1),
  clipHigh: z.number().min(0).max(10),
  maxGradNorm: z.number().gt(0).max(1e6),
  temperature: z.number().gt(0).max(5),
  topP: z.number().gt(0).max(1),
  maxInflightRollouts: int().min(1).max(4096),
});
export type Hyperparameters = z.infer<typeof HyperparametersSchema>;
export const HyperparametersUpdateSchema = HyperparametersSchema.partial().strict();
export type HyperparametersUpdate = z.infer<typeof HyperparametersUpdateSchema>;

/** The artifact store of a training run and of an evaluation (one schema for both). */
export const StoreSchema = z
  .object({
    url: z
      .string()
      .regex(/^file:\/\//, 'must be a file:// URL')
      .default('file://.runs/store')
      .describe("the artifact store (lib/store.ts); a relative path resolves against each worker's working directory"),
  })
  .strict()
  .prefault({});

/** Experiment tracking of training runs and evaluations (docs/monitoring.md). */
export const TrackingConfigSchema = z
  .object({
    mlflow: z
      .object({
        uri: z
          .string()
          .url()
          .regex(/^https?:\/\//, 'must be an http(s):// URL')
          .describe('the tracking server, e.g. http://mlflow.internal:5000'),
        experiment: z.string().min(1).max(500).default('swerl').describe('MLflow experiment (created when missing)'),
      })
      .strict()
      .optional()
      .describe('an MLflow tracking server: the run or evaluation becomes an MLflow run (docs/monitoring.md)'),
  })
  .strict()
  .prefault({});
export type TrackingConfig = z.infer<typeof TrackingConfigSchema>;

/** What a training run does about the grader's integrity verdicts (lib/swe/integrity.ts). */
export const IntegrityConfigSchema = z
  .object({
    pauseAbove: z
      .number()
      .min(0)
      .max(1)
      .optional()
      .describe("the run pauses itself (the pause signal's state, resumed by `resume`) after an iteration whose hack rate is above this fraction; absent: never"),
    keepPerIteration: int()
      .min(0)
      .max(1000)
      .default(4)
      .describe("flagged trajectories kept whole for review per iteration (runs/<run>/integrity/iter-<n>/), with the grading's whole test log"),
  })
  .strict();
export type IntegrityConfig = z.infer<typeof IntegrityConfigSchema>;
/** flagged trajectories kept whole per iteration when the config does not say */
export const KEEP_FLAGGED_PER_ITERATION = 4;

export const TrainingConfigSchema = z
  .object({
    runId: runIdSchema().optional().describe('run id: the trainingRun workflow id and the store prefix runs/<runId>/; default: the workflow id'),
    seed: int().min(0).default(0).describe("the run's seed: task order, maps and sampling seeds derive from it (lib/seed.ts)"),
    iterations: int().min(1).max(1_000_000).default(100).describe('learner steps of the run (one batch each)'),
    batch: z
      .object({
        tasks: int().min(1).max(512).default(64).describe('tasks per batch (DeepSWE: 64)'),
        samples: int().min(1).max(64).default(8).describe('episodes per task, the group of the leave-one-out advantage (DeepSWE: 8)'),
      })
      .strict()
      .prefault({}),
    maxInflightRollouts: int().min(1).max(4096).default(512).describe("rollouts in flight at once over a whole iteration (a pump's capacity); updateHyperparameters may change it"),
    rolloutsPerWorkflow: int()
      .min(1)
      .max(ROLLOUTS_PER_WORKFLOW_MAX)
      .default(ROLLOUTS_PER_WORKFLOW_DEFAULT)
      .describe('the most rollouts one workflow schedules; larger batches fan out through child workflows of whole tasks (docs/limits.md)'),
    rollout: z
      .object({
        startToCloseMinutes: z
          .number()
          .gt(0)
          .max(24 * 60)
          .default(20)
          .describe('one attempt of a rollout activity may run this long (DeepSWE: 20 min)'),
        heartbeatSeconds: z.number().gt(0).max(600).default(30).describe('a rollout heartbeats every half of this, at least every second'),
        heartbeatTimeoutSeconds: z
          .number()
          .gt(0)
          .max(3600)
          .default(60)
          .describe('a rollout whose worker is silent this long is retried; more than heartbeatSeconds (docs/limits.md sizes it)'),
        maxAttempts: int().min(1).max(100).default(5).describe('attempts of a rollout that fails for infrastructure reasons; then it is a rollout error, left out of training'),
      })
      .strict()
      .prefault({}),
    episode: z
      .object({
        maxSteps: int().min(1).max(1000).default(50).describe(`agent turns per episode where the environment sets none (FrozenLake and SWE set env.maxSteps)`),
        responseBudget: int()
          .min(1)
          .max(1 << 20)
          .default(32768)
          .describe(
            'generated tokens per episode summed over its turns; the episode ends max_context when it is spent (DeepSWE trains at 32,768; its evaluation, eval.responseBudget, at 65,536)',
          ),
        maxTokensPerTurn: maxTokensPerTurnField(),
        temperature: z.number().gt(0).max(5).default(1).describe('sampling temperature; updateHyperparameters may change it'),
        topP: z.number().gt(0).max(1).default(1).describe('nucleus sampling; updateHyperparameters may change it'),
        timeoutMinutes: z
          .number()
          .gt(0)
          .max(24 * 60)
          .default(20)
          .describe('wall-clock limit of an episode; it ends timeout (DeepSWE: 20 min)'),
      })
      .strict()
      .prefault({}),
    algorithm: z
      .object({
        advantage: z.enum(['loo', 'grpo']).default('loo').describe('"loo": r_i minus the mean of the other samples\' rewards (GRPO++); "grpo": (r − mean)/std (docs/design.md §5)'),
        loss: z
          .enum(['grpo++', 'grpo'])
          .default('grpo++')
          .describe('"grpo++": clip-high, no KL, Σ/(N·lMax) normalisation; "grpo": symmetric clip, per-sequence mean (docs/design.md §5)'),
        lr: z.number().gt(0).max(1).default(1e-6).describe('AdamW learning rate, constant (DeepSWE: 1e-6); updateHyperparameters may change it'),
        weightDecay: z.number().min(0).max(1).default(0.01).describe('AdamW decoupled weight decay'),
        beta1: z.number().min(0).lt(1).default(0.9).describe('AdamW β1'),
        beta2: z.number().min(0).lt(1).default(0.999).describe('AdamW β2'),
        eps: z.number().gt(0).max(1).default(1e-8).describe('AdamW ε'),
        clipLow: z.number().min(0).max(1).default(0.2).describe('ε_low: the ratio is clipped below at 1 − ε_low'),
        clipHigh: z.number().min(0).max(10).default(0.28).describe('ε_high: the ratio is clipped above at 1 + ε_high (clip-high)'),
        maxGradNorm: z.number().gt(0).max(1e6).default(1.0).describe('global gradient-norm clip; a step whose norm is not finite is skipped'),
        lMax: int()
          .min(1)
          .max(1 << 22)
          .default(32768)
          .describe('L_max of the GRPO++ normalisation Σ m·ℓ / (N·L_max), a constant: the longest response (DeepSWE: 32,768)'),
        microBatchTokens: int()
          .min(1)
          .optional()
          .describe('native engine: gradient accumulation over micro-batches of whole sequences of at most this many tokens (default 4,096)'),
      })
      .strict()
      .prefault({}),
    model: ModelSourceSchema.prefault({ preset: 'tiny' }),
    policy: z
      .object({
        baseUrl: z.string().url().optional().describe("an external OpenAI-compatible server (vLLM, SGLang, another learner worker's); default: the learner worker's own"),
        model: z.string().min(1).default('policy').describe('the model name of requests; one the server lists (vLLM: --served-model-name)'),
        weightSync: z
          .enum(['sglang', 'vllm'])
          .default('sglang')
          .describe(
            'how the server reloads each checkpoint from disk: "sglang" (POST /update_weights_from_disk; ours too) or "vllm" (dev mode: /pause, /collective_rpc reload_weights, /update_weight_version, /resume; docs/scale-out.md); every sync is verified by a probe (docs/design.md §9)',
          ),
        contextWindow: int()
          .min(1)
          .max(1 << 24)
          .optional()
          .describe(
            "the served model's context window in tokens, for an external server whose GET /v1/models does not report it (when both say, the smaller counts); ours is the checkpoint's max_position_embeddings",
          ),
        requestTimeoutSeconds: int()
          .min(1)
          .max(86_400)
          .default(120)
          .describe('limit of one completion request of a rollout, seconds (each of its retries too); raise it for a real model sampling long replies on a few CPU cores'),
      })
      .strict()
      .prefault({}),
    store: StoreSchema,
    env: EnvConfigSchema.prefault({ kind: 'frozenlake' }).describe('the environment, by kind'),
    tracking: TrackingConfigSchema.describe('experiment tracking: with `mlflow`, every training run is an MLflow run (metrics, params, plots)'),
    integrity: IntegrityConfigSchema.optional().describe('the hack-rate watch (docs/integrity.md): what the run does about episodes the grader caught hacking'),
    continueAsNewEvery: int().min(1).max(1_000_000).default(100).describe('trainingRun continues-as-new after this many iterations, or sooner when Temporal suggests it'),
    async: AsyncConfigSchema.optional().describe('asynchronous RL (docs/async-training.md); absent: "off"'),
    eval: z
      .object({
        every: int().min(1).max(1_000_000).describe('evaluate every this many iterations'),
        tasks: z.string().min(1).describe('held-out tasks file (JSONL or parquet of SWE-bench records)'),
        runs: int().min(1).max(1000).default(1).describe('episodes per task'),
        limit: int().min(1).optional().describe('at most this many tasks of the file'),
        maxSteps: int().min(1).max(10_000).optional().describe('steps per episode; default env.evalMaxSteps (DeepSWE evaluation: 100)'),
        responseBudget: int()
          .min(1)
          .max(1 << 22)
          .optional()
          .describe("generated tokens per evaluation episode (default the evaluation config's 65,536, twice episode.responseBudget's: DeepSWE evaluates at 64K)"),
        contextBudget: renamedTo('responseBudget'),
        concurrency: int().min(1).max(4096).optional().describe('episodes in flight; default maxInflightRollouts'),
      })
      .strict()
      .optional()
      .describe('validation: every `every` iterations, a child evaluationRun of the new checkpoint on held-out tasks (docs/evaluation.md)'),
    learner: z
      .object({
        engine: z
          .enum(['native', 'fsdp'])
          .default('native')
          .describe('"native": gpu-learner in the worker process (one device); "fsdp": PyTorch FSDP2 under torchrun (docs/design.md §6, docs/scale-out.md)'),
        device: z.enum(['cpu', 'cuda']).default('cpu').describe("the learner's device"),
        threads: int().min(0).max(1024).default(0).describe('CPU threads; 0: the learner picks (fsdp on the CPU: torch threads per rank)'),
        timeoutMinutes: z
          .number()
          .gt(0)
          .max(7 * 24 * 60)
          .default(60)
          .describe('one attempt of a learner step may run this long'),
        heartbeatTimeoutSeconds: z
          .number()
          .min(2)
          .max(3600)
          .default(60)
          .describe('the learner heartbeats every second while it works: a dead learner worker is noticed after this long'),
        fsdp: FsdpConfigSchema.prefault({}).describe('the FSDP engine; defaults fit one node (DeepSWE: nprocPerNode 8, nnodes 8, cpuOffload true)'),
        correction: CorrectionSchema.optional().describe(
          'sampler–learner mismatch correction (docs/design.md §9, §10), ρ = π_learner(old)/π_behaviour per token, folded into the loss mask. Absent: none in a synchronous run (our server samples with the trained weights); decoupled with cap 2 in an asynchronous one; with vLLM or SGLang, {"kind": "tis", "cap": 2} is recommended',
        ),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((c, ctx) => {
    checkAsync(c, ctx);
    const modeReward = c.env.kind === 'swe' ? modeRewardError(c.env) : null;
    if (modeReward) ctx.addIssue({ code: 'custom', path: ['env', 'reward'], message: modeReward });
    const edit = c.env.kind === 'swe' ? editSettingsError(c.env.edit) : null;
    if (edit) ctx.addIssue({ code: 'custom', path: ['env', 'edit', 'lineNumbers'], message: edit });
    if (c.rollout.heartbeatTimeoutSeconds <= c.rollout.heartbeatSeconds) {
      ctx.addIssue({ code: 'custom', path: ['rollout', 'heartbeatTimeoutSeconds'], message: `must be > rollout.heartbeatSeconds (${c.rollout.heartbeatSeconds})` });
    }
    const children = Math.ceil(c.batch.tasks / tasksPerChildWorkflow(c.rolloutsPerWorkflow, c.batch.samples));
    if (c.batch.tasks * c.batch.samples > c.rolloutsPerWorkflow && children > ROLLOUT_CHILD_WORKFLOWS_MAX) {
      ctx.addIssue({
        code: 'custom',
        path: ['rolloutsPerWorkflow'],
        message: `must be at least ${Math.ceil(c.batch.tasks / ROLLOUT_CHILD_WORKFLOWS_MAX) * c.batch.samples} for ${c.batch.tasks} tasks × ${c.batch.samples} samples (${children} child workflows, at most ${ROLLOUT_CHILD_WORKFLOWS_MAX})`,
      });
    }
  });

export type TrainingConfig = z.infer<typeof TrainingConfigSchema>;

/** The run's async mode ("off" when the section is absent). */
export function asyncMode(c: Pick<TrainingConfig, 'async'>): AsyncMode {
  return c.async?.mode ?? 'off';
}

/**
 * The correction the learner applies: the configured one ("none": nothing); absent, decoupled PPO with
 * DECOUPLED_CAP_DEFAULT in an asynchronous run and nothing in a synchronous one.
 */
export function effectiveCorrection(c: Pick<TrainingConfig, 'async' | 'learner'>): Exclude<CorrectionConfig, { kind: 'none' }> | undefined {
  const k = c.learner.correction;
  if (k) return k.kind === 'none' ? undefined : k;
  return asyncMode(c) === 'off' ? undefined : { kind: 'decoupled', cap: DECOUPLED_CAP_DEFAULT };
}

/** What an async config needs of the rest (a pump's capacity and policy server); issues name the field. */
function checkAsync(c: Pick<TrainingConfig, 'async' | 'batch' | 'maxInflightRollouts' | 'policy' | 'eval'>, ctx: z.RefinementCtx): void {
  const a = c.async;
  if (a?.mode !== 'pump') return;
  const batch = c.batch.tasks * c.batch.samples;
  if (c.maxInflightRollouts < batch) {
    ctx.addIssue({
      code: 'custom',
      path: ['maxInflightRollouts'],
      message: `must be at least one batch (${c.batch.tasks} tasks × ${c.batch.samples} samples = ${batch}) with async.mode "pump", got ${c.maxInflightRollouts}`,
    });
  }
  const groups = Math.floor(c.maxInflightRollouts / c.batch.samples);
  if (groups > ROLLOUTS_PER_WORKFLOW_MAX) {
    ctx.addIssue({
      code: 'custom',
      path: ['maxInflightRollouts'],
      message: `with async.mode "pump" at most ${ROLLOUTS_PER_WORKFLOW_MAX} groups (child workflows of ${c.batch.samples} rollouts) are in flight, so at most ${ROLLOUTS_PER_WORKFLOW_MAX * c.batch.samples}; got ${c.maxInflightRollouts}`,
    });
  }
  if (c.policy.baseUrl) {
    const streaming = a.order === 'streaming';
    ctx.addIssue({
      code: 'custom',
      path: streaming ? ['async', 'order'] : ['async', 'mode'],
      message: streaming
        ? `"streaming" switches weights between the turns of an episode; the external server at policy.baseUrl (${c.policy.baseUrl}) serves one checkpoint at a time, swapped only by a verified sync, so it cannot: omit policy.baseUrl (our policy server holds several checkpoints) or use order "admission" with async.mode "one-step"`
        : `"pump" keeps episodes of several checkpoints in flight at once; the external server at policy.baseUrl (${c.policy.baseUrl}) serves one at a time: omit policy.baseUrl (our policy server holds several checkpoints) or use async.mode "one-step"`,
    });
  }
  if (c.eval) {
    ctx.addIssue({
      code: 'custom',
      path: ['eval'],
      message: 'validation during a run is not supported with async.mode "pump" yet: evaluate the checkpoints with `swerl eval`, or use async.mode "one-step"',
    });
  }
}
export type TrainingConfigInput = z.input<typeof TrainingConfigSchema>;

export type ConfigValidation = { ok: true; config: TrainingConfig } | { ok: false; errors: string[] };

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = input;
  for (const k of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[k];
  }
  return v;
}

function show(v: unknown): string {
  if (v === undefined) return 'nothing';
  const s = JSON.stringify(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

/** Turns zod issues into `prefix.path: what is wanted, got value` lines. */
export function formatIssues(error: z.ZodError, input: unknown, prefix: string): string[] {
  return formatIssueList(error.issues, input, prefix);
}

/**
 * The one branch of a failed union that the input was meant for: its issues are neither unknown
 * keys nor missing fields (e.g. `model: {fromRun: "a/b"}` is reported at `model.fromRun`).
 */
function intendedBranch(iss: z.core.$ZodIssueInvalidUnion, input: unknown): z.core.$ZodIssue[] | null {
  const branches = (iss.errors as z.core.$ZodIssue[][]).filter(
    (b) => b.length > 0 && b.every((x) => x.code !== 'unrecognized_keys' && !(x.code === 'invalid_type' && valueAt(input, [...iss.path, ...x.path]) === undefined)),
  );
  return branches.length === 1 ? branches[0].map((x) => ({ ...x, path: [...iss.path, ...x.path] })) : null;
}

function formatIssueList(issues: readonly z.core.$ZodIssue[], input: unknown, prefix: string): string[] {
  return issues.flatMap((iss) => {
    if (iss.code === 'invalid_union') {
      const branch = intendedBranch(iss, input);
      if (branch) return formatIssueList(branch, input, prefix);
    }
    const path = [prefix, ...iss.path.map(String)].join('.');
    const got = valueAt(input, iss.path);
    let want: string;
    switch (iss.code) {
      case 'too_big':
        want = `must be ${iss.inclusive === false ? '<' : '≤'} ${String(iss.maximum)}`;
        break;
      case 'too_small':
        want = `must be ${iss.inclusive === false ? '>' : '≥'} ${String(iss.minimum)}`;
        break;
      case 'invalid_type':
        // a renamed field (renamedTo): its message names the new one
        if (iss.expected === 'never') return [`${path}: ${iss.message}`];
        want = `must be ${String(iss.expected)}`;
        break;
      case 'invalid_value':
        want = `must be one of ${iss.values.map((x) => JSON.stringify(x)).join(', ')}`;
        break;
      case 'unrecognized_keys':
        return [`${path}: unknown field(s) ${iss.keys.join(', ')}`];
      case 'invalid_union':
        want =
          'options' in iss && Array.isArray(iss.options)
            ? `must be one of ${(iss.options as unknown[]).map((x) => JSON.stringify(x)).join(', ')}`
            : iss.path.at(-1) === 'kind' || ('note' in iss && iss.note === 'No matching discriminator')
              ? 'must be "frozenlake" or "swe"'
              : 'does not match any accepted shape';
        break;
      default:
        want = iss.message;
    }
    return [`${path}: ${want}, got ${show(got)}`];
  });
}

/** Validates a raw config (JSON) and fills in the defaults. Errors name the path and the value. */
/** `recorded`: a config written before a field was renamed (stored, or a workflow's input) is read under the new names. */
export function validateConfig(raw: unknown, opts: { recorded?: boolean } = {}): ConfigValidation {
  const input = opts.recorded ? withRenamedFields(raw, TRAINING_RENAMED) : raw;
  const r = TrainingConfigSchema.safeParse(input);
  if (r.success) return { ok: true, config: r.data };
  return { ok: false, errors: formatIssues(r.error, input, 'config') };
}

export function validateHyperparametersUpdate(input: unknown): { ok: true; update: HyperparametersUpdate } | { ok: false; errors: string[] } {
  const r = HyperparametersUpdateSchema.safeParse(input);
  if (r.success) return { ok: true, update: r.data };
  return { ok: false, errors: formatIssues(r.error, input, 'hyperparameters') };
}

export function hyperparametersOf(c: TrainingConfig): Hyperparameters {
  return {
    lr: c.algorithm.lr,
    weightDecay: c.algorithm.weightDecay,
    clipLow: c.algorithm.clipLow,
    clipHigh: c.algorithm.clipHigh,
    maxGradNorm: c.algorithm.maxGradNorm,
    temperature: c.episode.temperature,
    topP: c.episode.topP,
    maxInflightRollouts: c.maxInflightRollouts,
  };
}

/** Returns a new config with the update applied (the update was validated first). */
export function applyHyperparameters(c: TrainingConfig, u: HyperparametersUpdate): TrainingConfig {
  const pick = <T>(v: T | undefined, d: T): T => (v === undefined ? d : v);
  return {
    ...c,
    maxInflightRollouts: pick(u.maxInflightRollouts, c.maxInflightRollouts),
    algorithm: {
      ...c.algorithm,
      lr: pick(u.lr, c.algorithm.lr),
      weightDecay: pick(u.weightDecay, c.algorithm.weightDecay),
      clipLow: pick(u.clipLow, c.algorithm.clipLow),
      clipHigh: pick(u.clipHigh, c.algorithm.clipHigh),
      maxGradNorm: pick(u.maxGradNorm, c.algorithm.maxGradNorm),
    },
    episode: { ...c.episode, temperature: pick(u.temperature, c.episode.temperature), topP: pick(u.topP, c.episode.topP) },
  };
}
