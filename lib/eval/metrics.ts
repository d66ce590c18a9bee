// Evaluation metrics (DESIGN §8): pass@1 as the mean over tasks of c/n, the unbiased pass@k estimator in
// its numerically stable product form, a bootstrap confidence interval over tasks, and the summary tables.
// Pure and deterministic (seeded), so workflow code and the CLI may call it.

import { mulberry32 } from '../seed.ts';

/** A seeded PRNG uniform in [0, 1) (lib/seed.ts's mulberry32): the same stream on every platform. */
export const seededRandom = mulberry32;

/**
 * Unbiased pass@k of one task with n episodes of which c resolved (Chen et al. 2021):
 * 1 − C(n−c, k)/C(n, k) = 1 − Π_{i=n−c+1..n} (1 − k/i), and 1 when n − c < k. Never forms a binomial.
 */
export function passAtK(n: number, c: number, k: number): number {
  if (!(Number.isInteger(n) && Number.isInteger(c) && Number.isInteger(k)) || n < 1 || c < 0 || c > n || k < 1 || k > n) {
    throw new RangeError(`passAtK: need integers 0 ≤ c ≤ n, 1 ≤ k ≤ n; got n=${n}, c=${c}, k=${k}`);
  }
  if (n - c < k) return 1;
  let miss = 1;
  for (let i = n - c + 1; i <= n; i++) miss *= 1 - k / i;
  return 1 - miss;
}

/** One task's episodes: requested runs, completed episodes (not infrastructure errors) and resolved ones. */
export interface TaskCounts {
  taskId: string;
  repo: string;
  runs: number;
  completed: number;
  resolved: number;
}

/**
 * pass@k for k = 1..maxK. `dataset`: every task counts, with n = runs requested (an episode that never
 * completed counts as not resolved); `completed`: only tasks with at least k completed episodes, with
 * n = completed episodes. Entry k−1 is null when no task qualifies.
 */
export function passAtKCurve(tasks: readonly TaskCounts[], maxK: number, against: 'dataset' | 'completed'): (number | null)[] {
  const out: (number | null)[] = [];
  for (let k = 1; k <= maxK; k++) {
    let sum = 0;
    let m = 0;
    for (const t of tasks) {
      const n = against === 'dataset' ? t.runs : t.completed;
      if (n < k) continue;
      sum += passAtK(n, Math.min(t.resolved, n), k);
      m++;
    }
    out.push(m ? sum / m : null);
  }
  return out;
}

export interface Interval {
  low: number;
  high: number;
  level: number;
  samples: number;
}

/** Percentile bootstrap of the mean of `values` (one per task), resampling tasks with replacement; seeded. */
export function bootstrapMeanCI(values: readonly number[], opts: { samples?: number; level?: number; seed?: number } = {}): Interval | null {
  if (values.length === 0) return null;
  return percentileInterval(opts, (mean) => mean(values));
}

/**
 * Two-sample percentile bootstrap of mean(b) − mean(a), each sample resampled on its own (two independent sets of
 * episodes, such as the first and the last third of a run's iterations); null when either is empty.
 */
export function bootstrapDiffCI(a: readonly number[], b: readonly number[], opts: { samples?: number; level?: number; seed?: number } = {}): Interval | null {
  if (a.length === 0 || b.length === 0) return null;
  return percentileInterval(opts, (mean) => mean(b) - mean(a));
}

/** The percentile interval of `draw` over `samples` bootstrap draws; `mean` resamples a set with replacement. */
function percentileInterval(opts: { samples?: number; level?: number; seed?: number }, draw: (mean: (xs: readonly number[]) => number) => number): Interval {
  const samples = opts.samples ?? 2000;
  const level = opts.level ?? 0.95;
  const rand = seededRandom(opts.seed ?? 0);
  const mean = (xs: readonly number[]) => {
    let s = 0;
    for (let i = 0; i < xs.length; i++) s += xs[Math.floor(rand() * xs.length)]!;
    return s / xs.length;
  };
  const draws = new Float64Array(samples);
  for (let k = 0; k < samples; k++) draws[k] = draw(mean);
  draws.sort();
  const q = (p: number) => draws[Math.min(samples - 1, Math.max(0, Math.round(p * (samples - 1))))]!;
  return { low: q((1 - level) / 2), high: q(1 - (1 - level) / 2), level, samples };
}

/** What the summary needs of each completed episode. */
export interface EpisodeFacts {
  taskId: string;
  run: number;
  resolved: boolean;
  /** the episode's reward (agent mode: the tests' verdict; edit mode: the configured reward) */
  reward?: number;
  /** edit mode: the reply was a valid edit */
  validEdit?: boolean;
  end: string;
  steps: number;
  tokens: number;
  responseTokens: number;
  seconds: number;
}

export interface RepoRow {
  repo: string;
  tasks: number;
  episodes: number;
  resolved: number;
  errors: number;
  pass1: number;
}

export interface EvalMetrics {
  tasks: number;
  runs: number;
  episodes: { planned: number; completed: number; resolved: number; errors: number };
  /** mean over tasks of c/n, n = runs requested */
  pass1: number;
  /** mean over tasks with a completed episode of c/n, n = completed episodes */
  pass1Completed: number | null;
  /** bootstrap interval of pass1 over tasks */
  pass1CI: Interval | null;
  /** mean reward over completed episodes (null when none) */
  meanReward: number | null;
  /** edit mode: the share of completed episodes whose reply was a valid edit (null in agent mode) */
  validEditRate: number | null;
  passAtK: (number | null)[];
  passAtKCompleted: (number | null)[];
  ends: Record<string, number>;
  mean: { steps: number; tokens: number; responseTokens: number; seconds: number };
  perRepo: RepoRow[];
  /** pass@1 over the tasks whose tests are strong (lib/swe/quality.ts), beside pass@1 over all; absent when no task has a measured strength */
  strong?: { minStrength: number; tasks: number; pass1: number };
}

/** The evaluation's numbers from its plan (tasks × runs), its completed episodes and its error count per task. */
export function evaluationMetrics(
  plan: { taskIds: readonly string[]; repos: Readonly<Record<string, string>>; runs: number },
  episodes: readonly EpisodeFacts[],
  errors: readonly { taskId: string; run: number }[],
  opts: { bootstrapSamples?: number; seed?: number; strong?: { ids: ReadonlySet<string>; minStrength: number } } = {},
): EvalMetrics {
  const counts = new Map<string, TaskCounts>(plan.taskIds.map((id) => [id, { taskId: id, repo: plan.repos[id] ?? repoOf(id), runs: plan.runs, completed: 0, resolved: 0 }]));
  const ends: Record<string, number> = {};
  const sum = { steps: 0, tokens: 0, responseTokens: 0, seconds: 0, reward: 0, edits: 0, valid: 0 };
  for (const e of episodes) {
    const t = counts.get(e.taskId);
    if (!t) continue;
    t.completed++;
    sum.reward += e.reward ?? (e.resolved ? 1 : 0);
    if (e.validEdit !== undefined) {
      sum.edits++;
      if (e.validEdit) sum.valid++;
    }
    if (e.resolved) t.resolved++;
    ends[e.end] = (ends[e.end] ?? 0) + 1;
    sum.steps += e.steps;
    sum.tokens += e.tokens;
    sum.responseTokens += e.responseTokens;
    sum.seconds += e.seconds;
  }
  const tasks = [...counts.values()];
  const perTask = tasks.map((t) => t.resolved / t.runs);
  const done = tasks.filter((t) => t.completed > 0);
  const completed = episodes.filter((e) => counts.has(e.taskId)).length;
  const errorsByTask = new Map<string, number>();
  for (const e of errors) errorsByTask.set(e.taskId, (errorsByTask.get(e.taskId) ?? 0) + 1);
  const repos = new Map<string, RepoRow>();
  for (const t of tasks) {
    const r = repos.get(t.repo) ?? { repo: t.repo, tasks: 0, episodes: 0, resolved: 0, errors: 0, pass1: 0 };
    r.tasks++;
    r.episodes += t.completed;
    r.resolved += t.resolved;
    r.errors += errorsByTask.get(t.taskId) ?? 0;
    r.pass1 += t.resolved / t.runs;
    repos.set(t.repo, r);
  }
  const mean = (x: number) => (completed ? x / completed : 0);
  return {
    tasks: tasks.length,
    runs: plan.runs,
    episodes: { planned: tasks.length * plan.runs, completed, resolved: tasks.reduce((s, t) => s + t.resolved, 0), errors: errors.length },
    pass1: perTask.length ? perTask.reduce((a, b) => a + b, 0) / perTask.length : 0,
    pass1Completed: done.length ? done.reduce((s, t) => s + t.resolved / t.completed, 0) / done.length : null,
    pass1CI: bootstrapMeanCI(perTask, { samples: opts.bootstrapSamples ?? 2000, seed: opts.seed ?? 0 }),
    meanReward: completed ? sum.reward / completed : null,
    validEditRate: sum.edits ? sum.valid / sum.edits : null,
    passAtK: passAtKCurve(tasks, plan.runs, 'dataset'),
    passAtKCompleted: passAtKCurve(tasks, plan.runs, 'completed'),
    ends,
    mean: { steps: mean(sum.steps), tokens: mean(sum.tokens), responseTokens: mean(sum.responseTokens), seconds: mean(sum.seconds) },
    perRepo: [...repos.values()].map((r) => ({ ...r, pass1: r.pass1 / r.tasks })).sort((a, b) => a.repo.localeCompare(b.repo)),
    ...(opts.strong ? { strong: strongPass1(tasks, opts.strong) } : {}),
  };
}

/** pass@1 (mean of c/n, n = runs requested) over the strong tasks. */
function strongPass1(tasks: readonly TaskCounts[], o: { ids: ReadonlySet<string>; minStrength: number }): { minStrength: number; tasks: number; pass1: number } {
  const chosen = tasks.filter((t) => o.ids.has(t.taskId));
  return { minStrength: o.minStrength, tasks: chosen.length, pass1: chosen.length ? chosen.reduce((s, t) => s + t.resolved / t.runs, 0) / chosen.length : 0 };
}

/** `owner__name-hash` (SWE-bench instance ids) → `owner/name`. */
export function repoOf(instanceId: string): string {
  const m = /^(.+?)__(.+)-[^-]+$/.exec(instanceId);
  return m ? `${m[1]}/${m[2]}` : instanceId;
}

const pct = (x: number | null | undefined) => (x === null || x === undefined ? '   -  ' : `${(100 * x).toFixed(1).padStart(5)}%`);

/** The summary table `swerl eval` and `swerl eval report` print. */
export function formatEvalMetrics(m: EvalMetrics, title = 'evaluation'): string {
  const lines: string[] = [];
  lines.push(
    `${title}: ${m.tasks} tasks × ${m.runs} runs = ${m.episodes.planned} episodes; completed ${m.episodes.completed}, resolved ${m.episodes.resolved}, errors ${m.episodes.errors}`,
  );
  const ci = m.pass1CI ? ` (${Math.round(m.pass1CI.level * 100)}% CI ${pct(m.pass1CI.low).trim()} – ${pct(m.pass1CI.high).trim()})` : '';
  lines.push(`pass@1 ${pct(m.pass1).trim()}${ci} against the dataset; ${pct(m.pass1Completed).trim()} against completed episodes`);
  if (m.validEditRate !== null && m.validEditRate !== undefined) {
    lines.push(`mean reward ${m.meanReward === null ? '-' : m.meanReward.toFixed(3)}; valid edits ${pct(m.validEditRate).trim()} of completed episodes`);
  }
  if (m.strong)
    lines.push(
      `pass@1 all tasks ${pct(m.pass1).trim()} (${m.tasks}) | strong tasks ${m.strong.tasks ? pct(m.strong.pass1).trim() : '-'} (${m.strong.tasks}, test strength ≥ ${m.strong.minStrength})`,
    );
  lines.push(`  k        ${m.passAtK.map((_, i) => String(i + 1).padStart(6)).join(' ')}`);
  lines.push(`  pass@k   ${m.passAtK.map(pct).join(' ')}`);
  lines.push(`  (compl.) ${m.passAtKCompleted.map(pct).join(' ')}`);
  lines.push(
    `ends: ${
      Object.entries(m.ends)
        .sort()
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || 'none'
    }`,
  );
  lines.push(
    `mean per episode: ${m.mean.steps.toFixed(1)} steps, ${Math.round(m.mean.tokens)} tokens (${Math.round(m.mean.responseTokens)} generated), ${m.mean.seconds.toFixed(1)} s`,
  );
  lines.push('repository                          tasks  episodes  resolved  errors  pass@1');
  for (const r of m.perRepo) {
    lines.push(
      `${r.repo.padEnd(34).slice(0, 34)}  ${String(r.tasks).padStart(5)}  ${String(r.episodes).padStart(8)}  ${String(r.resolved).padStart(8)}  ${String(r.errors).padStart(6)}  ${pct(r.pass1)}`,
    );
  }
  return lines.join('\n');
}

/**
 * The errors section of the summary: episodes that could not happen (infrastructure, never scored), one line per
 * distinct reason with its count and first episodes (`task/run`), the reason clipped to one line.
 */
export function formatEvalErrors(errors: readonly { taskId: string; run: number; reason: string }[], maxReasons = 10): string {
  if (errors.length === 0) return 'errors: none';
  const byReason = new Map<string, string[]>();
  for (const e of errors) {
    const reason = e.reason.replace(/\s+/g, ' ').trim();
    const key = reason.length > 300 ? `${reason.slice(0, 297)}...` : reason;
    byReason.set(key, [...(byReason.get(key) ?? []), `${e.taskId}/${e.run}`]);
  }
  const rows = [...byReason.entries()].sort((a, b) => b[1].length - a[1].length);
  const lines = [`errors (${errors.length} episodes that could not happen; not scored):`];
  for (const [reason, eps] of rows.slice(0, maxReasons)) {
    lines.push(`  ${eps.length} × ${reason}`);
    lines.push(`      ${eps.slice(0, 3).join(', ')}${eps.length > 3 ? `, … (${eps.length - 3} more)` : ''}`);
  }
  if (rows.length > maxReasons) lines.push(`  … ${rows.length - maxReasons} more reasons (summary.json lists every error)`);
  return lines.join('\n');
}
