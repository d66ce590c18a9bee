// Learner-queue activities: checkpoint 0, policy sync and the GRPO++ learner step (DESIGN §1, §5).
// The learner worker keeps one Learner in memory and serves it through the policy server; after a
// restart it reloads the checkpoint a step asks for. gpu-learner and the policy server are imported
// lazily so that rollout-only workers never load the native addon.
// With learner.engine "fsdp" the step runs in a torchrun process group the worker keeps (gpu-learner/fsdp);
// the policy server then serves each checkpoint the group writes, loaded by the native engine, as an
// external vLLM/SGLang server reloads it from disk.
import { ApplicationFailure, heartbeat } from '@temporalio/activity';
import { copyFile, cp, readdir, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { validateConfig, type ModelSource, type TrainingConfig } from '../lib/config.ts';
import { buildTrainBatch, type PackedTrainBatch, type StepStats } from '../lib/grpo.ts';
import { createPolicyClient, servesCheckpoint } from '../lib/policy-client.ts';
import { keys, listCheckpoints, openStore, type ArtifactStore } from '../lib/store.ts';
import type { Trajectory } from '../lib/types.ts';
import type { FsdpLearner } from '../gpu-learner/fsdp/index.ts';
import type {
  InitCheckpointInput,
  InitCheckpointResult,
  LearnerItem,
  LearnerStepInput,
  LearnerStepResult,
  SyncPolicyInput,
  SyncPolicyResult,
} from '../workflows/shapes.ts';
import { checkpointBytes, checkpointBytesWritten, learnerStepSeconds } from './metrics.ts';

/** The part of gpu-learner's Learner used here. */
export interface LearnerHandle {
  trainStep(
    batch: PackedTrainBatch,
    hp: Record<string, unknown>,
  ): Promise<StepStats & { step: number }>;
  save(dir: string): Promise<void>;
}
interface PolicyServerHandle {
  url: string;
  port: number;
  close(): Promise<void>;
  setLearner(learner: unknown, checkpoint: number, modelPath: string): void | Promise<void>;
}

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
}

/** Files a checkpoint carries over from its parent when the learner does not write them itself. */
const CARRIED_FILES = ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'generation_config.json', 'chat_template.jinja'];

/** State the learner worker keeps across activities: one Learner, one policy server. */
export class LearnerContext {
  learner: LearnerHandle | null = null;
  loaded: { dir: string; checkpoint: number } | null = null;
  server: PolicyServerHandle | null = null;
  /** the FSDP engine's process group (learner.engine "fsdp"), started on the first step that needs it */
  trainer: FsdpLearner | null = null;
  /** how many process groups this worker started (a restart after a rank died counts) */
  trainerStarts = 0;
  private trainerKey = '';
  private lock: Promise<unknown> = Promise.resolve();
  private loadModel: ((dir: string) => Promise<unknown>) | null = null;
  constructor(readonly options: LearnerWorkerOptions = {}) {}

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

  /** Loads checkpoint `dir` (index `checkpoint`) unless it is what is in memory; serves it. Call inside exclusive(). */
  async ensureLoaded(dir: string, checkpoint: number, learnerConfig?: TrainingConfig['learner']): Promise<LearnerHandle> {
    if (this.learner && this.loaded?.dir === dir) return this.learner;
    let load = this.options.loadLearner;
    if (!load) {
      const { Learner } = (await import('../gpu-learner/index.ts')) as unknown as {
        Learner: { load(dir: string, o: { device: 'cpu' | 'cuda'; threads?: number }): Promise<LearnerHandle> };
      };
      load = (d, o) => Learner.load(d, o);
    }
    const loader = load;
    const threads = learnerConfig?.threads || this.options.threads || undefined;
    const loadOpts = { device: learnerConfig?.device ?? this.options.device ?? 'cpu', ...(threads ? { threads } : {}) };
    this.loadModel = (d: string) => loader(d, loadOpts);
    const learner = await loader(dir, loadOpts);
    const old = this.learner as unknown as { close?: () => void } | null;
    this.learner = learner;
    this.loaded = { dir, checkpoint };
    await this.serve(learner, checkpoint, dir);
    if (old && old !== (learner as unknown)) old.close?.();
    return learner;
  }

  private async serve(learner: LearnerHandle, checkpoint: number, dir: string): Promise<void> {
    if (this.server) {
      await this.server.setLearner(learner, checkpoint, dir);
      return;
    }
    const { startPolicyServer } = (await import('../policy-server/index.ts')) as unknown as {
      startPolicyServer(o: { learner: unknown; port: number; host: string; modelName: string; checkpoint: number; modelPath: string; loadModel?: (dir: string) => Promise<unknown> }): Promise<PolicyServerHandle>;
    };
    this.server = await startPolicyServer({
      learner,
      port: this.options.policyPort ?? 0,
      host: this.options.policyHost ?? '127.0.0.1',
      modelName: this.options.modelName ?? 'policy',
      checkpoint,
      modelPath: dir,
      ...(this.loadModel ? { loadModel: this.loadModel } : {}),
    });
  }

  /** After a restart: serve the newest complete checkpoint of `runId`, so rollouts find a server. */
  async resume(store: ArtifactStore, runId: string): Promise<number | null> {
    const cks = await listCheckpoints(store, runId);
    if (!cks.length) return null;
    const n = cks[cks.length - 1];
    await this.exclusive(() => this.ensureLoaded(store.dirFor(keys.checkpoint(runId, n)), n));
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
    const earlier = m
      ? (await store.children('runs')).filter((r) => r < runId && SCHEDULED_RUN.exec(r)?.[1] === m[1]).reverse()
      : [];
    for (const r of earlier) {
      const n = await newest(r);
      if (n !== undefined) return { run: r, checkpoint: n };
    }
    if (!model.initialRun) {
      throw invalid(`config.model.fromRun: "latest": no earlier run of schedule workflow ${JSON.stringify(m![1])} has a checkpoint in ${store.url}, and config.model.initialRun is not set`);
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
  return ApplicationFailure.create({ type: 'InvalidConfig', nonRetryable: true, message });
}

async function storedConfig(store: ArtifactStore, runId: string, n: number): Promise<TrainingConfig> {
  const raw = await store.getJson<unknown>(keys.iterationConfig(runId, n));
  if (raw === null) throw new Error(`iteration config ${keys.iterationConfig(runId, n)} is missing in ${store.url}`);
  const v = validateConfig(raw);
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
          const { writeModel } = await import('../lib/presets.ts');
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
      return withHeartbeat({ sync: input.checkpoint }, () => syncPolicyNow(input));
    },

    /**
     * One GRPO++ optimizer step on iteration n's trajectories: checkpoint n → n+1, saved atomically.
     * Idempotent: when checkpoint n+1 exists its stored stats are returned.
     */
    async learnerStep(input: LearnerStepInput): Promise<LearnerStepResult> {
      return withHeartbeat({ n: input.n, step: input.checkpoint }, () => learnerStepNow(input));
    },
  };

  async function syncPolicyNow(input: SyncPolicyInput): Promise<SyncPolicyResult> {
    const store = openStore(input.storeUrl);
    const dir = input.modelDir ?? store.dirFor(keys.checkpoint(input.runId, input.checkpoint));
    if (input.modelDir === undefined && !(await store.exists(keys.checkpoint(input.runId, input.checkpoint)))) {
      throw new Error(`checkpoint ${input.checkpoint} of run ${input.runId} is not in ${store.url}`);
    }
    if (input.policyBaseUrl) {
      const client = createPolicyClient({ baseUrl: input.policyBaseUrl, model: input.model, weightSync: input.weightSync ?? 'sglang' });
      if (!servesCheckpoint(await client.servedModel(), dir, input.checkpoint)) await client.loadWeights(dir, input.checkpoint);
      return { policyUrl: input.policyBaseUrl, checkpoint: input.checkpoint };
    }
    await ctx.exclusive(() => withHeartbeat({ loading: input.checkpoint }, () => ctx.ensureLoaded(dir, input.checkpoint)));
    return { policyUrl: ctx.options.advertiseUrl ?? ctx.server!.url, checkpoint: input.checkpoint };
  }

  async function learnerStepNow(input: LearnerStepInput): Promise<LearnerStepResult> {
    const { runId, n, checkpoint } = input;
    const store = openStore(input.storeUrl);
    const nextKey = keys.checkpoint(runId, checkpoint + 1);
    const existing = await store.getJson<LearnerStepResult>(keys.checkpointStats(runId, checkpoint + 1));
    if (existing) return { ...existing, reused: true };
    const config = await storedConfig(store, runId, n);
    if (config.learner.engine === 'fsdp') return fsdpLearnerStep(ctx, store, input, config);
    return ctx.exclusive(async () => {
      const dir = store.dirFor(keys.checkpoint(runId, checkpoint));
      const learner = await ctx.ensureLoaded(dir, checkpoint, config.learner);
      const { items, trajs } = await readTrajectories(store, input);
      // Zero-advantage (and fully masked) sequences add 0 to Σ m·ℓ: left out of the forward/backward,
      // still counted in N through normSequences, so the step is the full batch's (DESIGN §5).
      const batch = buildTrainBatch(trajs, items.map((it) => it.advantage), { compactFilter: true, dropZeroAdvantage: true });
      const a = config.algorithm;
      const hp = trainHyper(config, batch.episodes);
      // the in-memory weights change now: until n+1 is saved, a retry must reload n
      ctx.loaded = null;
      const started = Date.now();
      // nothing to train (every group's rewards equal): no native call, a skipped step with zero stats;
      // checkpoint n+1 is still written (same weights, same optimizer step) so the run goes on
      const step =
        batch.kept.length === 0
          ? { loss: 0, gradNorm: 0, clipFraction: 0, meanRatio: 0, tokens: 0, seconds: 0, skipped: true, step: 0 }
          : await withHeartbeat({ n, sequences: batch.kept.length }, () =>
              learner.trainStep({ ids: batch.ids, offsets: batch.offsets, mask: batch.mask, advantages: batch.advantages }, hp),
            );
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
        lr: a.lr,
        reused: false,
      };
      await withHeartbeat({ n, saving: checkpoint + 1 }, () =>
        store.putDir(nextKey, async (tmp) => {
          await learner.save(tmp);
          for (const f of CARRIED_FILES) {
            if (existsSync(join(dir, f)) && !existsSync(join(tmp, f))) await copyFile(join(dir, f), join(tmp, f));
          }
          await writeFile(`${tmp}/stats.json`, JSON.stringify(result));
        }),
      );
      const nextDir = store.dirFor(nextKey);
      learnerStepSeconds.observe({ run_id: runId }, (Date.now() - started) / 1000);
      const bytes = await directoryBytes(nextDir);
      checkpointBytes.set({ run_id: runId }, bytes);
      checkpointBytesWritten.inc({ run_id: runId }, bytes);
      ctx.loaded = { dir: nextDir, checkpoint: checkpoint + 1 };
      if (ctx.server) await ctx.server.setLearner(learner, checkpoint + 1, nextDir);
      return result;
    });
  }
}

/** The step's items (inline and in stored parts) and their trajectories. */
async function readTrajectories(store: ArtifactStore, input: LearnerStepInput): Promise<{ items: LearnerItem[]; trajs: Trajectory[] }> {
  const items = [...input.items];
  for (const part of input.itemParts ?? []) {
    const stored = await store.getJson<LearnerItem[]>(part);
    if (!stored) throw new Error(`learner items ${part} are missing from ${store.url}`);
    items.push(...stored);
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
function trainHyper(config: TrainingConfig, episodes: number) {
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
 * learnerStep on the FSDP engine: the packed batch goes into the store (runs/<id>/iter-<n>/train-batch.safetensors),
 * the process group steps on it (a heartbeat per micro-batch) and writes checkpoint n+1 into the store's temp
 * directory, renamed when complete. A dead or hung rank fails the attempt; the retry starts a new group
 * from checkpoint n, so n+1 is still written once.
 */
async function fsdpLearnerStep(ctx: LearnerContext, store: ArtifactStore, input: LearnerStepInput, config: TrainingConfig): Promise<LearnerStepResult> {
  const { FsdpInputError, writeTrainBatch } = await import('../gpu-learner/fsdp/index.ts');
  const { runId, n, checkpoint } = input;
  const dir = store.dirFor(keys.checkpoint(runId, checkpoint));
  const nextKey = keys.checkpoint(runId, checkpoint + 1);
  const { items, trajs } = await readTrajectories(store, input);
  const batch = buildTrainBatch(trajs, items.map((it) => it.advantage), { compactFilter: true, dropZeroAdvantage: true });
  const batchKey = `${keys.iteration(runId, n)}/train-batch.safetensors`;
  try {
    return await ctx.exclusive(async () => {
      let details: Record<string, unknown> = { n, engine: 'fsdp', phase: 'starting' };
      return withHeartbeat(details, async () => {
        const trainer = await ctx.ensureTrainer(dir, config.learner);
        const started = Date.now();
        let step = { loss: 0, gradNorm: 0, clipFraction: 0, meanRatio: 0, tokens: 0, seconds: 0, skipped: true };
        if (batch.kept.length > 0) {
          const path = store.dirFor(batchKey);
          writeTrainBatch(path, batch);
          step = await trainer.trainStep(path, trainHyper(config, batch.episodes), (p) => {
            details = { n, engine: 'fsdp', sequences: batch.kept.length, ...p };
            heartbeat(details);
          });
        }
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
        };
        heartbeat({ n, engine: 'fsdp', saving: checkpoint + 1 });
        await store.putDir(nextKey, async (tmp) => {
          await trainer.save(tmp, dir, (p) => heartbeat({ n, engine: 'fsdp', saving: checkpoint + 1, ...p }));
          for (const f of CARRIED_FILES) {
            if (existsSync(join(dir, f)) && !existsSync(join(tmp, f))) await copyFile(join(dir, f), join(tmp, f));
          }
          await writeFile(`${tmp}/stats.json`, JSON.stringify(result));
        });
        trainer.loaded = store.dirFor(nextKey);
        learnerStepSeconds.observe({ run_id: runId }, (Date.now() - started) / 1000);
        const bytes = await directoryBytes(store.dirFor(nextKey));
        checkpointBytes.set({ run_id: runId }, bytes);
        checkpointBytesWritten.inc({ run_id: runId }, bytes);
        return result;
      });
    });
  } catch (e) {
    if (e instanceof FsdpInputError) throw invalid((e as Error).message);
    throw e;
  }
}
