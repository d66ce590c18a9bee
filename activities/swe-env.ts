// The SWE `TextEnvironment` (DESIGN §3): a sandbox from the task image, the four R2E-Gym tools, the first
// tool call of each turn executed, and the reward from grading the patch in a fresh container (or SWE-RL
// similarity). The episode loop (lib/episode.ts) owns tokens, step counting and budgets.
import { PatchTooLargeError, SandboxInfraError, type Sandbox, type SandboxBackend } from '../lib/sandbox.ts';
import type { ChatMessage, EndReason, EnvStep, TextEnvironment } from '../lib/types.ts';
import { parseToolCall } from '../lib/toolcall.ts';
import { loadTasks, type SweTask } from '../lib/swe/task.ts';
import { SWE_TOOL_ALIASES, SWE_TOOL_SCHEMAS, SweTools } from '../lib/swe/tools.ts';
import { SweEnvConfigSchema, type SweEnvConfig, type SweEnvConfigInput } from '../lib/swe/env-config.ts';
import { NO_CALL_REMINDER, SYSTEM_PROMPT, TOOL_CALL_REMINDER, callErrorObservation, instancePrompt, tokenBudgetWarning } from '../lib/swe/prompts.ts';
import { similarityReward } from '../lib/swe/similarity.ts';
import { GRADER_VERSION, gradePatch, type GradeInput } from './grade.ts';
import { ensureTaskImage, taskImageName } from './images.ts';
import { createSandboxBackend } from './sandbox/index.ts';
import { registerEnvironment, type EpisodeSetup, type EnvironmentHelpers } from './rollout.ts';
import { hostWorkspace, sandboxWorkspace, SweEditEnvironment } from './swe-edit-env.ts';
import type { TrainingConfig } from '../lib/config.ts';

export { DEFAULT_SCRATCH_GLOBS, SweEnvConfigSchema, type SweEnvConfig, type SweEnvConfigInput } from '../lib/swe/env-config.ts';

/** Grading of a patch: activities/grade.ts `gradePatch` by default (tests may substitute). */
export type GradeFn = (input: GradeInput) => Promise<{ reward: number; reason: string } & Record<string, unknown>>;

export interface SweEnvDeps {
  backend: SandboxBackend;
  /** the task image (activities/images.ts `taskImageName`) */
  image: string;
  /** grading; activities/grade.ts `gradePatch` by default */
  grade?: GradeFn;
  /** wall-clock deadline (ms since epoch); default: reset() + episodeTimeoutS */
  deadlineMs?: number;
  now?: () => number;
  /** owner labels of the episode's sandbox (`swerl.run`, `swerl.iteration`, …) */
  labels?: Record<string, string>;
  /** the format a reply without a call is reminded of: the `<function=…>` text format (default) or `<tool_call>` JSON */
  callFormat?: 'text' | 'tool_call';
}

/** A sandbox outlives its episode's deadline by at most this much (grading, slow removal) before sweeps remove it. */
const SANDBOX_EXPIRY_MARGIN_S = 1800;

export class SweEnvironment implements TextEnvironment {
  private sandbox: Sandbox | undefined;
  private tools: SweTools | undefined;
  private steps = 0;
  private testLog: string | undefined;

  constructor(
    readonly task: SweTask,
    readonly cfg: SweEnvConfig,
    private readonly deps: SweEnvDeps,
  ) {}

  async reset(): Promise<ChatMessage[]> {
    await this.close();
    this.steps = 0;
    const now = this.deps.now ?? Date.now;
    const deadlineMs = this.deps.deadlineMs ?? now() + this.cfg.episodeTimeoutS * 1000;
    const expires = String(Math.ceil(deadlineMs / 1000 + this.cfg.gradeTimeoutS + SANDBOX_EXPIRY_MARGIN_S));
    this.sandbox = await this.deps.backend.start(this.deps.image, this.cfg.limits, { ...this.deps.labels, 'swerl.task': this.task.instance_id, 'swerl.expires': expires });
    this.tools = new SweTools(this.sandbox, {
      commandTimeoutS: this.cfg.commandTimeoutS,
      deadlineMs,
      maxObservationChars: this.cfg.maxObservationChars,
      now,
    });
    return [
      { role: 'system', content: SYSTEM_PROMPT },
      { role: 'user', content: instancePrompt({ problemStatement: this.task.problem_statement }) },
    ];
  }

  /**
   * Bad calls and everything the agent's commands cause are observations; a sandbox or engine failure
   * (SandboxInfraError) throws, so the rollout is retried and the episode never scored (DESIGN §2).
   */
  async step(assistantText: string): Promise<EnvStep> {
    this.steps++;
    if (!this.tools) throw new Error('the SWE environment was not reset');
    const parsed = parseToolCall(assistantText, { tools: SWE_TOOL_SCHEMAS, aliases: SWE_TOOL_ALIASES });
    if (!parsed.ok) {
      const reminder = this.deps.callFormat === 'tool_call' ? TOOL_CALL_REMINDER : NO_CALL_REMINDER;
      return { observation: parsed.kind === 'none' ? reminder : callErrorObservation(parsed.error), done: false };
    }
    const r = await this.tools.run(parsed.call);
    if (r.end) return { observation: r.observation, done: true, end: r.end, ...(r.info ? { info: r.info } : {}) };
    return { observation: r.observation, done: false };
  }

  /**
   * The patch (`git diff` minus scratch files) graded in a fresh container (`tests`) or compared with the gold
   * patch (`similarity`). With `tests`, episodes not ending in `submitted` get 0 unless `gradeUnsubmitted`.
   */
  async reward(end: EndReason): Promise<{ reward: number; info?: Record<string, unknown> }> {
    const info: Record<string, unknown> = { instanceId: this.task.instance_id, end, steps: this.steps };
    // every test-based reward says which grader gave it, the zeros given before any grading run too
    if (this.cfg.reward === 'tests') info.graderVersion = GRADER_VERSION;
    if (!this.sandbox) return { reward: 0, info: { ...info, reason: 'no_sandbox' } };
    let patch: string;
    try {
      patch = await this.sandbox.diff(this.cfg.scratchGlobs, { maxBytes: this.cfg.maxPatchBytes });
    } catch (e) {
      if (e instanceof SandboxInfraError) throw e;
      // the agent's own doing (a huge file, a removed .git): a result with its reason, in one attempt
      const reason = e instanceof PatchTooLargeError ? 'patch_too_large' : 'diff_failed';
      return { reward: this.cfg.reward === 'similarity' ? -1 : 0, info: { ...info, reason, error: (e as Error).message } };
    }
    info.patch = patch;
    if (this.cfg.reward === 'similarity') {
      const s = similarityReward(patch, this.task.patch);
      return { reward: s.reward, info: { ...info, reason: s.reason, ...(s.error ? { patchError: s.error } : {}) } };
    }
    if (end !== 'submitted' && !this.cfg.gradeUnsubmitted) return { reward: 0, info: { ...info, reason: 'not_submitted' } };
    if (patch.trim() === '') return { reward: 0, info: { ...info, reason: 'empty_patch' } };
    const grade = this.deps.grade ?? gradePatch;
    this.testLog = undefined;
    const g = await grade({
      task: this.task,
      patch,
      backend: this.deps.backend,
      timeoutS: this.cfg.gradeTimeoutS,
      limits: this.cfg.limits,
      audit: this.cfg.grade.audit,
      onLog: (log) => {
        this.testLog = log;
      },
    });
    const { reward, reason, ...rest } = g;
    return { reward, info: { ...info, ...rest, reason } };
  }

  /** the last grading's whole test log (a trajectory kept for review keeps it) */
  reviewFiles(): Record<string, string> {
    return this.testLog === undefined ? {} : { 'test_output.txt': this.testLog };
  }

  async close(): Promise<void> {
    const s = this.sandbox;
    this.sandbox = undefined;
    this.tools = undefined;
    if (s) await s.stop();
  }
}

const taskFiles = new Map<string, Promise<Map<string, SweTask>>>();

/** Tasks of a file by id, loaded once per process; bad records are skipped (the loader reports them). */
export function tasksById(file: string): Promise<Map<string, SweTask>> {
  let p = taskFiles.get(file);
  if (!p) {
    p = loadTasks(file).then(({ tasks }) => new Map(tasks.map((t) => [t.instance_id, t])));
    p.catch(() => taskFiles.delete(file));
    taskFiles.set(file, p);
  }
  return p;
}

/** The SWE environment of `taskId` under `cfg` (the rollout activity's entry point). */
export async function createSweEnvironment(
  taskId: string,
  cfgInput: SweEnvConfigInput | SweEnvConfig,
  opts: Partial<Omit<SweEnvDeps, 'image'>> & { image?: string } = {},
): Promise<SweEnvironment> {
  const cfg = SweEnvConfigSchema.parse(cfgInput);
  const task = (await tasksById(cfg.tasksFile)).get(taskId);
  if (!task) throw new Error(`task ${JSON.stringify(taskId)} is not in ${cfg.tasksFile}`);
  const backend = opts.backend ?? (await createSandboxBackend(cfg.backend));
  const image = opts.image ?? (await taskImage(task, backend));
  return new SweEnvironment(task, cfg, { ...opts, backend, image });
}

/**
 * The edit-mode environment of `taskId` (docs/edit-mode.md): the repository from the task's source tarball on the host,
 * else from a sandbox of its image; grading (tests, hybrid, `gradeAlways`) on `cfg.backend`.
 */
export async function createSweEditEnvironment(
  taskId: string,
  cfgInput: SweEnvConfigInput | SweEnvConfig,
  opts: { labels?: Record<string, string>; backend?: SandboxBackend; grade?: GradeFn; gradeAlways?: boolean; countTokens?: (text: string) => number } = {},
): Promise<SweEditEnvironment> {
  const cfg = SweEnvConfigSchema.parse(cfgInput);
  const task = (await tasksById(cfg.tasksFile)).get(taskId);
  if (!task) throw new Error(`task ${JSON.stringify(taskId)} is not in ${cfg.tasksFile}`);
  const backend = async () => opts.backend ?? (await createSandboxBackend(cfg.backend));
  const workspace = task.source_tarball
    ? hostWorkspace(task.source_tarball, cfg.scratchGlobs)
    : sandboxWorkspace(async () => {
        const b = await backend();
        const expires = String(Math.ceil(Date.now() / 1000 + cfg.episodeTimeoutS + cfg.gradeTimeoutS + SANDBOX_EXPIRY_MARGIN_S));
        return b.start(await taskImage(task, b), cfg.limits, { ...opts.labels, 'swerl.task': task.instance_id, 'swerl.expires': expires });
      }, cfg);
  return new SweEditEnvironment(task, cfg, {
    workspace,
    backend,
    ...(opts.grade ? { grade: opts.grade } : {}),
    gradeAlways: opts.gradeAlways ?? false,
    ...(opts.countTokens ? { countTokens: opts.countTokens } : {}),
  });
}

/** Docker builds a missing task image; Kubernetes expects it pre-pulled under its name. */
async function taskImage(task: SweTask, backend: SandboxBackend): Promise<string> {
  return backend.name === 'docker' ? (await ensureTaskImage(task)).image : taskImageName(task);
}

/**
 * The rollout activity's factory for `env.kind: 'swe'`: the environment plus its loop options
 * (steps from the config, `Steps Remaining: N` after each observation, the token-budget warning).
 */
export async function sweEpisodeSetup(
  config: TrainingConfig,
  taskId: string,
  _seed: number,
  labels: Record<string, string> = {},
  helpers: EnvironmentHelpers = {},
): Promise<EpisodeSetup> {
  const { kind, ...envCfg } = config.env as { kind: string } & Record<string, unknown>;
  if (kind !== 'swe') throw new Error(`sweEpisodeSetup: env.kind is ${JSON.stringify(kind)}, not "swe"`);
  // edit mode is one turn: the reply is the answer
  if (envCfg.mode === 'edit') return { env: await createSweEditEnvironment(taskId, envCfg as SweEnvConfigInput, { labels, ...helpers }), loop: { maxSteps: 1 } };
  // the same wall-clock limit as the episode loop's, so a command that would cross it ends with env_timeout
  const deadlineMs = Date.now() + config.episode.timeoutMinutes * 60_000;
  const env = await createSweEnvironment(taskId, envCfg as SweEnvConfigInput, { deadlineMs, labels });
  return { env, loop: { maxSteps: env.cfg.maxSteps, stepsRemainingSuffix: true, tokenWarningAt: env.cfg.tokenWarningAt, tokenWarning: tokenBudgetWarning } };
}

/** The first messages of the batch's task with the shortest issue (the context check before a training iteration's rollouts). */
export async function sweFirstPrompt(config: TrainingConfig, taskIds: readonly string[]): Promise<{ taskId: string; messages: ChatMessage[] }> {
  const cfg = SweEnvConfigSchema.parse((({ kind: _k, ...rest }) => rest)(config.env as { kind: string } & Record<string, unknown>));
  const byId = await tasksById(cfg.tasksFile);
  const known = taskIds.map((id) => byId.get(id)).filter((x): x is SweTask => x !== undefined);
  if (known.length === 0) throw new Error(`none of the batch's tasks is in ${cfg.tasksFile}`);
  const task = known.reduce((a, b) => (b.problem_statement.length < a.problem_statement.length ? b : a));
  if (cfg.mode === 'edit') {
    const env = await createSweEditEnvironment(task.instance_id, cfg);
    try {
      return { taskId: task.instance_id, messages: await env.reset() };
    } finally {
      await env.close();
    }
  }
  return {
    taskId: task.instance_id,
    messages: [
      { role: 'system', content: SYSTEM_PROMPT },
      { role: 'user', content: instancePrompt({ problemStatement: task.problem_statement }) },
    ],
  };
}

registerEnvironment('swe', sweEpisodeSetup, sweFirstPrompt);
