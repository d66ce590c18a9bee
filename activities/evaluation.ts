// Evaluation activities (rollout queue, DESIGN §1 evaluationRun): the plan, one stored episode per
// (evaluation, task, run) through the training episode loop (or its chat-completions mode), the error
// record of an episode that could not happen, and the report. Idempotent: a stored episode is returned.
import { ApplicationFailure, Context, heartbeat } from '@temporalio/activity';
import { isDeepStrictEqual } from 'node:util';
import { chatTransport, runEpisode, tokenTransport, toolResultFrame, type EpisodeStepEvent, type EpisodeTokenizer } from '../lib/episode.ts';
import { modelNameOf, validateEvalConfig, type EvalConfig } from '../lib/eval/config.ts';
import { evalKeys } from '../lib/eval/keys.ts';
import { evaluationMetrics, formatEvalErrors, formatEvalMetrics, repoOf, type EpisodeFacts } from '../lib/eval/metrics.ts';
import type { EvalReportSummary } from '../lib/eval/shapes.ts';
import { createChatClient, type ChatApiMessage } from '../lib/policy/chat.ts';
import { createPolicyClient } from '../lib/policy/completions.ts';
import { isContextOverflow, PolicyResponseError, PolicyUnavailableError, serverRoot } from '../lib/policy/http.ts';
import { preflightServer } from '../lib/policy/preflight.ts';
import { contextFitError } from '../lib/episode-rules.ts';
import { keys, listCheckpoints, openStore, type ArtifactStore } from '../lib/store.ts';
import { formatLoadError, loadTasks, type SweTask } from '../lib/swe/task.ts';
import { SWE_TOOL_ALIASES, SWE_TOOL_SCHEMAS } from '../lib/swe/tools.ts';
import { SWE_OPENAI_TOOLS, SYSTEM_PROMPT_TOOL_CALLS } from '../lib/swe/tool-definitions.ts';
import { instancePrompt, noToolCallReminder, SYSTEM_PROMPT, tokenBudgetWarning } from '../lib/swe/prompts.ts';
import { GRADER_VERSION, type GradeResult, type IntegrityFinding } from '../lib/swe/grading.ts';
import { countIntegrity, formatIntegrity, hackRate, integrityKeys, type IntegrityCounts } from '../lib/swe/integrity.ts';
import { countGraded } from './integrity.ts';
import { DEFAULT_MIN_STRENGTH, isStrong, parseQualityLines, recordQuality, type TaskQuality } from '../lib/swe/quality.ts';
import { instanceReport, modelDirName, reportJson, runSummary, type InstanceReport, type RunSummary } from '../lib/swe/report.ts';
import { autoToolFormat, loadTokenizer, type Tokenizer } from '../lib/tokenizer.ts';
import type { ChatMessage, EndReason } from '../lib/types.ts';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createSweEditEnvironment, createSweEnvironment, type SweEnvironment } from './swe-env.ts';
import type { SweEditEnvironment } from './swe-edit-env.ts';
import { evalEpisodeSeed } from '../lib/seed.ts';
import { curvePlotFiles } from '../lib/plot.ts';
import { FailureType, nonRetryable, retryable } from '../lib/failures.ts';

/** What the plan fixes once: the tasks, runs, repositories and the resolved model. */
export interface EvalPlan {
  evalId: string;
  taskIds: string[];
  repos: Record<string, string>;
  runs: number;
  modelName: string;
  /** the run checkpoint evaluated (run models), else null */
  checkpoint: number | null;
  /** store key of the served model directory (run and path models), else null */
  modelDir: string | null;
  loadErrors: string[];
  /** the context window every turn must fit (DESIGN §9), and where it comes from; absent in plans made before it was checked */
  contextWindow?: number | null;
  contextSource?: string;
  /** the tool format the episodes use (`auto` resolved) and why; absent in plans made before it was recorded */
  toolFormat?: 'text' | 'openai';
  toolFormatSource?: string;
}

/** One finished episode (stored at evalKeys.episode; never written twice). */
export interface EvalEpisodeRecord {
  evalId: string;
  taskId: string;
  run: number;
  seed: number;
  modelName: string;
  checkpoint: number | null;
  end: EndReason;
  resolved: boolean;
  reward: number;
  /** the working tree's diff when the episode ended */
  patch: string;
  /** the patch that was graded (the prediction): the diff of a submitted episode, else '' */
  prediction: string;
  /** grading details from the environment (reason, per-test statuses, grader version, …) */
  grade: Record<string, unknown>;
  steps: number;
  tokens: number;
  responseTokens: number;
  seconds: number;
  /** the trajectory as text: each assistant turn and the observation it got */
  turns: { action: string; observation: string }[];
  /** token mode: the ChatML token stream (sampled ids and log-probs as generated) */
  stream?: { ids: number[]; mask: number[]; logprobs: number[]; promptLength: number };
  /** chat mode: the conversation as sent to the server */
  messages?: ChatApiMessage[];
  api: 'completions' | 'chat';
  finishedAt: string;
}

/** What crosses workflow history per episode. */
export interface EvalEpisodeSummary {
  taskId: string;
  run: number;
  resolved: boolean;
  end: EndReason;
  steps: number;
  seconds: number;
  /** true when this call found the episode already stored */
  stored: boolean;
}

export interface EvalErrorRecord {
  taskId: string;
  run: number;
  reason: string;
  at: string;
}

export interface PrepareEvaluationInput {
  evalId: string;
  config: unknown;
}

function invalid(message: string, type: FailureType = FailureType.InvalidConfig): ApplicationFailure {
  return nonRetryable(type, message);
}

const configs = new Map<string, EvalConfig>();
export async function storedEvalConfig(store: ArtifactStore, evalId: string): Promise<EvalConfig> {
  const k = `${store.url}|${evalId}`;
  const cached = configs.get(k);
  if (cached) return cached;
  const raw = await store.getJson<unknown>(evalKeys.config(evalId));
  if (raw === null) throw new Error(`evaluation config ${evalKeys.config(evalId)} not found in ${store.url}`);
  const v = validateEvalConfig(raw, { recorded: true });
  if (!v.ok) throw invalid(v.errors.join('; '));
  configs.set(k, v.config);
  return v.config;
}

export async function storedPlan(store: ArtifactStore, evalId: string): Promise<EvalPlan> {
  const plan = await store.getJson<EvalPlan>(evalKeys.plan(evalId));
  if (!plan) throw invalid(`evalId: no evaluation ${JSON.stringify(evalId)} in ${store.url} (no ${evalKeys.plan(evalId)})`);
  return plan;
}

/**
 * Stores the config and fixes the plan: the task ids (the `tasks` subset, then `limit`), the repositories,
 * the checkpoint behind "latest". An evaluation id already used with another config is refused by name;
 * the same config again returns the stored plan (a resumed or restarted evaluation).
 */
export async function prepareEvaluation(input: PrepareEvaluationInput): Promise<EvalPlan> {
  const v = validateEvalConfig(input.config, { recorded: true });
  if (!v.ok) throw invalid(`invalid evaluation config: ${v.errors.join('; ')}`);
  const config = v.config;
  const store = openStore(config.store.url);
  const evalId = input.evalId;
  const existing = await store.getJson<unknown>(evalKeys.config(evalId));
  // compared as parsed today, so a config stored before a default changed still matches itself
  const before = existing === null ? null : validateEvalConfig(existing, { recorded: true });
  if (before !== null && (!before.ok || !isDeepStrictEqual(before.config, config))) {
    throw invalid(`config.evalId: evaluation ${JSON.stringify(evalId)} already exists in ${store.url} with a different config; pick another evalId`);
  }
  const planned = await store.getJson<EvalPlan>(evalKeys.plan(evalId));
  if (existing !== null && planned) {
    // a resumed evaluation: its server must answer before episodes are handed out again
    if ('baseUrl' in config.model) await checkServer(config.model);
    return planned;
  }

  let loaded;
  try {
    loaded = await loadTasks(config.tasksFile);
  } catch (e) {
    throw invalid(`config.tasksFile: cannot load ${JSON.stringify(config.tasksFile)}: ${(e as Error).message}`);
  }
  const byId = new Map(loaded.tasks.map((t) => [t.instance_id, t]));
  let ids = loaded.tasks.map((t) => t.instance_id);
  if (config.tasks) {
    const missing = config.tasks.filter((id) => !byId.has(id));
    if (missing.length)
      throw invalid(
        `config.tasks: ${missing
          .slice(0, 5)
          .map((x) => JSON.stringify(x))
          .join(', ')} not valid tasks of ${config.tasksFile}`,
      );
    ids = [...config.tasks];
  }
  if (config.limit !== undefined) ids = ids.slice(0, config.limit);
  if (ids.length === 0)
    throw invalid(
      `config.tasksFile: no valid task in ${JSON.stringify(config.tasksFile)}${loaded.errors.length ? ` (${loaded.errors.slice(0, 3).map(formatLoadError).join('; ')})` : ''}`,
    );

  let checkpoint: number | null = null;
  let modelDir: string | null = null;
  const m = config.model;
  if ('run' in m) {
    const cks = await listCheckpoints(store, m.run);
    if (m.checkpoint === 'latest') {
      if (!cks.length) throw invalid(`config.model.run: run ${JSON.stringify(m.run)} has no complete checkpoint in ${store.url}`);
      checkpoint = cks.at(-1)!;
    } else {
      if (!cks.includes(m.checkpoint))
        throw invalid(`config.model.checkpoint: run ${JSON.stringify(m.run)} has no checkpoint ${m.checkpoint} in ${store.url} (has ${cks.join(', ') || 'none'})`);
      checkpoint = m.checkpoint;
    }
    modelDir = keys.checkpoint(m.run, checkpoint);
  }
  const modelName = config.modelName ?? ('run' in m ? `swerl/${m.run}/ckpt-${checkpoint}` : modelNameOf(config));
  const tools = await resolveToolFormat(config, modelDir ? store.dirFor(modelDir) : null);
  const context = await checkContext(
    config,
    modelDir ? store.dirFor(modelDir) : null,
    ids.map((id) => byId.get(id)!),
    tools.format,
  );
  const plan: EvalPlan = {
    evalId,
    taskIds: ids,
    repos: Object.fromEntries(ids.map((id) => [id, byId.get(id)!.repo ?? repoOf(id)])),
    runs: config.runs,
    modelName,
    checkpoint,
    modelDir,
    loadErrors: loaded.errors.slice(0, 20).map(formatLoadError),
    contextWindow: context.window,
    contextSource: context.source,
    toolFormat: tools.format,
    toolFormatSource: tools.source,
  };
  await store.putJson(evalKeys.config(evalId), config);
  await store.putJson(evalKeys.plan(evalId), plan);
  return plan;
}

type ServerModel = Extract<EvalConfig['model'], { baseUrl: string }>;

/** Client options of a `baseUrl` model (its API key from the named environment variable). */
function serverClientOptions(m: ServerModel, timeoutMs = 600_000) {
  const apiKey = m.apiKeyEnv ? process.env[m.apiKeyEnv] : undefined;
  return { baseUrl: m.baseUrl, model: m.model, timeoutMs, ...(apiKey ? { apiKey } : {}) };
}

/**
 * Before the first episode: the server answers and serves the model, else the evaluation fails at once
 * with what to fix (not episode by episode). Returns the context window it reports, with the config's.
 */
async function checkServer(m: ServerModel): Promise<{ contextWindow: number | null; serverContextWindow: number | null }> {
  try {
    return await preflightServer(serverClientOptions(m, 30_000), m.api, m.contextWindow);
  } catch (e) {
    if (e instanceof PolicyUnavailableError) {
      throw nonRetryable(
        FailureType.PolicyUnavailable,
        `config.model.baseUrl: the server at ${serverRoot(m.baseUrl)} does not answer (${e.message}); start it, or correct baseUrl`,
      );
    }
    if (e instanceof PolicyResponseError) throw invalid(`config.model: ${e.message}`);
    throw e;
  }
}

type ToolFormat = 'text' | 'openai';

/** The model directory whose tokenizer the episodes use (token mode), or that decides `auto` (chat mode). */
function tokenizerDir(m: EvalConfig['model'], runModelDir: string | null): string | undefined {
  return 'baseUrl' in m ? m.tokenizer : 'path' in m ? m.path : (runModelDir ?? undefined);
}

/**
 * The tool format of the evaluation: as configured, or for `auto` what the model's chat template supports
 * (lib/tokenizer.ts autoToolFormat); token mode with `openai` needs a template that renders tool results too.
 */
async function resolveToolFormat(config: EvalConfig, runModelDir: string | null): Promise<{ format: ToolFormat; source: string }> {
  const m = config.model;
  const dir = tokenizerDir(m, runModelDir);
  const tokenMode = !('baseUrl' in m) || m.api === 'completions';
  let format: ToolFormat;
  let source = 'config.model.toolFormat';
  if (m.toolFormat === 'auto') {
    let tok: Tokenizer;
    try {
      tok = await loadTokenizer(dir!);
    } catch (e) {
      throw invalid(`config.model.toolFormat: "auto" reads the chat template of ${JSON.stringify(dir)}: ${(e as Error).message}`);
    }
    format = autoToolFormat(tok.chatTemplate);
    source =
      format === 'openai'
        ? `auto: the chat template of ${dir} renders the tools and <tool_call> calls`
        : `auto: the chat template of ${dir} renders no tools (or calls swerl cannot parse), so swerl's <function=…> text format`;
  } else format = m.toolFormat;
  if (format === 'openai' && tokenMode) {
    try {
      toolResultFrame(await loadTokenizer(dir!), SWE_OPENAI_TOOLS);
    } catch (e) {
      throw invalid(`config.model.toolFormat: "openai" on a token-id server renders tool results with the chat template of ${dir}: ${(e as Error).message}`);
    }
  }
  return { format, source };
}

/** The first messages of a task's episode as the model gets them (the tool format's system prompt, the task's prompt). */
function firstMessages(task: SweTask, format: ToolFormat): ChatMessage[] {
  return [
    { role: 'system', content: format === 'openai' ? SYSTEM_PROMPT_TOOL_CALLS : SYSTEM_PROMPT },
    { role: 'user', content: instancePrompt({ problemStatement: task.problem_statement }) },
  ];
}

/**
 * The context window every turn must fit (DESIGN §9): the server's (GET /v1/models) or the config's for a
 * `baseUrl` model, the model's max_position_embeddings for ours. A window that cannot hold the shortest
 * task's first turn is a config error before any episode; one nobody states is one for a server model.
 */
async function checkContext(config: EvalConfig, runModelDir: string | null, tasks: readonly SweTask[], format: ToolFormat): Promise<{ window: number | null; source: string }> {
  const m = config.model;
  let window: number | null;
  let source: string;
  if ('baseUrl' in m) {
    const s = await checkServer(m);
    if (s.contextWindow === null) {
      throw invalid(
        `config.model.contextWindow: the server at ${serverRoot(m.baseUrl)} does not report its context window (GET /v1/models has no max_model_len or meta.n_ctx for ${JSON.stringify(m.model)}): set it to the model's context in tokens`,
      );
    }
    window = s.contextWindow;
    source = s.serverContextWindow === window ? `GET ${serverRoot(m.baseUrl)}/v1/models` : 'config.model.contextWindow';
  } else {
    const dir = 'path' in m ? m.path : runModelDir!;
    const cfg = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8').catch(() => '{}')) as { max_position_embeddings?: unknown };
    window = typeof cfg.max_position_embeddings === 'number' ? cfg.max_position_embeddings : null;
    source = `max_position_embeddings of ${join(dir, 'config.json')}`;
  }
  if (window === null || tasks.length === 0) return { window, source };
  const shortest = tasks.reduce((a, b) => (b.problem_statement.length < a.problem_statement.length ? b : a));
  const messages = config.mode === 'edit' ? await editFirstMessages(config, shortest.instance_id) : firstMessages(shortest, format);
  let prompt: number | 'overflow' | null;
  if ('baseUrl' in m && m.api === 'chat') {
    // only the server knows its chat template: it counts the prompt of a 1-token request
    try {
      const r = await createChatClient(serverClientOptions(m, 120_000)).chat({
        messages,
        ...(format === 'openai' ? { tools: SWE_OPENAI_TOOLS } : {}),
        maxTokens: 1,
        temperature: 0,
        topP: 1,
      });
      prompt = r.usageReported ? r.promptTokens : null;
    } catch (e) {
      if (!isContextOverflow(e)) throw e instanceof PolicyResponseError ? invalid(`config.model: the server refused a task's first prompt: ${e.message}`) : e;
      prompt = 'overflow';
    }
  } else {
    const dir = 'baseUrl' in m ? m.tokenizer! : 'path' in m ? m.path : runModelDir!;
    let tok: EpisodeTokenizer;
    try {
      tok = await tokenizerFor(dir);
    } catch (e) {
      throw invalid(`config.model: no tokenizer in ${JSON.stringify(dir)} to count the prompts with: ${(e as Error).message}`);
    }
    prompt = tok.encode(tok.applyChatTemplate(messages, { addGenerationPrompt: true, ...(format === 'openai' ? { tools: SWE_OPENAI_TOOLS } : {}) })).length;
  }
  const why = prompt === null ? null : contextFitError(window, prompt, `the first prompt of the shortest task (${shortest.instance_id})`);
  if (why) throw invalid(`config.model: ${why} (context from ${source})`);
  return { window, source };
}

/** The SWE environment fields of an evaluation's episodes (the grading limit and the env section as training's). */
function evalEnvConfig(config: EvalConfig) {
  return {
    tasksFile: config.tasksFile,
    mode: config.mode,
    reward: config.reward,
    edit: config.edit,
    maxSteps: config.maxSteps,
    episodeTimeoutS: Math.ceil(config.episodeTimeoutMinutes * 60),
    gradeTimeoutS: config.gradeTimeoutSeconds,
    ...config.env,
  };
}

/** An edit-mode task's first messages (its prompt holds the oracle files, read from the repository). */
async function editFirstMessages(config: EvalConfig, taskId: string): Promise<ChatMessage[]> {
  const env = await createSweEditEnvironment(taskId, evalEnvConfig(config));
  try {
    return await env.reset();
  } finally {
    await env.close();
  }
}

const tokenizers = new Map<string, Promise<EpisodeTokenizer>>();
function tokenizerFor(dir: string): Promise<EpisodeTokenizer> {
  let t = tokenizers.get(dir);
  if (!t) {
    t = loadTokenizer(dir) as Promise<EpisodeTokenizer>;
    t.catch(() => tokenizers.delete(dir));
    tokenizers.set(dir, t);
  }
  return t;
}

export interface EvalEpisodeInput {
  storeUrl: string;
  evalId: string;
  taskId: string;
  run: number;
  /** our policy server (run and path models); server models use their own baseUrl */
  policyUrl?: string;
}

const summaryOf = (r: EvalEpisodeRecord, stored: boolean): EvalEpisodeSummary => ({
  taskId: r.taskId,
  run: r.run,
  resolved: r.resolved,
  end: r.end,
  steps: r.steps,
  seconds: r.seconds,
  stored,
});

/**
 * One evaluation episode. An episode that could not happen (sandbox, Docker, grading, policy server)
 * throws and is retried; a policy server of ours that is gone fails with type `PolicyUnavailable` so the
 * workflow re-syncs it; a server that refuses the requests (4xx) fails non-retryably (`PolicyRejected`).
 * What the model does (garbage, max steps, time limit) is a result.
 */
/** The episode's environment: the edit environment (one turn, every valid edit graded by tests), or the agent's sandbox. */
async function evalEnvironment(
  config: EvalConfig,
  plan: EvalPlan,
  store: ArtifactStore,
  taskId: string,
  o: { deadlineMs: number; format: ToolFormat; chatApi: boolean },
): Promise<SweEnvironment | SweEditEnvironment> {
  if (config.mode === 'edit') {
    // the context budget counted by the model's tokenizer when we have it
    const dir = tokenizerDir(config.model, plan.modelDir ? store.dirFor(plan.modelDir) : null);
    const counter = dir ? await tokenizerFor(dir) : undefined;
    return createSweEditEnvironment(taskId, evalEnvConfig(config), { gradeAlways: true, ...(counter ? { countTokens: (t: string) => counter.encode(t).length } : {}) });
  }
  // token mode in the openai format: the model writes <tool_call> JSON, and is reminded of that format
  const callFormat = o.format === 'openai' && !o.chatApi ? { callFormat: 'tool_call' as const } : {};
  return createSweEnvironment(taskId, { ...evalEnvConfig(config), reward: 'tests' }, { deadlineMs: o.deadlineMs, ...callFormat });
}

export async function evalEpisode(input: EvalEpisodeInput): Promise<EvalEpisodeSummary> {
  const { evalId, taskId, run } = input;
  const store = openStore(input.storeUrl);
  const key = evalKeys.episode(evalId, taskId, run);
  const done = await store.getJson<EvalEpisodeRecord>(key);
  if (done) return summaryOf(done, true);

  const config = await storedEvalConfig(store, evalId);
  const plan = await storedPlan(store, evalId);
  const seed = evalEpisodeSeed(config.seed, taskId, run);
  const started = Date.now();
  const deadlineMs = started + config.episodeTimeoutMinutes * 60_000;
  const m = config.model;
  const ours = !('baseUrl' in m);
  const policyUrl = ours ? input.policyUrl : m.baseUrl;
  if (!policyUrl) throw invalid('policyUrl: missing for a run or path model (the workflow passes the synced server)');
  const clientOpts = 'baseUrl' in m ? serverClientOptions(m) : { baseUrl: policyUrl, model: 'policy', timeoutMs: 600_000 };
  // plans made before the format was recorded: chat servers as configured, token mode in the text format
  const format: ToolFormat = plan.toolFormat ?? ('baseUrl' in m && m.api === 'chat' && m.toolFormat === 'openai' ? 'openai' : 'text');
  const chatApi = 'baseUrl' in m && m.api === 'chat';

  const edit = config.mode === 'edit';
  const env = await evalEnvironment(config, plan, store, taskId, { deadlineMs, format, chatApi });
  const turns: EvalEpisodeRecord['turns'] = [];
  const cancelled = Context.current().cancellationSignal;
  const onStep = (e: EpisodeStepEvent) => {
    if (cancelled.aborted) throw new Error('evaluation episode cancelled');
    turns.push({ action: e.action, observation: e.observation });
    heartbeat({ step: e.step, responseTokens: e.responseTokens });
  };
  const beat = setInterval(() => heartbeat({ step: turns.length }), Math.max(1000, Math.min(10_000, (config.heartbeatTimeoutSeconds * 1000) / 3)));
  const loop = {
    env,
    // the tool-call format's own system prompt (the environment's describes `<function=…>` text)
    ...(format === 'openai' ? { systemPrompt: SYSTEM_PROMPT_TOOL_CALLS } : {}),
    // edit mode is one turn
    maxSteps: edit ? 1 : config.maxSteps,
    responseBudget: config.responseBudget,
    maxTokensPerTurn: config.maxTokensPerTurn,
    // plans made before the context rule existed have none: their episodes run as they did
    ...(typeof plan.contextWindow === 'number' ? { contextWindow: plan.contextWindow } : {}),
    sampling: config.sampling,
    seed,
    stepsRemainingSuffix: !edit,
    ...(edit ? {} : { tokenWarningAt: env.cfg.tokenWarningAt, tokenWarning: tokenBudgetWarning }),
    deadlineMs,
    onStep,
  };
  try {
    let record: Omit<EvalEpisodeRecord, 'seconds' | 'finishedAt'>;
    const base = { evalId, taskId, run, seed, modelName: plan.modelName, checkpoint: plan.checkpoint };
    try {
      if (chatApi) {
        const r = await runEpisode({
          ...loop,
          transport: chatTransport({
            chat: createChatClient(clientOpts),
            toolFormat: format,
            ...(format === 'openai' ? { tools: SWE_OPENAI_TOOLS, toolSchemas: SWE_TOOL_SCHEMAS, toolAliases: SWE_TOOL_ALIASES, noCallReminder: noToolCallReminder } : {}),
          }),
        });
        record = { ...base, ...outcome(r.end, r.reward, r.info), steps: r.steps, tokens: r.tokens, responseTokens: r.responseTokens, turns, messages: r.messages, api: 'chat' };
      } else {
        const dir = tokenizerDir(m, plan.modelDir ? store.dirFor(plan.modelDir) : null)!;
        const tokenizer = await tokenizerFor(dir);
        // our server may serve another model (after a learner restart, or shared with a training run or another
        // evaluation): every completion is pinned to ours, and a 409 makes the client load ours first
        const policy = createPolicyClient(ours ? { ...clientOpts, pin: { dir, checkpoint: plan.checkpoint ?? -1 } } : clientOpts);
        const r = await runEpisode({ ...loop, transport: tokenTransport({ policy, tokenizer, ...(format === 'openai' ? { tools: SWE_OPENAI_TOOLS } : {}) }) });
        record = {
          ...base,
          ...outcome(r.end, r.reward, r.info),
          steps: r.steps,
          tokens: r.ids.length,
          responseTokens: r.responseTokens,
          turns,
          stream: { ids: r.ids, mask: r.mask, logprobs: r.logprobs, promptLength: r.promptLength },
          api: 'completions',
        };
      }
    } catch (e) {
      if (e instanceof PolicyUnavailableError && ours) throw retryable(FailureType.PolicyUnavailable, `policy server ${policyUrl}: ${e.message}`);
      if (e instanceof PolicyResponseError) throw nonRetryable(FailureType.PolicyRejected, `policy server ${policyUrl} refused the episode's request: ${e.message}`);
      throw e;
    }
    const full: EvalEpisodeRecord = { ...record, seconds: (Date.now() - started) / 1000, finishedAt: new Date().toISOString() };
    // a concurrent attempt (a heartbeat timeout while this one still ran) may have stored it first: keep the first
    const again = await store.getJson<EvalEpisodeRecord>(key);
    if (again) return summaryOf(again, true);
    await store.putJson(key, full);
    countGraded(input.evalId, full.grade);
    return summaryOf(full, false);
  } finally {
    clearInterval(beat);
    await env.close();
  }
}

/** The episode's verdict from the environment's reward info: the graded patch is the prediction. */
function outcome(end: EndReason, reward: number, info: Record<string, unknown>): Pick<EvalEpisodeRecord, 'end' | 'resolved' | 'reward' | 'patch' | 'prediction' | 'grade'> {
  const { patch, instanceId: _i, end: _e, steps: _s, ...grade } = info as { patch?: string; instanceId?: string; end?: string; steps?: number } & Record<string, unknown>;
  // edit mode says whether the tests passed (its reward may be a similarity); agent mode's reward is the verdict
  if (grade.mode === 'edit') return { end, resolved: grade.resolved === true, reward, patch: patch ?? '', prediction: patch ?? '', grade };
  const graded = grade.reason !== 'not_submitted' && grade.reason !== 'no_sandbox';
  return { end, resolved: reward === 1, reward, patch: patch ?? '', prediction: graded ? (patch ?? '') : '', grade };
}

/** Records an episode that could not happen after its retries (never a model failure). */
export async function recordEvalError(input: { storeUrl: string; evalId: string; taskId: string; run: number; reason: string }): Promise<void> {
  const store = openStore(input.storeUrl);
  if (await store.exists(evalKeys.episode(input.evalId, input.taskId, input.run))) return;
  const rec: EvalErrorRecord = { taskId: input.taskId, run: input.run, reason: input.reason.slice(0, 2000), at: new Date().toISOString() };
  await store.putJson(evalKeys.error(input.evalId, input.taskId, input.run), rec);
}

/** Every stored episode record of an evaluation. */
export async function readEvalEpisodes(store: ArtifactStore, evalId: string): Promise<EvalEpisodeRecord[]> {
  const out: EvalEpisodeRecord[] = [];
  for (const k of await store.list(evalKeys.episodes(evalId))) {
    const r = await store.getJson<EvalEpisodeRecord>(k);
    if (r) out.push(r);
  }
  return out;
}

/** Error records of episodes that are not stored (an episode that finished later is no error). */
export async function readEvalErrors(store: ArtifactStore, evalId: string, episodes: readonly EvalEpisodeRecord[]): Promise<EvalErrorRecord[]> {
  const finished = new Set(episodes.map((e) => `${e.taskId}\u0000${e.run}`));
  const out: EvalErrorRecord[] = [];
  for (const k of await store.list(evalKeys.errors(evalId))) {
    const r = await store.getJson<EvalErrorRecord>(k);
    if (r && !finished.has(`${r.taskId}\u0000${r.run}`)) out.push(r);
  }
  return out;
}

/** An episode that ended without submitting and was not graded (its working tree is no prediction). */
export function submittedNothing(e: EvalEpisodeRecord): boolean {
  // an edit-mode reply that was no valid edit made no patch
  return e.grade.reason === 'not_submitted' || e.grade.reason === 'no_sandbox' || (e.grade.mode === 'edit' && e.prediction === '');
}

/**
 * One run's SWE-bench-style prediction of each task that has a finished episode in that run: the graded patch,
 * or `null` (the harness's "no patch", as SWE-agent writes for a run that never submitted) when nothing was submitted.
 */
export function predictionsOf(
  plan: EvalPlan,
  episodes: readonly EvalEpisodeRecord[],
  run: number,
): { instance_id: string; model_name_or_path: string; model_patch: string | null }[] {
  const byTask = new Map(episodes.filter((e) => e.run === run).map((e) => [e.taskId, e]));
  return plan.taskIds
    .filter((id) => byTask.has(id))
    .map((id) => {
      const e = byTask.get(id)!;
      return { instance_id: id, model_name_or_path: plan.modelName, model_patch: submittedNothing(e) ? null : e.prediction };
    });
}

/** The graded result of an episode as the grader returned it, or undefined when nothing was graded. */
export function gradeResultOf(e: EvalEpisodeRecord): GradeResult | undefined {
  const g = e.grade as Partial<GradeResult>;
  if (typeof g.graderVersion !== 'string' || e.prediction.trim() === '') return undefined;
  return { ...(g as GradeResult), instanceId: e.taskId, reward: e.reward === 1 ? 1 : 0, resolved: e.resolved };
}

/** SWE-bench's `run_id` of run r of an evaluation. */
export const harnessRunId = (evalId: string, run: number): string => `${evalId}-run-${run}`;

/**
 * One run's files in the SWE-bench harness's layout, through lib/swe/report.ts (the writer `swerl grade`
 * uses): predictions.jsonl, logs/run_evaluation/<run_id>/<model>/<instance>/report.json and the run
 * summary <model>.<run_id>.json. An episode that could not happen is listed under error_ids with its
 * reason (the harness would call it incomplete: it has no prediction).
 */
export function runReportFiles(
  plan: EvalPlan,
  episodes: readonly EvalEpisodeRecord[],
  errors: readonly EvalErrorRecord[],
  run: number,
  evalId: string,
  where: { runId?: string; dir?: string } = {},
): { files: [string, string][]; summary: RunSummary & { not_submitted_ids: string[] } } {
  const runId = where.runId ?? harnessRunId(evalId, run);
  const dir = where.dir ?? `run-${run}`;
  const model = modelDirName(plan.modelName);
  const preds = predictionsOf(plan, episodes, run);
  const byTask = new Map(episodes.filter((e) => e.run === run).map((e) => [e.taskId, e]));
  const files: [string, string][] = [[`${dir}/predictions.jsonl`, preds.map((p) => JSON.stringify(p)).join('\n') + (preds.length ? '\n' : '')]];
  const reports = new Map<string, InstanceReport>();
  for (const p of preds) {
    const ep = byTask.get(p.instance_id)!;
    const rep = instanceReport(p, gradeResultOf(ep));
    // an episode that submitted nothing says so (the harness's flags call it an empty patch)
    if (p.model_patch === null) rep[p.instance_id]!.reason = String(ep.grade.reason);
    reports.set(p.instance_id, rep[p.instance_id]!);
    files.push([`${dir}/logs/run_evaluation/${runId}/${model}/${p.instance_id}/report.json`, reportJson(rep)]);
  }
  const s = runSummary({ datasetIds: plan.taskIds, predictions: preds, reports, errors: new Map(), graderVersion: GRADER_VERSION });
  const errs = errors.filter((e) => e.run === run);
  if (errs.length) {
    const ids = new Set(errs.map((e) => e.taskId));
    s.incomplete_ids = s.incomplete_ids.filter((id) => !ids.has(id));
    s.error_ids = [...new Set([...s.error_ids, ...ids])].sort();
    for (const e of errs) s.error_reasons[e.taskId] = e.reason;
    s.error_instances = s.error_ids.length;
  }
  // ours, beside error_reasons: the episodes that ended without submitting (the harness counts them as empty patches)
  const summary = {
    ...s,
    not_submitted_ids: preds
      .filter((p) => p.model_patch === null)
      .map((p) => p.instance_id)
      .sort(),
  };
  files.push([`${dir}/${model}.${runId}.json`, reportJson(summary)]);
  return { files, summary };
}

/**
 * Writes the evaluation's report into the store (evals/<id>/report/): summary.json (metrics, per-run
 * summaries with their id lists, errors with reasons), summary.txt (the table), pass_at_k.html/.png, and
 * per run the predictions and harness-shaped reports (runReportFiles).
 */
export async function writeEvaluationReport(input: { storeUrl: string; evalId: string }): Promise<EvalReportSummary> {
  const store = openStore(input.storeUrl);
  const plan = await storedPlan(store, input.evalId);
  const config = await storedEvalConfig(store, input.evalId);
  const planned = new Set(plan.taskIds);
  const episodes = (await readEvalEpisodes(store, input.evalId)).filter((e) => planned.has(e.taskId) && e.run < plan.runs);
  const errors = await readEvalErrors(store, input.evalId, episodes);
  const strong = await strongTaskIds(config);
  const metrics = evaluationMetrics(plan, episodes.map(factsOf), errors, { seed: config.seed, ...(strong ? { strong } : {}) });
  const setting = editSetting(config);
  const prefix = evalKeys.report(input.evalId);
  const runs: RunSummary[] = [];
  for (let r = 0; r < plan.runs; r++) {
    const files = runReportFiles(plan, episodes, errors, r, input.evalId);
    for (const [path, text] of files.files) await store.put(`${prefix}/${path}`, text);
    runs.push(files.summary);
  }
  const integrity = evalIntegrity(episodes);
  const summary = {
    evalId: input.evalId,
    modelName: plan.modelName,
    checkpoint: plan.checkpoint,
    tasksFile: config.tasksFile,
    setting,
    metrics: { ...metrics, ...(integrity ? { integrity } : {}) },
    runs,
    errors: errors.map((e) => ({ taskId: e.taskId, run: e.run, reason: e.reason })),
    toolFormat: plan.toolFormat ?? null,
    text: `${formatEvalMetrics(metrics, `evaluation ${input.evalId} (${plan.modelName}; ${setting.text})`)}\n${toolFormatLine(plan)}\n${integrity ? `${formatIntegrity(integrity)}\n` : ''}${formatEvalErrors(errors)}`,
  };
  await store.putJson(`${prefix}/summary.json`, summary);
  await store.put(`${prefix}/summary.txt`, `${summary.text}\n`);
  const plot = await curvePlotFiles('pass_at_k', `pass@k (${input.evalId}, ${plan.modelName})`, [
    { name: 'pass@k', values: metrics.passAtK },
    { name: 'pass@k (completed episodes)', values: metrics.passAtKCompleted, dashed: true },
  ]);
  for (const [path, data] of plot) await store.put(`${prefix}/${path}`, data);
  return {
    evalId: input.evalId,
    modelName: plan.modelName,
    tasks: metrics.tasks,
    runs: metrics.runs,
    pass1: metrics.pass1,
    pass1Completed: metrics.pass1Completed,
    pass1CI: metrics.pass1CI ? { low: metrics.pass1CI.low, high: metrics.pass1CI.high, level: metrics.pass1CI.level } : null,
    passAtK: metrics.passAtK,
    passAtKCompleted: metrics.passAtKCompleted,
    episodes: metrics.episodes,
    errors: summary.errors.slice(0, 20),
    reportKey: prefix,
    ...(integrity ? { integrity } : {}),
    ...(metrics.strong ? { strong: metrics.strong } : {}),
  };
}

/** The integrity verdicts of an evaluation's graded episodes (the hack rate of the model evaluated), or undefined when none was graded. */
export function evalIntegrity(episodes: readonly EvalEpisodeRecord[]): (IntegrityCounts & { hackRate: number }) | undefined {
  const graded = episodes.filter((e) => e.grade.graderVersion !== undefined && !submittedNothing(e));
  if (!graded.length) return undefined;
  const c = countIntegrity(graded.map((e) => integrityKeys(e.grade.integrity as IntegrityFinding[] | undefined)));
  return { ...c, hackRate: hackRate(c) };
}

/** The mode and, in edit mode, the reward, format, scoring and context setting a report names. */
function editSetting(config: EvalConfig): { mode: 'agent' | 'edit'; reward: string; text: string; edit?: EvalConfig['edit'] } {
  if (config.mode !== 'edit') return { mode: 'agent', reward: 'tests', text: 'agent mode, graded by tests' };
  const e = config.edit;
  return {
    mode: 'edit',
    reward: config.reward,
    edit: e,
    text: `edit mode, format ${e.format}, reward ${config.reward} (rule ${e.rule}, malformed ${e.malformed}), oracle files to ${e.contextTokens} tokens`,
  };
}

/** The report's line on how the agent called tools. */
function toolFormatLine(plan: EvalPlan): string {
  if (!plan.toolFormat) return 'tool format: not recorded (a plan made before swerl recorded it)';
  const what =
    plan.toolFormat === 'openai' ? 'openai (tools rendered by the chat template, calls as <tool_call> JSON / OpenAI tool calls)' : 'text (<function=…> blocks in the reply)';
  return `tool format: ${what}; from ${plan.toolFormatSource}`;
}

/** The tasks whose tests are strong (lib/swe/quality.ts), or undefined when no task has a measured strength. */
async function strongTaskIds(config: EvalConfig): Promise<{ ids: Set<string>; minStrength: number } | undefined> {
  const minStrength = config.quality?.minStrength ?? DEFAULT_MIN_STRENGTH;
  const { tasks } = await loadTasks(config.tasksFile);
  const side = config.quality?.file ? parseQualityLines(await readFile(config.quality.file, 'utf8'), config.quality.file) : new Map<string, TaskQuality>();
  const quality = tasks.map((t) => [t.instance_id, side.get(t.instance_id) ?? recordQuality(t)] as const);
  if (!quality.some(([, q]) => q?.strength.score != null)) return undefined;
  return { ids: new Set(quality.filter(([, q]) => isStrong(q, minStrength)).map(([id]) => id)), minStrength };
}

const factsOf = (e: EvalEpisodeRecord): EpisodeFacts => ({
  taskId: e.taskId,
  run: e.run,
  resolved: e.resolved,
  reward: e.reward,
  ...(e.grade.mode === 'edit' ? { validEdit: e.grade.editOutcome === 'valid' } : {}),
  end: e.end,
  steps: e.steps,
  tokens: e.tokens,
  responseTokens: e.responseTokens,
  seconds: e.seconds,
});
