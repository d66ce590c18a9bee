// The rollout activity (rollout queue): one episode of one task with the policy serving checkpoint n,
// recorded token-exactly into the artifact store. Idempotent: a stored trajectory is returned as is.
import { ApplicationFailure, Context, heartbeat } from '@temporalio/activity';
import { KEEP_FLAGGED_PER_ITERATION, validateConfig, type TrainingConfig } from '../lib/config.ts';
import { frozenLakeFromTaskId } from '../lib/envs/frozenlake.ts';
import { rolloutSeed } from '../lib/seed.ts';
import { runEpisode, tokenTransport, type EpisodeCommon, type EpisodePolicy, type EpisodeTokenizer, type TokenTransportOptions } from '../lib/episode.ts';
import { createPolicyClient } from '../lib/policy/completions.ts';
import { effectiveContextWindow, listServerModels } from '../lib/policy/preflight.ts';
import { PolicyUnavailableError } from '../lib/policy/http.ts';
import { servesCheckpoint } from '../lib/policy/weight-sync.ts';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { keys, listCheckpoints, openStore, type ArtifactStore } from '../lib/store.ts';
import { contextFitError } from '../lib/episode-rules.ts';
import { loadTokenizer } from '../lib/tokenizer.ts';
import type { ChatMessage, RolloutSummary, Trajectory } from '../lib/types.ts';
import type { RolloutInput } from '../lib/training/shapes.ts';
import { rolloutSeconds, rolloutsFinished, rolloutsInFlight } from '../lib/metrics.ts';
import { FailureType, nonRetryable, retryable } from '../lib/failures.ts';
import { integrityKeys } from '../lib/swe/integrity.ts';
import type { IntegrityFinding } from '../lib/swe/grading.ts';
import { recordIntegrity } from './integrity.ts';

/** What an environment contributes to one episode: the world and its loop options. */
export interface EpisodeSetup {
  env: EpisodeCommon['env'];
  loop: Partial<Pick<EpisodeCommon, 'maxSteps' | 'stepsRemainingSuffix' | 'tokenWarningAt' | 'tokenWarning'> & Pick<TokenTransportOptions, 'allowedActionTokens'>>;
}

/** What the rollout hands an environment besides its config: the policy's tokenizer as a counter (edit mode's context budget). */
export interface EnvironmentHelpers {
  countTokens?: (text: string) => number;
}

/** `labels`: the episode's owner labels for any sandbox it starts (`swerl.run`, `swerl.iteration`, `swerl.sample`). */
export type EnvironmentFactory = (config: TrainingConfig, taskId: string, seed: number, labels: Record<string, string>, helpers?: EnvironmentHelpers) => Promise<EpisodeSetup>;

/** An attempt of a rollout that failed for infrastructure reasons, as its trajectory lists it once one succeeds. */
export interface FailedAttempt {
  attempt: number;
  error: string;
  at: string;
}

/** The failed attempts recorded for one rollout so far, oldest first. */
export async function failedAttempts(store: ArtifactStore, runId: string, n: number, taskId: string, sample: number): Promise<FailedAttempt[]> {
  const ks = await store.list(keys.rolloutFailures(runId, n, taskId, sample)).catch(() => [] as string[]);
  const all = await Promise.all(ks.map((k) => store.getJson<FailedAttempt>(k).catch(() => null)));
  return all.filter((f): f is FailedAttempt => f !== null).sort((a, b) => a.attempt - b.attempt);
}

/**
 * Environment factories keyed by `config.env.kind`: the switch point for new environments.
 * The SWE environment registers itself with `registerEnvironment('swe', factory)`.
 */
const factories = new Map<string, EnvironmentFactory>([
  [
    'frozenlake',
    async (config, taskId, seed) => {
      if (config.env.kind !== 'frozenlake') throw new Error('unreachable');
      const { kind: _kind, ...flConfig } = config.env;
      const env = frozenLakeFromTaskId(taskId, flConfig, seed);
      // one action token per turn: a policy trained from random weights can find the format
      return { env, loop: { maxSteps: flConfig.maxSteps, allowedActionTokens: true } };
    },
  ],
]);

/** The first messages of an episode of one of `taskIds` whose prompt is likely the shortest (for the context check). */
export type FirstPromptOf = (config: TrainingConfig, taskIds: readonly string[]) => Promise<{ taskId: string; messages: ChatMessage[] }>;

const firstPrompts = new Map<string, FirstPromptOf>([
  [
    'frozenlake',
    async (config, taskIds) => {
      if (config.env.kind !== 'frozenlake') throw new Error('unreachable');
      const { kind: _kind, ...flConfig } = config.env;
      return { taskId: taskIds[0]!, messages: await frozenLakeFromTaskId(taskIds[0]!, flConfig).reset() };
    },
  ],
]);

export function registerEnvironment(kind: string, factory: EnvironmentFactory, firstPrompt?: FirstPromptOf): void {
  factories.set(kind, factory);
  if (firstPrompt) firstPrompts.set(kind, firstPrompt);
}

const fitChecked = new Set<string>();
/**
 * Before an iteration's rollouts: a context window that cannot hold the first turn of the batch's shortest task
 * is a config error (non-retryable, `InvalidConfig`), not a batch of episodes that all end at once. Checked once per
 * run, checkpoint directory and batch; an external server that does not answer is left to the policy sync to report.
 */
export async function checkContextFits(config: TrainingConfig, runId: string, taskIds: readonly string[]): Promise<void> {
  const firstPrompt = firstPrompts.get(config.env.kind);
  if (!firstPrompt || taskIds.length === 0) return;
  const store = openStore(config.store.url);
  const latest = (await listCheckpoints(store, runId)).at(-1);
  if (latest === undefined) return;
  const dir = store.dirFor(keys.checkpoint(runId, latest));
  const k = `${store.url}|${dir}|${config.policy.baseUrl ?? ''}|${config.policy.contextWindow ?? ''}|${taskIds.join(',')}`;
  if (fitChecked.has(k)) return;
  let window: number | null;
  let source: string;
  if (config.policy.baseUrl) {
    let served: number | null;
    try {
      served = (await listServerModels({ baseUrl: config.policy.baseUrl, model: config.policy.model, retries: 1, timeoutMs: 30_000 })).contextWindow;
    } catch {
      return;
    }
    window = effectiveContextWindow(served, config.policy.contextWindow);
    source = window === served ? `GET /v1/models of ${config.policy.baseUrl}` : 'config.policy.contextWindow';
  } else {
    window = await modelContextWindow(dir);
    source = `max_position_embeddings of checkpoint ${latest}`;
  }
  if (window === null) return;
  const { taskId, messages } = await firstPrompt(config, taskIds);
  const tok = await tokenizerFor(dir);
  const prompt = tok.encode(tok.applyChatTemplate(messages, { addGenerationPrompt: true })).length;
  const why = contextFitError(window, prompt, `the first prompt of task ${taskId}`);
  if (why) throw nonRetryable(FailureType.InvalidConfig, `config.model: ${why} (context from ${source})`);
  fitChecked.add(k);
}

/** The factory registered for `kind` (a test wraps the real one to inject faults). */
export function environmentFactory(kind: string): EnvironmentFactory | undefined {
  return factories.get(kind);
}

const tokenizers = new Map<string, Promise<EpisodeTokenizer>>();
function tokenizerFor(dir: string): Promise<EpisodeTokenizer> {
  let t = tokenizers.get(dir);
  if (!t) {
    t = loadTokenizer(dir);
    t.catch(() => tokenizers.delete(dir));
    tokenizers.set(dir, t);
  }
  return t;
}

/** A model directory's context window: its config.json's max_position_embeddings (null when absent). */
export async function modelContextWindow(dir: string): Promise<number | null> {
  const text = await readFile(join(dir, 'config.json'), 'utf8').catch(() => null);
  const n = text === null ? undefined : (JSON.parse(text) as { max_position_embeddings?: unknown }).max_position_embeddings;
  return typeof n === 'number' && Number.isInteger(n) && n > 0 ? n : null;
}

const serverWindows = new Map<string, Promise<number | null>>();
/**
 * The context window a rollout's turns must fit (DESIGN §9): our server serves the checkpoint, so its
 * max_position_embeddings; an external server's GET /v1/models or config.policy.contextWindow (the smaller).
 * Asked once per server and model; null when nobody says (turns are then not clamped).
 */
async function rolloutContextWindow(config: TrainingConfig, ckptDir: string, policyUrl: string): Promise<number | null> {
  if (!config.policy.baseUrl) return modelContextWindow(ckptDir);
  const k = `${policyUrl}|${config.policy.model}`;
  let w = serverWindows.get(k);
  if (!w) {
    w = listServerModels({ baseUrl: policyUrl, model: config.policy.model, retries: 1, timeoutMs: 30_000 }).then((m) => m.contextWindow);
    w.catch(() => serverWindows.delete(k));
    serverWindows.set(k, w);
  }
  return effectiveContextWindow(await w.catch(() => null), config.policy.contextWindow);
}

const configs = new Map<string, TrainingConfig>();
async function iterationConfig(store: ArtifactStore, runId: string, n: number): Promise<TrainingConfig> {
  const key = keys.iterationConfig(runId, n);
  const cached = configs.get(`${store.url}|${key}`);
  if (cached) return cached;
  const raw = await store.getJson<unknown>(key);
  if (raw === null) throw new Error(`iteration config ${key} not found in ${store.url}`);
  const v = validateConfig(raw, { recorded: true });
  if (!v.ok) throw nonRetryable(FailureType.InvalidConfig, v.errors.join('; '));
  configs.set(`${store.url}|${key}`, v.config);
  return v.config;
}

/**
 * The policy server is gone (e.g. its learner worker restarted on another port): fail fast with type
 * `PolicyUnavailable`, which the workflow does not retry in place but answers with a new syncPolicy.
 */
async function unavailableAsFailure<T>(url: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof PolicyUnavailableError) {
      throw retryable(FailureType.PolicyUnavailable, `policy server ${url}: ${e.message}`);
    }
    throw e;
  }
}

export function summaryOf(key: string, t: Trajectory): RolloutSummary {
  return {
    key,
    taskId: t.taskId,
    sample: t.sample,
    reward: t.reward,
    end: t.end,
    steps: t.steps,
    tokens: t.ids.length,
    responseTokens: t.mask.reduce((a, b) => a + b, 0),
    seconds: t.seconds,
    // an episode the tests graded (its reward says which grader gave it): its integrity verdicts
    ...(t.info?.graderVersion !== undefined ? { integrity: integrityKeys(t.info.integrity as IntegrityFinding[] | undefined) } : {}),
  };
}

/**
 * A streaming episode's policy (DESIGN §10): before each turn, the newest complete checkpoint of the run from
 * `first` up to `newest` (the store lists a checkpoint once it is whole), each turn pinned to its directory on our
 * server (which holds the versions in use), and the version reported with the turn's tokens.
 */
function streamingPolicy(store: ArtifactStore, runId: string, first: number, newest: number, client: (dir: string, checkpoint: number) => EpisodePolicy): EpisodePolicy {
  let current = first;
  const clients = new Map<number, EpisodePolicy>();
  return {
    async complete(req) {
      const ready = (await listCheckpoints(store, runId)).filter((c) => c > current && c <= newest);
      if (ready.length) current = ready.at(-1)!;
      let c = clients.get(current);
      if (!c) clients.set(current, (c = client(store.dirFor(keys.checkpoint(runId, current)), current)));
      return { ...(await c.complete(req)), version: current };
    },
  };
}

/**
 * The rollout's policy client, pinned to its checkpoint (or, streaming, to the newest one), once the server serves
 * that checkpoint: after a learner restart the server may serve another, and it is made to serve ours.
 */
async function rolloutPolicy(config: TrainingConfig, store: ArtifactStore, input: RolloutInput, ckptDir: string): Promise<EpisodePolicy> {
  const { runId, checkpoint, policyUrl, streaming } = input;
  // our own server (policy.baseUrl unset) speaks the SGLang endpoint whatever policy.weightSync says
  const weightSync = config.policy.baseUrl ? config.policy.weightSync : 'sglang';
  // our server may be shared (another run, an evaluation): pin every completion to this run's checkpoint
  const pin = config.policy.baseUrl ? {} : { pin: { dir: ckptDir, checkpoint } };
  const timeoutMs = config.policy.requestTimeoutSeconds * 1000;
  const pinned = createPolicyClient({ baseUrl: policyUrl, model: config.policy.model, weightSync, timeoutMs, ...pin });
  const policy = streaming
    ? streamingPolicy(store, runId, checkpoint, streaming.newest, (dir, c) =>
        createPolicyClient({ baseUrl: policyUrl, model: config.policy.model, weightSync, timeoutMs, pin: { dir, checkpoint: c } }),
      )
    : pinned;
  // one probe, no retries: a server that is gone (restarted on another port) is answered at once by the workflow's resync
  const probe = createPolicyClient({ baseUrl: policyUrl, model: config.policy.model, weightSync, retries: 0, timeoutMs: 30_000 });
  await unavailableAsFailure(policyUrl, async () => {
    if (servesCheckpoint(await probe.servedModel(), ckptDir, checkpoint)) return;
    // vLLM: only the learner's syncPolicy reloads it, verified by the probe (DESIGN §9); the workflow answers this with one
    if (weightSync === 'vllm') throw new PolicyUnavailableError(`vLLM does not serve checkpoint ${checkpoint} (${ckptDir}): a verified sync is needed`);
    await pinned.loadWeights(ckptDir, checkpoint);
  });
  return policy;
}

export async function rollout(input: RolloutInput): Promise<RolloutSummary> {
  const { storeUrl, runId, n, taskId, sample, checkpoint, policyUrl } = input;
  const store = openStore(storeUrl);
  const key = keys.trajectory(runId, n, taskId, sample);
  const stored = await store.getJson<Trajectory>(key);
  if (stored) return summaryOf(key, stored);

  const config = await iterationConfig(store, runId, n);
  const factory = factories.get(config.env.kind);
  if (!factory) {
    throw nonRetryable(FailureType.InvalidConfig, `config.env.kind: no environment registered for ${JSON.stringify(config.env.kind)}`);
  }
  const ckptDir = store.dirFor(keys.checkpoint(runId, checkpoint));
  const policy = await rolloutPolicy(config, store, input, ckptDir);

  const tokenizer = await tokenizerFor(ckptDir);
  const contextWindow = await rolloutContextWindow(config, ckptDir, policyUrl);
  const seed = rolloutSeed(config.seed, n, taskId, sample);
  const { attempt } = Context.current().info;
  const labels = { 'swerl.run': runId, 'swerl.iteration': String(n), 'swerl.sample': String(sample) };
  const started = Date.now();
  const cancelled = Context.current().cancellationSignal;
  rolloutsInFlight.inc({ run_id: runId });
  const beat = setInterval(() => heartbeat({ step: -1 }), Math.max(1000, (config.rollout.heartbeatSeconds * 1000) / 2));
  let env: EpisodeSetup['env'] | undefined;
  try {
    const setup = await factory(config, taskId, seed, labels, { countTokens: (text) => tokenizer.encode(text).length });
    env = setup.env;
    const { loop } = setup;
    const result = await unavailableAsFailure(policyUrl, () =>
      runEpisode({
        env: setup.env,
        transport: tokenTransport({ policy, tokenizer, allowedActionTokens: loop.allowedActionTokens }),
        maxSteps: loop.maxSteps ?? config.episode.maxSteps,
        responseBudget: config.episode.responseBudget,
        maxTokensPerTurn: config.episode.maxTokensPerTurn,
        ...(contextWindow !== null ? { contextWindow } : {}),
        sampling: { temperature: config.episode.temperature, topP: config.episode.topP },
        seed,
        stepsRemainingSuffix: loop.stepsRemainingSuffix,
        tokenWarningAt: loop.tokenWarningAt,
        tokenWarning: loop.tokenWarning,
        deadlineMs: started + config.episode.timeoutMinutes * 60_000,
        onStep: (e) => {
          if (cancelled.aborted) throw new Error('rollout cancelled');
          heartbeat({ step: e.step, responseTokens: e.responseTokens });
        },
      }),
    );
    const failed = attempt > 1 ? await failedAttempts(store, runId, n, taskId, sample) : [];
    const trajectory: Trajectory = {
      runId,
      iteration: n,
      taskId,
      sample,
      // a streaming episode's first turn may already be on a checkpoint newer than the one it was admitted on
      checkpoint: result.versions?.[result.promptLength] ?? checkpoint,
      ids: result.ids,
      mask: result.mask,
      logprobs: result.logprobs,
      ...(result.versions ? { versions: result.versions } : {}),
      promptLength: result.promptLength,
      reward: result.reward,
      end: result.end,
      steps: result.steps,
      // the earlier attempts' infrastructure failures stay on the record of the episode that counted
      info: { ...result.info, attempt, ...(failed.length ? { failedAttempts: failed } : {}) },
      seconds: (Date.now() - started) / 1000,
    };
    await store.putJson(key, trajectory);
    await recordIntegrity({ store, trajectory, reviewFiles: env.reviewFiles?.(), keepPerIteration: config.integrity?.keepPerIteration ?? KEEP_FLAGGED_PER_ITERATION });
    rolloutsFinished.inc({ run_id: runId, end_reason: trajectory.end });
    rolloutSeconds.observe({ end_reason: trajectory.end }, trajectory.seconds);
    return summaryOf(key, trajectory);
  } catch (e) {
    const final = e instanceof ApplicationFailure && e.nonRetryable;
    if (!final && !cancelled.aborted) {
      const record: FailedAttempt = { attempt, error: `${(e as Error)?.name ?? 'Error'}: ${(e as Error)?.message ?? String(e)}`.slice(0, 2000), at: new Date().toISOString() };
      await store.putJson(`${keys.rolloutFailures(runId, n, taskId, sample)}/${attempt}.json`, record).catch(() => undefined);
    }
    throw e;
  } finally {
    rolloutsInFlight.dec({ run_id: runId });
    clearInterval(beat);
    await env?.close().catch((e: unknown) => console.warn(`[rollout] closing the environment of ${taskId}/${sample}: ${(e as Error)?.message ?? String(e)}`));
  }
}
