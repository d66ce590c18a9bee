// Best@K verifier activities (rollout queue, DESIGN §8): the execution-free judge, the regression baseline
// and each candidate's regression and reproduction scores in fresh containers, the generated reproduction
// tests, and the selection report. Every result is stored under the selection and returned when found.
import { heartbeat } from '@temporalio/activity';
import { isDeepStrictEqual } from 'node:util';
import { validateBestOfKConfig, type BestOfKConfig } from '../lib/eval/config.ts';
import { evalKeys } from '../lib/eval/keys.ts';
import { bestAtKCurve, oracleSelect, pickOne, SELECTORS, type Candidate, type SelectorName } from '../lib/eval/best-of-k.ts';
import { passAtKCurve } from '../lib/eval/metrics.ts';
import { judgeMessages, judgementScore, reportsResolved, reproductionMessages, scriptFrom, type Judgement } from '../lib/eval/verifiers.ts';
import { createChatClient } from '../lib/policy/chat.ts';
import type { Sandbox } from '../lib/sandbox.ts';
import { openStore, type ArtifactStore } from '../lib/store.ts';
import { logFormatOf, parseTestLog } from '../lib/swe/testlog.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { hashInts } from '../lib/seed.ts';
import { curvePlotFiles } from '../lib/plot.ts';
import { readEvalEpisodes, runReportFiles, storedEvalConfig, storedPlan, type EvalEpisodeRecord } from './evaluation.ts';
import { ensureTaskImage, taskImageName } from './images.ts';
import { createSandboxBackend } from './sandbox/index.ts';
import { tasksById } from './swe-env.ts';
import { FailureType, nonRetryable } from '../lib/failures.ts';

export interface SelectionPlan {
  evalId: string;
  selectionId: string;
  k: number;
  /** per task, the runs (< k) with a finished episode: the candidates */
  candidates: { taskId: string; runs: number[] }[];
}

interface Ref {
  storeUrl: string;
  evalId: string;
  selectionId: string;
  taskId: string;
}
type CandidateRef = Ref & { run: number };

const invalid = (message: string) => nonRetryable(FailureType.InvalidConfig, message);

async function selectionConfig(store: ArtifactStore, evalId: string, selectionId: string): Promise<BestOfKConfig> {
  const raw = await store.getJson<unknown>(evalKeys.selectionConfig(evalId, selectionId));
  const v = validateBestOfKConfig(raw);
  if (!v.ok) throw invalid(`selection config: ${v.errors.join('; ')}`);
  return v.config;
}

/** Stores the selection's config and lists its candidates (finished episodes of runs < k). */
export async function prepareSelection(input: { selectionId: string; config: unknown }): Promise<SelectionPlan> {
  const v = validateBestOfKConfig(input.config);
  if (!v.ok) throw invalid(`invalid Best@K config: ${v.errors.join('; ')}`);
  const c = v.config;
  const store = openStore(c.store.url);
  const plan = await storedPlan(store, c.evalId);
  const k = c.k ?? plan.runs;
  if (k > plan.runs) throw invalid(`config.k: must be ≤ the evaluation's runs (${plan.runs}), got ${k}`);
  const existing = await store.getJson<unknown>(evalKeys.selectionConfig(c.evalId, input.selectionId));
  const before = existing === null ? null : validateBestOfKConfig(existing);
  if (before !== null && (!before.ok || !isDeepStrictEqual(before.config, c)))
    throw invalid(`config.selectionId: selection ${JSON.stringify(input.selectionId)} of ${c.evalId} exists with a different config`);
  await store.putJson(evalKeys.selectionConfig(c.evalId, input.selectionId), c);
  const eps = await readEvalEpisodes(store, c.evalId);
  const candidates = plan.taskIds.map((taskId) => ({
    taskId,
    runs: eps
      .filter((e) => e.taskId === taskId && e.run < k)
      .map((e) => e.run)
      .sort((a, b) => a - b),
  }));
  return { evalId: c.evalId, selectionId: input.selectionId, k, candidates };
}

/** Returns the stored result at `key`, or computes, stores and returns it. */
async function once<T>(store: ArtifactStore, key: string, compute: () => Promise<T>): Promise<T> {
  const stored = await store.getJson<T>(key);
  if (stored !== null) return stored;
  const v = await compute();
  const again = await store.getJson<T>(key);
  if (again !== null) return again;
  await store.putJson(key, v);
  return v;
}

async function context(ref: Ref) {
  const store = openStore(ref.storeUrl);
  const config = await selectionConfig(store, ref.evalId, ref.selectionId);
  const evalConfig = await storedEvalConfig(store, ref.evalId);
  const task = (await tasksById(evalConfig.tasksFile)).get(ref.taskId);
  if (!task) throw nonRetryable(FailureType.InvalidTask, `task ${JSON.stringify(ref.taskId)} is not in ${evalConfig.tasksFile}`);
  return { store, config, evalConfig, task };
}

async function episodeOf(store: ArtifactStore, ref: CandidateRef): Promise<EvalEpisodeRecord> {
  const e = await store.getJson<EvalEpisodeRecord>(evalKeys.episode(ref.evalId, ref.taskId, ref.run));
  if (!e) throw nonRetryable(FailureType.InvalidTask, `no finished episode of ${ref.taskId} run ${ref.run} in evaluation ${ref.evalId}`);
  return e;
}

const apiKeyOf = (env: string | undefined) => (env ? process.env[env] : undefined);

export type ExecutionFreeResult = Judgement & { content: string };

/** The execution-free verifier's score of one candidate (problem, condensed trajectory, final patch → YES/NO). */
export async function executionFreeScore(ref: CandidateRef): Promise<ExecutionFreeResult> {
  const { store, config, task } = await context(ref);
  const ef = config.executionFree;
  if (!ef) throw invalid('config.executionFree: not configured');
  return once(store, evalKeys.executionFree(ref.evalId, ref.selectionId, ref.taskId, ref.run), async () => {
    const e = await episodeOf(store, ref);
    const key = apiKeyOf(ef.model.apiKeyEnv);
    const chat = createChatClient({ baseUrl: ef.model.baseUrl, model: ef.model.model, timeoutMs: 600_000, ...(key ? { apiKey: key } : {}) });
    const r = await chat.chat({
      messages: judgeMessages({ problem: task.problem_statement, turns: e.turns, patch: e.prediction, maxPromptChars: ef.maxPromptChars }),
      maxTokens: ef.maxTokens,
      temperature: ef.temperature,
      topP: 1,
      seed: hashInts(config.seed, e.seed, 0xef) & 0x7fffffff,
      logprobs: true,
      topLogprobs: ef.topLogprobs,
    });
    return { ...judgementScore(r.logprobs ?? []), content: (r.content ?? '').slice(0, 4000) };
  });
}

async function imageOf(task: SweTask, backendName: string): Promise<string> {
  return backendName === 'docker' ? (await ensureTaskImage(task)).image : taskImageName(task);
}

/** Starts a fresh sandbox of the task image, runs `fn`, stops it. */
async function inSandbox<T>(ref: Ref, task: SweTask, backendKind: 'docker' | 'kubernetes', fn: (sb: Sandbox) => Promise<T>): Promise<T> {
  const backend = await createSandboxBackend(backendKind);
  const sb = await backend.start(await imageOf(task, backend.name), undefined, { 'swerl.purpose': 'verify', 'swerl.task': ref.taskId.slice(0, 63) });
  const beat = setInterval(() => heartbeat(ref.taskId), 5000);
  try {
    return await fn(sb);
  } finally {
    clearInterval(beat);
    await sb.stop().catch(() => undefined);
  }
}

const WORK = '/tmp/swerl-verify';

/** Applies `patch` in /testbed; false when it does not apply. An empty patch applies trivially. */
async function applyPatch(sb: Sandbox, patch: string): Promise<boolean> {
  if (patch.trim() === '') return true;
  await sb.copyIn([{ path: 'candidate.diff', content: patch.endsWith('\n') ? patch : `${patch}\n` }], WORK);
  return (await sb.exec(`git apply --whitespace=nowarn ${WORK}/candidate.diff`, 60)).exit === 0;
}

/** The repository's own tests (the task's test command, without test_patch) and which of them passed. */
async function runRepoTests(sb: Sandbox, task: SweTask, timeoutS: number): Promise<string[]> {
  const r = await sb.exec(task.test_cmd, timeoutS, { maxOutputBytes: 16 << 20 });
  const statuses = parseTestLog(`${r.stdout}\n${r.stderr}`, logFormatOf(task.test_cmd));
  return [...statuses]
    .filter(([, s]) => s === 'PASSED')
    .map(([id]) => id)
    .sort();
}

export interface RegressionBaseline {
  /** repository tests that pass at the base commit without any patch (never the task's hidden test lists) */
  passing: string[];
}

export async function regressionBaseline(ref: Ref): Promise<RegressionBaseline> {
  const { store, config, evalConfig, task } = await context(ref);
  const timeoutS = config.executionBased?.timeoutSeconds ?? 300;
  return once(store, evalKeys.regressionBase(ref.evalId, ref.selectionId, ref.taskId), async () => ({
    passing: await inSandbox(ref, task, evalConfig.env.backend ?? 'docker', (sb) => runRepoTests(sb, task, timeoutS)),
  }));
}

export interface ReproductionTests {
  /** the scripts the generator answered with (answers without a script are dropped) */
  scripts: string[];
  answers: number;
}

export async function generateReproductionTests(ref: Ref): Promise<ReproductionTests> {
  const { store, config, task } = await context(ref);
  const rc = config.executionBased?.reproduction;
  if (!rc) return { scripts: [], answers: 0 };
  return once(store, evalKeys.reproductionTests(ref.evalId, ref.selectionId, ref.taskId), async () => {
    const key = apiKeyOf(rc.model.apiKeyEnv);
    const chat = createChatClient({ baseUrl: rc.model.baseUrl, model: rc.model.model, timeoutMs: 600_000, ...(key ? { apiKey: key } : {}) });
    const scripts: string[] = [];
    for (let i = 0; i < rc.tests; i++) {
      const r = await chat.chat({
        messages: reproductionMessages(task.problem_statement, task.repo),
        maxTokens: rc.maxTokens,
        temperature: rc.temperature,
        topP: 1,
        seed: hashInts(config.seed, i, 0x7e57) & 0x7fffffff,
      });
      const s = scriptFrom(r.content ?? '');
      if (s) scripts.push(s);
      heartbeat(i);
    }
    return { scripts, answers: rc.tests };
  });
}

export interface ExecutionScores {
  applied: boolean;
  /** base-passing repository tests that still pass with the candidate */
  regression: number;
  regressionOf: number;
  /** generated reproduction tests that report the issue resolved with the candidate */
  reproduction: number;
  reproductionOf: number;
}

/**
 * Regression and reproduction scores of one candidate, each in a fresh container with the candidate's
 * patch applied. A patch that does not apply scores 0 on both.
 */
export async function executeCandidate(ref: CandidateRef): Promise<ExecutionScores> {
  const { store, config, evalConfig, task } = await context(ref);
  const eb = config.executionBased;
  if (!eb) throw invalid('config.executionBased: not configured');
  return once(store, evalKeys.execution(ref.evalId, ref.selectionId, ref.taskId, ref.run), async () => {
    const e = await episodeOf(store, ref);
    const backend = evalConfig.env.backend ?? 'docker';
    const base = eb.regression ? await store.getJson<RegressionBaseline>(evalKeys.regressionBase(ref.evalId, ref.selectionId, ref.taskId)) : { passing: [] };
    if (!base) throw new Error(`regression baseline of ${ref.taskId} is not stored yet`);
    const repro = eb.reproduction ? await store.getJson<ReproductionTests>(evalKeys.reproductionTests(ref.evalId, ref.selectionId, ref.taskId)) : { scripts: [], answers: 0 };
    if (!repro) throw new Error(`reproduction tests of ${ref.taskId} are not stored yet`);
    let applied = true;
    let regression = 0;
    if (eb.regression) {
      regression = await inSandbox(ref, task, backend, async (sb) => {
        if (!(await applyPatch(sb, e.prediction))) {
          applied = false;
          return 0;
        }
        const passing = new Set(await runRepoTests(sb, task, eb.timeoutSeconds));
        return base.passing.filter((id) => passing.has(id)).length;
      });
    }
    let reproduction = 0;
    if (applied && repro.scripts.length) {
      reproduction = await inSandbox(ref, task, backend, async (sb) => {
        if (!(await applyPatch(sb, e.prediction))) {
          applied = false;
          return 0;
        }
        // in /testbed, as the generator was told: the script's directory is the first import path
        await sb.copyIn(
          repro.scripts.map((content, i) => ({ path: `swerl_repro_${i}.py`, content })),
          '/testbed',
        );
        let n = 0;
        for (let i = 0; i < repro.scripts.length; i++) {
          const r = await sb.exec(`python3 swerl_repro_${i}.py`, Math.min(eb.timeoutSeconds, 120));
          if (!r.timedOut && reportsResolved(r.stdout + r.stderr)) n++;
        }
        return n;
      });
    }
    return { applied, regression, regressionOf: base.passing.length, reproduction, reproductionOf: repro.scripts.length };
  });
}

/** The Best@K table printed beside pass@K. */
export function formatBestOfK(curves: Record<string, (number | null)[]>, atK: Record<string, number>, k: number): string {
  const pct = (x: number | null | undefined) => (x === null || x === undefined ? '   -  ' : `${(100 * x).toFixed(1).padStart(5)}%`);
  const names = Object.keys(curves);
  const lines = [`Best@K over ${k} runs (expected resolved rate over random K-subsets; ties at their expected value)`];
  lines.push(`  ${'K'.padEnd(16)} ${Array.from({ length: k }, (_, i) => String(i + 1).padStart(6)).join(' ')}`);
  for (const n of names) lines.push(`  ${n.padEnd(16)} ${curves[n]!.map(pct).join(' ')}`);
  lines.push(
    `selected at K = ${k} (ties to the lowest run): ${Object.entries(atK)
      .map(([n, x]) => `${n} ${pct(x).trim()}`)
      .join(', ')}`,
  );
  return lines.join('\n');
}

/**
 * Reads every stored verifier result, computes the Best@K curves of each selector beside the pass@K
 * ceiling, and writes, per selector, the selection at K as SWE-bench predictions with their reports.
 */
export async function writeSelectionReport(input: { storeUrl: string; evalId: string; selectionId: string }) {
  const store = openStore(input.storeUrl);
  const config = await selectionConfig(store, input.evalId, input.selectionId);
  const plan = await storedPlan(store, input.evalId);
  const k = config.k ?? plan.runs;
  const eps = (await readEvalEpisodes(store, input.evalId)).filter((e) => e.run < k && plan.taskIds.includes(e.taskId));
  const tasks: Candidate[][] = [];
  const byTask = new Map<string, EvalEpisodeRecord[]>();
  for (const e of eps) byTask.set(e.taskId, [...(byTask.get(e.taskId) ?? []), e]);
  const order = plan.taskIds.filter((id) => byTask.has(id));
  for (const taskId of order) {
    const cands: Candidate[] = [];
    for (const e of byTask.get(taskId)!.sort((a, b) => a.run - b.run)) {
      const c: Candidate = { run: e.run, resolved: e.resolved };
      const ef = config.executionFree ? await store.getJson<ExecutionFreeResult>(evalKeys.executionFree(input.evalId, input.selectionId, taskId, e.run)) : null;
      if (ef) c.ef = ef.score;
      const ex = config.executionBased ? await store.getJson<ExecutionScores>(evalKeys.execution(input.evalId, input.selectionId, taskId, e.run)) : null;
      if (ex && config.executionBased?.regression) c.regression = ex.regression;
      if (ex && config.executionBased?.reproduction) c.reproduction = ex.reproduction;
      cands.push(c);
    }
    tasks.push(cands);
  }
  const selectors: SelectorName[] = [];
  if (config.executionFree) selectors.push('executionFree');
  if (config.executionBased?.regression) selectors.push('regression');
  if (config.executionBased?.reproduction) selectors.push('reproduction');
  if (config.executionBased) selectors.push('executionBased');
  if (config.executionFree && config.executionBased) selectors.push('hybrid');
  const curves: Record<string, (number | null)[]> = {};
  for (const s of selectors) curves[s] = bestAtKCurve(tasks, SELECTORS[s], { maxK: k, subsets: config.subsets, seed: config.seed });
  curves['pass@k'] = bestAtKCurve(tasks, oracleSelect, { maxK: k, subsets: config.subsets, seed: config.seed });
  const counts = order.map((taskId, i) => ({ taskId, repo: plan.repos[taskId] ?? '', runs: k, completed: tasks[i]!.length, resolved: tasks[i]!.filter((c) => c.resolved).length }));
  const exactPassAtK = passAtKCurve(counts, k, 'completed');
  const prefix = evalKeys.selectionReport(input.evalId, input.selectionId);
  const selections: Record<string, Record<string, number>> = {};
  const atK: Record<string, number> = {};
  for (const s of selectors) {
    const chosen: EvalEpisodeRecord[] = [];
    selections[s] = {};
    order.forEach((taskId, i) => {
      const run = pickOne(SELECTORS[s](tasks[i]!)).run;
      selections[s]![taskId] = run;
      chosen.push({ ...byTask.get(taskId)!.find((e) => e.run === run)!, run: 0 });
    });
    atK[s] = order.length ? chosen.filter((e) => e.resolved).length / plan.taskIds.length : 0;
    const files = runReportFiles(plan, chosen, [], 0, input.evalId, { runId: `${input.evalId}-${input.selectionId}-${s}`, dir: s });
    for (const [path, text] of files.files) await store.put(`${prefix}/${path}`, text);
  }
  const text = formatBestOfK(curves, atK, k);
  const summary = { evalId: input.evalId, selectionId: input.selectionId, k, tasks: order.length, selectors, curves, exactPassAtK, selections, resolvedAtK: atK, text };
  await store.putJson(`${prefix}/best_of_k.json`, summary);
  await store.put(`${prefix}/best_of_k.txt`, `${text}\n`);
  const plot = await curvePlotFiles(
    'best_at_k',
    `Best@K (${input.evalId})`,
    Object.entries(curves).map(([name, values]) => ({ name, values, dashed: name === 'pass@k' })),
  );
  for (const [path, data] of plot) await store.put(`${prefix}/${path}`, data);
  return { evalId: input.evalId, selectionId: input.selectionId, k, curves, resolvedAtK: atK, reportKey: prefix };
}

export const verifierActivities = { prepareSelection, executionFreeScore, regressionBaseline, generateReproductionTests, executeCandidate, writeSelectionReport };
