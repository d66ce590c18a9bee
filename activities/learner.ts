// Learner-queue activities: checkpoint 0, policy sync and the GRPO++ learner step (DESIGN §1, §5).
// The learner worker keeps one Learner in memory, the one it trains; after a restart it reloads the checkpoint a
// step asks for. Its policy server serves its own copies of checkpoints, loaded from their directories (DESIGN
// §10): a sync never waits behind a running step, and rollouts of an asynchronous run sample from checkpoint n
// while the learner trains n → n+1. gpu-learner and the policy server are imported lazily so that rollout-only
// workers never load the native addon.
// With learner.engine "fsdp" the step runs in a torchrun process group the worker keeps (gpu-learner/fsdp);
// the policy server then serves each checkpoint the group writes, loaded by the native engine, as an
// external vLLM/SGLang server reloads it from disk.
import { ApplicationFailure, heartbeat } from '@temporalio/activity';
import { copyFile, cp, mkdir, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asyncMode, effectiveCorrection, validateConfig, type ModelSource, type TrainingConfig } from '../lib/config.ts';
import { FailureType, nonRetryable } from '../lib/failures.ts';
import {
  buildTrainBatch,
  correctedMask,
  keptTokens,
  logprobMismatch,
  packSequences,
  scatterKeptTokens,
  type MismatchStats,
  type PackedTrainBatch,
  type StepStats,
} from '../lib/grpo.ts';
import { createPolicyClient } from '../lib/policy/completions.ts';
import { PolicyResponseError } from '../lib/policy/http.ts';
import { servesCheckpoint } from '../lib/policy/weight-sync.ts';
import { compareProbe, dtypeClass, FP32_PROBE_TOLERANCE, halfPrecisionProbeTolerance, PROBE_NEW_TOKENS, PROBE_SEED, probePrompt, type ProbeResult } from '../lib/sync-probe.ts';
import { UNTIED_HEAD_FILE, untiedHeadFile } from '../lib/checkpoint-layout.ts';
import { keys, listCheckpoints, openStore, type ArtifactStore } from '../lib/store.ts';
import type { Trajectory } from '../lib/types.ts';
import type { FsdpLearner } from '../gpu-learner/fsdp/index.ts';
import type { PolicyServer, ServableModel } from '../policy-server/index.ts';
import type { InitCheckpointInput, InitCheckpointResult, LearnerItem, LearnerStepInput, LearnerStepResult, SyncPolicyInput, SyncPolicyResult } from '../lib/training/shapes.ts';
import { checkpointBytes, checkpointBytesWritten, learnerStepSeconds, mismatchK3, mismatchMaxAbsDelta, mismatchMeanAbsDelta, syncProbeMaxDelta } from '../lib/metrics.ts';

/**
 * What the learner step and the sync probe need from an engine: the native gpu-learner's Learner has exactly
 * this; the FSDP process group is adapted to it (fsdpEngine).
 */
export interface LearnerEngine {
  /** packed log-probs on the current weights: entry t = log p(ids[t] | earlier ids of its sequence), 0 for each first token */
  logprobs(batch: { ids: Int32Array; offsets: Int32Array }): Promise<Float32Array>;
  /** with stepLogprobs: `logprobs` holds each trained token's log-prob before the step (packed as the batch, NaN elsewhere) */
  trainStep(batch: PackedTrainBatch, hp: ReturnType<typeof trainHyper>): Promise<StepStats & { logprobs?: Float32Array }>;
  /** trainStep reports the trained tokens' log-probs from its own forward (the native engine) */
  readonly stepLogprobs?: boolean;
  /** writes the weights (and optimizer state) into `dir` */
  save(dir: string): Promise<void>;
}
/** The native engine as the worker keeps it (gpu-learner's Learner): it trains, and its copies serve. */
export type LearnerHandle = LearnerEngine & ServableModel;

export interface LearnerWorkerOptions {
  device?: 'cpu' | 'cuda';
  threads?: number;
  /** where the policy server listens (0: a free port) */
  policyHost?: string;
  policyPort?: number;
  modelName?: string;
  /** the URL rollout workers on other hosts use to reach this policy server (default: its own URL) */
  advertiseUrl?: string;
  /** loads a checkpoint directory; default gpu-learner's Learner.load (another engine may plug in here) */
  loadLearner?: (dir: string, o: { device: 'cpu' | 'cuda'; threads?: number }) => Promise<LearnerHandle>;
  /** checkpoints the policy server holds at once (policy-server/models.ts; default MODEL_CACHE_DEFAULT) */
  policyModels?: number;
}

/** Files a checkpoint carries over from its parent when the learner does not write them itself. */
const CARRIED_FILES = ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'generation_config.json', 'chat_template.jinja'];

/** State the learner worker keeps across activities: one Learner (the one trained), one policy server (its own copies). */
export class LearnerContext {
  learner: LearnerHandle | null = null;
  loaded: { dir: string; checkpoint: number } | null = null;
  server: PolicyServer | null = null;
  /** the FSDP engine's process group (learner.engine "fsdp"), started on the first step that needs it */
  trainer: FsdpLearner | null = null;
  /** how many process groups this worker started (a restart after a rank died counts) */
  trainerStarts = 0;
  private trainerKey = '';
  private lock: Promise<unknown> = Promise.resolve();
  private serverStarting: Promise<PolicyServer> | null = null;
  constructor(readonly options: LearnerWorkerOptions = {}) {}

  /** gpu-learner's Learner.load, or the engine the worker was given. */
  private async loader(): Promise<NonNullable<LearnerWorkerOptions['loadLearner']>> {
    if (this.options.loadLearner) return this.options.loadLearner;
    const { Learner } = await import('../gpu-learner/index.ts');
    return (d, o) => Learner.load(d, o);
  }

  /** Loads a copy of checkpoint `dir` for serving or probing: never the Learner being trained. */
  async loadCopy(dir: string): Promise<LearnerHandle> {
    const load = await this.loader();
    return load(dir, { device: this.options.device ?? 'cpu', ...(this.options.threads ? { threads: this.options.threads } : {}) });
  }

  /** The FSDP process group for these settings, holding checkpoint `dir`; (re)started when dead or changed. Call inside exclusive(). */
  async ensureTrainer(dir: string, learner: TrainingConfig['learner']): Promise<FsdpLearner> {
    const key = JSON.stringify({ device: learner.device, threads: learner.threads, ...learner.fsdp });
    if (this.trainer && (!this.trainer.alive || key !== this.trainerKey)) {
      await this.trainer.close();
      this.trainer = null;
    }
    if (!this.trainer) {
      const { FsdpLearner } = await import('../gpu-learner/fsdp/index.ts');
      this.trainer = await FsdpLearner.start({ device: learner.device, threads: learner.threads, ...learner.fsdp }, (line) => {
        if (/Error|error|Traceback|exited/.test(line)) console.error(`[fsdp] ${line}`);
      });
      this.trainerKey = key;
      this.trainerStarts++;
    }
    if (this.trainer.loaded !== dir) await this.trainer.load(dir);
    return this.trainer;
  }

  /** Runs `fn` with the learner exclusively (loads, steps and saves never interleave). */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => undefined);
    return run;
  }

  /** Loads checkpoint `dir` (index `checkpoint`) into the Learner that trains, unless it is what is in memory. Call inside exclusive(). */
  async ensureLoaded(dir: string, checkpoint: number, learnerConfig?: TrainingConfig['learner']): Promise<LearnerHandle> {
    if (this.learner && this.loaded?.dir === dir) return this.learner;
    const load = await this.loader();
    const threads = learnerConfig?.threads || this.options.threads || undefined;
    const learner = await load(dir, { device: learnerConfig?.device ?? this.options.device ?? 'cpu', ...(threads ? { threads } : {}) });
    const old = this.learner;
    this.learner = learner;
    this.loaded = { dir, checkpoint };
    if (old && old !== learner) old.close();
    return learner;
  }

  /**
   * Our policy server serves checkpoint `dir` (index `checkpoint`) from now on: its own copy, held or loaded from the
   * directory (started with it on first use). Needs no exclusive(): it never touches the Learner being trained.
   */
  async serveCheckpoint(dir: string, checkpoint: number): Promise<PolicyServer> {
    if (this.server) {
      await this.server.serveDirectory(dir, checkpoint);
      return this.server;
    }
    this.serverStarting ??= this.startServer(dir, checkpoint).finally(() => {
      this.serverStarting = null;
    });
    const server = await this.serverStarting;
    await server.serveDirectory(dir, checkpoint);
    return server;
  }

  private async startServer(dir: string, checkpoint: number): Promise<PolicyServer> {
    const { startPolicyServer } = await import('../policy-server/index.ts');
    this.server = await startPolicyServer({
      port: this.options.policyPort ?? 0,
      host: this.options.policyHost ?? '127.0.0.1',
      modelName: this.options.modelName ?? 'policy',
      checkpoint,
      modelPath: dir,
      loadModel: (d) => this.loadCopy(d),
      ...(this.options.policyModels ? { modelCache: this.options.policyModels } : {}),
    });
    return this.server;
  }

  /** After a restart: serve the newest complete checkpoint of `runId`, so rollouts find a server. */
  async resume(store: ArtifactStore, runId: string): Promise<number | null> {
    const cks = await listCheckpoints(store, runId);
    if (!cks.length) return null;
    const n = cks[cks.length - 1];
    await this.serveCheckpoint(store.dirFor(keys.checkpoint(runId, n)), n);
    return n;
  }

  async close(): Promise<void> {
    await this.trainer?.close();
    this.trainer = null;
    await this.server?.close();
    this.server = null;
  }
}

/** `<schedule workflow id>-<RFC 3339 UTC time>`: the workflow ids a Temporal Schedule gives its runs. */
const SCHEDULED_RUN = /^(.+)-(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z)$/;

/**
 * The run whose newest complete checkpoint becomes `runId`'s checkpoint 0, and that checkpoint.
 * "latest": the newest earlier run of the same Schedule that has one (its times sort as text),
 * else `initialRun`.
 */
async function sourceCheckpoint(store: ArtifactStore, runId: string, model: Extract<ModelSource, { fromRun: string }>): Promise<{ run: string; checkpoint: number }> {
  const newest = async (run: string) => (await listCheckpoints(store, run)).at(-1);
  let run = model.fromRun;
  if (run === 'latest') {
    const m = SCHEDULED_RUN.exec(runId);
    if (!m && !model.initialRun) {
      throw invalid(`config.model.fromRun: "latest" needs a run started by a Schedule (run id <schedule workflow id>-<time>), got run id ${JSON.stringify(runId)}`);
    }
    const earlier = m ? (await store.children('runs')).filter((r) => r < runId && SCHEDULED_RUN.exec(r)?.[1] === m[1]).reverse() : [];
    for (const r of earlier) {
      const n = await newest(r);
      if (n !== undefined) return { run: r, checkpoint: n };
    }
    if (!model.initialRun) {
      throw invalid(
        `config.model.fromRun: "latest": no earlier run of schedule workflow ${JSON.stringify(m![1])} has a checkpoint in ${store.url}, and config.model.initialRun is not set`,
      );
    }
    run = model.initialRun;
  }
  const field = model.fromRun === 'latest' ? 'config.model.initialRun' : 'config.model.fromRun';
  if (run === runId) throw invalid(`${field}: ${JSON.stringify(run)} is this run itself`);
  const n = await newest(run);
  if (n === undefined) throw invalid(`${field}: run ${JSON.stringify(run)} has no complete checkpoint in ${store.url}`);
  return { run, checkpoint: n };
}

function invalid(message: string): ApplicationFailure {
  return nonRetryable(FailureType.InvalidConfig, message);
}

async function storedConfig(store: ArtifactStore, runId: string, n: number): Promise<TrainingConfig> {
  const raw = await store.getJson<unknown>(keys.iterationConfig(runId, n));
  if (raw === null) throw new Error(`iteration config ${keys.iterationConfig(runId, n)} is missing in ${store.url}`);
  const v = validateConfig(raw, { recorded: true });
  if (!v.ok) throw invalid(v.errors.join('; '));
  return v.config;
}

/** Total size of the files under `dir`. */
async function directoryBytes(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) total += (await stat(join(e.parentPath, e.name))).size;
  }
  return total;
}

/**
 * Keeps the activity's heartbeat alive while `fn` runs (native calls run off the event loop), every
 * second: the SDK throttles what it sends, and learner.heartbeatTimeoutSeconds may be a few seconds.
 */
async function withHeartbeat<T>(details: Record<string, unknown>, fn: () => Promise<T>): Promise<T> {
  heartbeat(details);
  const t = setInterval(() => heartbeat(details), 1000);
  try {
    return await fn();
  } finally {
    clearInterval(t);
  }
}

export function createLearnerActivities(ctx: LearnerContext) {
  return {
    /**
     * Writes checkpoint 0 unless present: a preset's random init, a copy of a local model directory,
     * or a copy of the newest complete checkpoint of an earlier run (`fromRun`, recorded in from.json).
     */
    async initCheckpoint(input: InitCheckpointInput): Promise<InitCheckpointResult> {
      const store = openStore(input.storeUrl);
      const key = keys.checkpoint(input.runId, 0);
      const model = input.model;
      const created = await store.putDir(key, async (tmp) => {
        if ('fromRun' in model) {
          const src = await sourceCheckpoint(store, input.runId, model);
          // the learner's stats belong to the step that wrote the source checkpoint, not to this run
          await cp(store.dirFor(keys.checkpoint(src.run, src.checkpoint)), tmp, { recursive: true, filter: (p) => !p.endsWith('/stats.json') });
          await writeFile(join(tmp, 'from.json'), JSON.stringify(src));
        } else if ('preset' in model) {
          const { writeModel } = await import('../lib/model-init.ts');
          await writeModel(tmp, model.preset, model.seed);
        } else {
          try {
            await cp(model.path, tmp, { recursive: true });
          } catch (e) {
            throw invalid(`config.model.path: cannot read ${JSON.stringify(model.path)} (${(e as Error).message})`);
          }
        }
      });
      return { checkpoint: 0, key, created };
    },

    /** Makes the policy server serve checkpoint n before rollouts start (DESIGN §4). */
    async syncPolicy(input: SyncPolicyInput): Promise<SyncPolicyResult> {
      // heartbeats from the start: waiting for the learner (exclusive) counts against the heartbeat timeout too
      return withHeartbeat({ sync: input.checkpoint }, () => syncPolicyNow(ctx, input));
    },

    /**
     * One GRPO++ optimizer step on iteration n's trajectories: checkpoint n → n+1, saved atomically.
     * Idempotent: when checkpoint n+1 exists its stored stats are returned.
     */
    async learnerStep(input: LearnerStepInput): Promise<LearnerStepResult> {
      return withHeartbeat({ n: input.n, step: input.checkpoint }, () => learnerStepNow(ctx, input));
    },
  };
}

async function syncPolicyNow(ctx: LearnerContext, input: SyncPolicyInput): Promise<SyncPolicyResult> {
  const store = openStore(input.storeUrl);
  const dir = input.modelDir ?? store.dirFor(keys.checkpoint(input.runId, input.checkpoint));
  if (input.modelDir === undefined && !(await store.exists(keys.checkpoint(input.runId, input.checkpoint)))) {
    throw new Error(`checkpoint ${input.checkpoint} of run ${input.runId} is not in ${store.url}`);
  }
  if (input.policyBaseUrl) return syncExternal(ctx, input, store, dir);
  const server = await ctx.serveCheckpoint(dir, input.checkpoint);
  return { policyUrl: ctx.options.advertiseUrl ?? server.url, checkpoint: input.checkpoint };
}

/**
 * An external server (vLLM, SGLang, another worker's): reload checkpoint n unless it serves it, then verify with
 * the probe (lib/sync-probe.ts) against the learner's log-probs of the same checkpoint. What no retry can fix
 * (the server refused, a wrong model name, a stale head) fails non-retryably, naming the cause.
 */
async function syncExternal(ctx: LearnerContext, input: SyncPolicyInput, store: ArtifactStore, dir: string): Promise<SyncPolicyResult> {
  const weightSync = input.weightSync ?? 'sglang';
  const client = createPolicyClient({ baseUrl: input.policyBaseUrl!, model: input.model, weightSync });
  const config = await latestConfig(store, input.runId);
  try {
    await client.checkServedModel();
    let dtype = 'float32';
    if (weightSync === 'vllm') {
      const info = await client.vllmInfo();
      dtype = info.dtype;
      if (await tiedCheckpoint(dir)) {
        if (!info.untiedHead) {
          throw policyMismatch(
            `checkpoint ${input.checkpoint} at ${dir} has tied embeddings and vLLM at ${input.policyBaseUrl} serves them tied: vLLM's in-place ` +
              `reload refreshes embed_tokens but keeps the start-up output head, so it would sample from a model that matches no checkpoint. ` +
              `Start vLLM with --hf-overrides '{"tie_word_embeddings": false}' (swerl writes the head as ${UNTIED_HEAD_FILE} into each checkpoint it syncs)`,
          );
        }
        await untiedHeadFile(dir);
      }
    }
    const t0 = Date.now();
    const served = await client.servedModel();
    const reloaded = !servesCheckpoint(served, dir, input.checkpoint);
    if (reloaded) await client.loadWeights(dir, input.checkpoint);
    const syncSeconds = (Date.now() - t0) / 1000;
    const probe = await withProbeEngine(ctx, config, dir, input.checkpoint, (engine) =>
      withHeartbeat({ probe: input.checkpoint }, () => probeServedCheckpoint(client, engine, dir, dtype)),
    );
    if (!probe.ok) {
      throw policyMismatch(
        `${input.policyBaseUrl} does not serve checkpoint ${input.checkpoint} (${dir}) after the sync: the probe's log-probs differ from the learner's ` +
          `by max ${probe.maxAbsDelta.toExponential(2)} (mean ${probe.meanAbsDelta.toExponential(2)}) over ${probe.tokens} tokens, the ${probe.statistic} above the ` +
          `${probe.dtype} tolerance ${probe.tolerance.toExponential(2)}` +
          (weightSync === 'vllm' ? ` (vLLM: a tied head served tied, another dtype than it reports, or a reload that did not take)` : ''),
      );
    }
    syncProbeMaxDelta.set({ run_id: input.runId }, probe.maxAbsDelta);
    return { policyUrl: input.policyBaseUrl!, checkpoint: input.checkpoint, sync: { reloaded, seconds: syncSeconds, probe } };
  } catch (e) {
    if (e instanceof PolicyResponseError) {
      // a 4xx, "not configured", a model name it does not serve: no retry can fix it
      throw nonRetryable(FailureType.PolicyRejected, `weight sync to ${input.policyBaseUrl}: ${e.message}`);
    }
    throw e;
  }
}

/**
 * `fn` with the engine that computes the probe's reference log-probs, holding `dir`: the run's learner engine, after
 * any running step; in an asynchronous run on the native engine a copy loaded for the probe, so a sync issued
 * during a step does not wait for it (the FSDP group still does: it holds one model).
 */
async function withProbeEngine<T>(ctx: LearnerContext, config: TrainingConfig | null, dir: string, checkpoint: number, fn: (e: LearnerEngine) => Promise<T>): Promise<T> {
  if (config && asyncMode(config) !== 'off' && config.learner.engine !== 'fsdp') {
    const copy = await ctx.loadCopy(dir);
    try {
      return await fn(copy);
    } finally {
      copy.close();
    }
  }
  return ctx.exclusive(async () => {
    if (config?.learner.engine === 'fsdp') return fn(fsdpEngine(await ctx.ensureTrainer(dir, config.learner), dir, await fsdpScratch(), () => undefined));
    return fn(await ctx.ensureLoaded(dir, checkpoint, config?.learner));
  });
}

/**
 * One learner step on either engine (DESIGN §5, §9): the learner's log-probs of every sampled token on checkpoint n
 * (π_old) against the behaviour log-probs stored in the trajectories (mismatch/*), the optional correction folded
 * into the loss mask, one optimizer step, checkpoint n+1 saved atomically with its stats.json.
 */
async function learnerStepNow(ctx: LearnerContext, input: LearnerStepInput): Promise<LearnerStepResult> {
  const { runId, n, checkpoint } = input;
  const store = openStore(input.storeUrl);
  const nextKey = keys.checkpoint(runId, checkpoint + 1);
  const existing = await store.getJson<LearnerStepResult>(keys.checkpointStats(runId, checkpoint + 1));
  if (existing) return { ...existing, reused: true };
  const config = await storedConfig(store, runId, n);
  const dir = store.dirFor(keys.checkpoint(runId, checkpoint));
  const { items, trajs } = await readTrajectories(store, input);
  const advantages = items.map((it) => it.advantage);
  // every sampled token (for the mismatch), and the sequences that can contribute a gradient (for the step):
  // zero-advantage and fully masked ones add 0 to Σ m·ℓ, still counted in N through normSequences (DESIGN §5)
  const all = buildTrainBatch(trajs, advantages, { compactFilter: false, includeOldLogprobs: true });
  const batch = buildTrainBatch(trajs, advantages, { compactFilter: true, dropZeroAdvantage: true });
  const engineName = config.learner.engine;
  const details: Record<string, unknown> = { n, engine: engineName, phase: 'loading' };
  try {
    return await ctx.exclusive(() =>
      withHeartbeat(details, async () => {
        const progress = (p: object) => {
          Object.assign(details, p);
          heartbeat(details);
        };
        const engine =
          engineName === 'fsdp'
            ? fsdpEngine(await ctx.ensureTrainer(dir, config.learner), dir, keys.iteration(runId, n), progress, store)
            : await ctx.ensureLoaded(dir, checkpoint, config.learner);
        const started = Date.now();
        let step: StepStats & { logprobs?: Float32Array } = { loss: 0, gradNorm: 0, clipFraction: 0, meanRatio: 0, tokens: 0, seconds: 0, skipped: true };
        const finishMismatch = await measureMismatch(engine, config, all, batch, trajs, checkpoint, runId, progress);
        // the weights in memory change now: until n+1 is saved, a retry must reload n
        if (engineName !== 'fsdp') ctx.loaded = null;
        // nothing to train (every group's rewards equal): no engine call, a skipped step with zero stats;
        // checkpoint n+1 is still written (same weights, same optimizer step) so the run goes on
        if (batch.kept.length > 0) {
          progress({ phase: 'train', sequences: batch.kept.length });
          step = await engine.trainStep(batch, trainHyper(config, batch.episodes));
        }
        const mismatch = finishMismatch(step.logprobs);
        const result: LearnerStepResult = {
          checkpoint: checkpoint + 1,
          loss: step.loss,
          gradNorm: step.gradNorm,
          clipFraction: step.clipFraction,
          meanRatio: step.meanRatio,
          tokens: step.tokens,
          seconds: (Date.now() - started) / 1000,
          skipped: step.skipped,
          trajectories: trajs.length,
          sequences: batch.kept.length,
          lr: config.algorithm.lr,
          reused: false,
          ...(mismatch ? { mismatch } : {}),
        };
        progress({ phase: 'save', saving: checkpoint + 1 });
        await saveCheckpoint(ctx, store, engine, engineName, dir, nextKey, result, runId);
        learnerStepSeconds.observe({ run_id: runId }, (Date.now() - started) / 1000);
        return result;
      }),
    );
  } catch (e) {
    if (e instanceof Error && e.name === 'FsdpInputError') throw invalid(e.message);
    throw e;
  }
}

type BuiltBatch = ReturnType<typeof buildTrainBatch>;

/**
 * π_old against the behaviour log-probs stored in the trajectories (mismatch/*): every sampled token's learner log-prob
 * on checkpoint n, and the optional correction folded into `batch`'s mask. Called before the step; the stats come
 * from the function it returns, given the step's log-probs (undefined when nothing was sampled).
 *
 * Without a correction, on an engine whose step reports its log-probs (the native one), the sequences the step trains
 * take theirs from the step's own forward, and only the others (zero advantage, compact-filtered) are forwarded
 * here: a second forward of the trained sequences was a fifth of the step's time (bench:learner --grpo, Qwen2.5-0.5B
 * shape: 18.1 of 88.7 s a group). A correction needs the log-probs before the step to build its mask, so it forwards
 * every sequence here, as the FSDP engine does.
 */
async function measureMismatch(
  engine: LearnerEngine,
  config: TrainingConfig,
  all: BuiltBatch,
  batch: BuiltBatch,
  trajs: Trajectory[],
  checkpoint: number,
  runId: string,
  progress: (p: object) => void,
): Promise<(stepLogprobs: Float32Array | undefined) => MismatchStats | undefined> {
  if (all.offsets.length <= 1 || all.trainableTokens <= 0) return () => undefined;
  const correction = effectiveCorrection(config);
  let correctedShare = 0;
  const finish = (learnerLp: Float32Array): MismatchStats => {
    const mismatch = logprobMismatch(learnerLp, all.oldLogprobs!, all.mask);
    if (correction) mismatch.corrected = correctedShare;
    if (asyncMode(config) !== 'off') mismatch.staleness = tokenStaleness(trajs, checkpoint);
    recordMismatch(runId, mismatch);
    return mismatch;
  };
  if (!correction && engine.stepLogprobs && batch.kept.length > 0) {
    const trained = new Set(batch.kept); // all's sequence i is trajectory i (nothing dropped)
    const rest = all.kept.filter((i) => !trained.has(i));
    const learnerLp = new Float32Array(all.ids.length).fill(NaN);
    if (rest.length > 0) {
      progress({ phase: 'logprobs', sequences: rest.length });
      scatterKeptTokens(learnerLp, all.offsets, rest, await engine.logprobs(packSequences(all, rest)));
    }
    return (stepLp) => {
      if (!stepLp) throw new Error('learner step: the engine reported no log-probs of the trained tokens');
      scatterKeptTokens(learnerLp, all.offsets, batch.kept, stepLp);
      for (let t = 0; t < learnerLp.length; t++) if (all.mask[t] !== 0 && Number.isNaN(learnerLp[t])) throw new Error(`learner step: no log-prob for sampled token ${t}`);
      return finish(learnerLp);
    };
  }
  progress({ phase: 'logprobs' });
  const learnerLp = await engine.logprobs(all);
  if (correction && batch.kept.length > 0) {
    // the fraction of the step's trained tokens whose weight the correction changed (0 when nothing is trained)
    const c = correctedMask(batch.mask, keptTokens(learnerLp, all.offsets, batch.kept), keptTokens(all.oldLogprobs!, all.offsets, batch.kept), correction);
    batch.mask = c.mask;
    correctedShare = batch.trainableTokens ? c.changed / batch.trainableTokens : 0;
  }
  const mismatch = finish(learnerLp);
  return () => mismatch;
}

/** Checkpoint n+1 saved atomically with the files carried from n and its stats.json; the engine's state follows it. */
async function saveCheckpoint(
  ctx: LearnerContext,
  store: ArtifactStore,
  engine: LearnerEngine,
  engineName: TrainingConfig['learner']['engine'],
  dir: string,
  nextKey: string,
  result: LearnerStepResult,
  runId: string,
): Promise<void> {
  await store.putDir(nextKey, async (tmp) => {
    await engine.save(tmp);
    for (const f of CARRIED_FILES) {
      if (existsSync(join(dir, f)) && !existsSync(join(tmp, f))) await copyFile(join(dir, f), join(tmp, f));
    }
    await writeFile(join(tmp, 'stats.json'), JSON.stringify(result));
  });
  const nextDir = store.dirFor(nextKey);
  if (engineName === 'fsdp') ctx.trainer!.loaded = nextDir;
  else ctx.loaded = { dir: nextDir, checkpoint: result.checkpoint };
  const bytes = await directoryBytes(nextDir);
  checkpointBytes.set({ run_id: runId }, bytes);
  checkpointBytesWritten.inc({ run_id: runId }, bytes);
}

/**
 * The probe (DESIGN §9): the server samples a seeded continuation of a fixed prompt, `engine` (holding the checkpoint
 * at `dir`) computes the log-probs of the same tokens; compared within the tolerance of the server's dtype.
 */
export async function probeServedCheckpoint(
  client: Pick<ReturnType<typeof createPolicyClient>, 'complete'>,
  engine: LearnerEngine,
  dir: string,
  dtype: string,
): Promise<ProbeResult> {
  const vocab = (JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
  const prompt = probePrompt(vocab);
  const out = await client.complete({ promptIds: prompt, maxTokens: PROBE_NEW_TOKENS, temperature: 1, topP: 1, seed: PROBE_SEED });
  const ids = Int32Array.from([...prompt, ...out.ids]);
  const lp = await engine.logprobs({ ids, offsets: Int32Array.from([0, ids.length]) });
  const mine = lp.subarray(prompt.length, prompt.length + out.ids.length);
  const cls = dtypeClass(dtype);
  if (cls === 'fp32') return compareProbe(out.logprobs, mine, FP32_PROBE_TOLERANCE, cls);
  const tolerance = halfPrecisionProbeTolerance(await emulatedHalfDelta(dir, ids, prompt.length, mine, cls === 'fp16' ? 'fp16' : 'bf16'));
  return compareProbe(out.logprobs, mine, tolerance, cls === 'unknown' ? dtype : cls, 'mean');
}

/** The step's items (inline and in stored parts) and their trajectories. */
async function readTrajectories(store: ArtifactStore, input: LearnerStepInput): Promise<{ items: LearnerItem[]; trajs: Trajectory[] }> {
  const items = [...input.items];
  for (const part of input.itemParts ?? []) {
    // a LearnerItem[] (storeLearnerItems), or an async pump's group result ({items, ...}: activities/pump.ts)
    const stored = await store.getJson<LearnerItem[] | { items: LearnerItem[] }>(part);
    if (!stored) throw new Error(`learner items ${part} are missing from ${store.url}`);
    items.push(...(Array.isArray(stored) ? stored : stored.items));
  }
  const trajs: Trajectory[] = [];
  for (const it of items) {
    const t = await store.getJson<Trajectory>(it.key);
    if (!t) throw new Error(`trajectory ${it.key} is missing from ${store.url}`);
    trajs.push(t);
  }
  return { items, trajs };
}

/** The step's hyperparameters (gpu-learner's TrainHyper; the FSDP trainer reads the same fields). */
export function trainHyper(config: TrainingConfig, episodes: number) {
  const a = config.algorithm;
  return {
    lr: a.lr,
    weightDecay: a.weightDecay,
    beta1: a.beta1,
    beta2: a.beta2,
    eps: a.eps,
    clipLow: a.clipLow,
    clipHigh: a.loss === 'grpo' ? a.clipLow : a.clipHigh,
    maxGradNorm: a.maxGradNorm,
    lMax: a.lMax,
    mode: a.loss,
    normSequences: episodes,
    ...(a.microBatchTokens ? { microBatchTokens: a.microBatchTokens } : {}),
  };
}

/**
 * The FSDP process group as a LearnerEngine: batches go through the store (runs/<id>/iter-<n>/*.safetensors, written
 * atomically), progress (one message per micro-batch, load and save part) heartbeats the activity. A dead or hung
 * rank fails the attempt; the retry starts a new group from checkpoint n, so n+1 is still written once.
 */
function fsdpEngine(trainer: FsdpLearner, srcDir: string, scratchKey: string, progress: (p: object) => void, store?: ArtifactStore): LearnerEngine {
  const path = (name: string) => (store ? store.dirFor(`${scratchKey}/${name}`) : join(scratchKey, name));
  return {
    async logprobs(b) {
      const { writeTrainBatch } = await import('../gpu-learner/fsdp/index.ts');
      const p = path('logprobs-batch.safetensors');
      const n = b.offsets.length - 1;
      writeTrainBatch(p, { ids: b.ids, offsets: b.offsets, mask: new Float32Array(b.ids.length), advantages: new Float32Array(n) });
      return trainer.logprobs(p, progress);
    },
    async trainStep(b, hp) {
      const { writeTrainBatch } = await import('../gpu-learner/fsdp/index.ts');
      const p = path('train-batch.safetensors');
      writeTrainBatch(p, b);
      return trainer.trainStep(p, hp, progress);
    },
    save: (dir) => trainer.save(dir, srcDir, progress),
  };
}

/** Where this worker writes the probe's small batch files for the FSDP group (the group reads them from the same host). */
async function fsdpScratch(): Promise<string> {
  const d = join(tmpdir(), `swerl-fsdp-probe-${process.pid}`);
  await mkdir(d, { recursive: true });
  return d;
}

/**
 * How many versions old the step's sampled tokens are (DESIGN §10): the learner's checkpoint minus the version
 * that sampled each token (its entry in `versions`, a streaming episode's, else the trajectory's checkpoint).
 */
function tokenStaleness(trajs: readonly Trajectory[], learnerVersion: number): { max: number; mean: number } {
  let n = 0;
  let sum = 0;
  let max = 0;
  for (const t of trajs) {
    t.mask.forEach((m, i) => {
      if (m === 0) return;
      const s = learnerVersion - (t.versions?.[i] ?? t.checkpoint);
      n++;
      sum += s;
      max = Math.max(max, s);
    });
  }
  return { max, mean: n ? sum / n : 0 };
}

/** Sets the mismatch gauges of the run (Prometheus). */
function recordMismatch(runId: string, m: MismatchStats): void {
  mismatchMeanAbsDelta.set({ run_id: runId }, m.meanAbsDelta);
  mismatchMaxAbsDelta.set({ run_id: runId }, m.maxAbsDelta);
  mismatchK3.set({ run_id: runId }, m.k3);
}

/** The run's newest iteration config in the store (null before the first): which engine computes the probe. */
async function latestConfig(store: ArtifactStore, runId: string): Promise<TrainingConfig | null> {
  const iters = (await store.children(keys.run(runId)).catch(() => [] as string[]))
    .map((x) => /^iter-(\d+)$/.exec(x)?.[1])
    .filter((x): x is string => x !== undefined)
    .map(Number)
    .sort((a, b) => b - a);
  for (const n of iters) {
    const raw = await store.getJson<unknown>(keys.iterationConfig(runId, n));
    if (raw === null) continue;
    const v = validateConfig(raw, { recorded: true });
    if (v.ok) return v.config;
  }
  return null;
}

async function tiedCheckpoint(dir: string): Promise<boolean> {
  try {
    return (JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as { tie_word_embeddings?: boolean }).tie_word_embeddings === true;
  } catch {
    return false;
  }
}

/** FailureType: PolicyMismatch — the server does not compute what the checkpoint computes; no retry can fix it. */
function policyMismatch(message: string): ApplicationFailure {
  return nonRetryable(FailureType.PolicyMismatch, message);
}

/**
 * mean |logπ(W) − logπ_half(W)| over the probe's generated tokens: the native engine loaded to emulate a bf16 (or
 * fp16) server, its weights and every tensor of its forward rounded (LoadOptions.emulateHalf). The scale of a
 * half-precision server's error (halfPrecisionProbeTolerance). An unknown dtype is taken as bf16, the coarser.
 */
async function emulatedHalfDelta(dir: string, ids: Int32Array, promptLength: number, reference: Float32Array, half: 'bf16' | 'fp16'): Promise<number> {
  const { Learner } = await import('../gpu-learner/index.ts');
  const l = await Learner.load(dir, { threads: 1, emulateHalf: half });
  try {
    const lp = await l.logprobs({ ids, offsets: Int32Array.from([0, ids.length]) });
    let sum = 0;
    for (let i = 0; i < reference.length; i++) sum += Math.abs(lp[promptLength + i]! - reference[i]!);
    return sum / reference.length;
  } finally {
    l.close();
  }
}
