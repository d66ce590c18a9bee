// synthesizeTasks (issue 28, `swerl tasks synth`): SWE tasks made from repositories with tests. Per repository
// its source and image, a baseline (flaky tests excluded; a failing baseline names its tests), candidates
// (tree-sitter mutations, compile-checked); then validation in parallel sandbox lanes until each
// repository has its fair share of single-bug tasks, the harder tier (2–3 bugs) likewise, and the task set
// written. Resumable by its id after any crash: every verdict is stored as it is made. Progress: query `status`, the UI's current details, search attributes
// SynthValidated and SynthPhase.
import { ActivityFailure, ApplicationFailure, condition, proxyActivities, setCurrentDetails, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.ts';
import { FailureType, INVALID_INPUT, nonRetryable, RetryPolicies } from '../lib/failures.ts';
import { mapInLanes } from '../lib/pool.ts';
import { validateSynthInput, type SynthInput } from '../lib/factory/config.ts';
import { selection, TierPlan, type TierState } from '../lib/factory/plan.ts';
import { validationRepos } from '../lib/factory/split.ts';
import {
  REJECT_REASONS,
  type BaselineSummary,
  type CandidatesSummary,
  type ChunkResult,
  type RepoInfo,
  type SynthRef,
  type SynthResult,
  type SynthStatus,
  type Tier,
} from '../lib/factory/shapes.ts';
import { TASK_QUEUES } from '../lib/training/shapes.ts';
import { SYNTH_PHASE_SA, SYNTH_VALIDATED_SA, synthFinishSignal, synthStatusQuery } from './synthesize-signals.ts';

type Activities = ReturnType<typeof createActivities>;

const prep = proxyActivities<Activities>({
  taskQueue: TASK_QUEUES.rollout,
  startToCloseTimeout: '2 hours',
  heartbeatTimeout: '2 minutes',
  retry: RetryPolicies.sandboxed(3),
});
const lanes = proxyActivities<Activities>({
  taskQueue: TASK_QUEUES.rollout,
  startToCloseTimeout: '12 hours',
  heartbeatTimeout: '2 minutes',
  retry: RetryPolicies.sandboxed(5),
});
/** least workflow time between two search-attribute upserts */
const PROGRESS_EVERY_MS = 2000;

export async function synthesizeTasks(raw: unknown): Promise<SynthResult> {
  const v = validateSynthInput(raw);
  if (!v.ok) throw nonRetryable(FailureType.InvalidInput, `invalid factory input: ${v.errors.join('; ')}`);
  const input = v.input;
  const ref = refOf(input);
  const progress = new SynthProgress(ref, input);
  // a finish signal ends validation early: no new chunks, no harder tier; what is validated is written
  const finish = { requested: false };
  setHandler(synthFinishSignal, () => {
    finish.requested = true;
  });

  // 1. repositories: source, image, baseline, candidates; a bad one is left out and named (all bad: the run fails)
  const { repos, failed } = await prepareRepos(input, ref, progress);
  const valRepos = splitOf(
    repos.map((r) => r.info.name),
    input,
  );
  const states = repos.map((r) => ({ info: r.info, single: { total: r.candidates, next: 0, valid: [] } as TierState, multi: { total: 0, next: 0, valid: [] } as TierState }));

  // 2. single bugs, 3. the harder tier from validated singles, then singles again for what it could not fill
  const multiTarget = Math.round(input.max * input.multiFraction);
  let singleTarget = input.max - multiTarget;
  await validateTier('single', states, singleTarget, ref, input.concurrency, progress, finish);
  if (multiTarget > 0 && !finish.requested) {
    progress.phase('combining');
    await mapInLanes(states, input.concurrency, async (s) => {
      const r = await prep.synthCombine({ ref, repo: s.info, singles: s.single.valid, max: multiTarget * 4 });
      s.multi.total = r.total;
    });
    await validateTier('multi', states, multiTarget, ref, input.concurrency, progress, finish);
    const multiGot = selection(
      states.map((s) => s.multi),
      multiTarget,
    ).flat().length;
    if (multiGot < multiTarget && !finish.requested) {
      singleTarget += multiTarget - multiGot;
      await validateTier('single', states, singleTarget, ref, input.concurrency, progress, finish);
    }
  }

  // 4. the task set
  progress.phase('writing');
  const chosen = {
    single: selection(
      states.map((s) => s.single),
      singleTarget,
    ),
    multi: selection(
      states.map((s) => s.multi),
      multiTarget,
    ),
  };
  const written = await prep.synthWrite({
    ref,
    repos: states.map((s) => s.info),
    selection: (['single', 'multi'] as const).flatMap((tier) => chosen[tier].map((indices, repo) => ({ repo, tier, indices }))).filter((x) => x.indices.length),
    validationRepos: valRepos,
    ...(input.issueWriter ? { issueWriter: input.issueWriter } : {}),
    report: progress.report(failed),
  });
  progress.phase('done');
  return {
    outDir: input.outDir,
    tasksFile: written.tasksFile,
    tasks: written.tasks,
    train: written.train,
    validation: written.validation,
    validationRepos: valRepos,
    tried: progress.status.tried,
    rejected: progress.status.rejected,
  };
}

/** The validation repositories; a named one that is not among them fails the run (naming it). */
function splitOf(names: string[], input: SynthInput): string[] {
  try {
    return validationRepos(names, input.validation);
  } catch (e) {
    throw nonRetryable(FailureType.InvalidInput, `synth.${(e as Error).message}`);
  }
}

function refOf(input: SynthInput): SynthRef {
  return {
    synthId: input.synthId ?? workflowInfo().workflowId,
    storeUrl: input.storeUrl ?? `file://${input.outDir.replace(/\/+$/, '')}/.work`,
    outDir: input.outDir,
    seed: input.seed,
    backend: input.backend,
    ...(input.limits ? { limits: input.limits } : {}),
    timeoutS: input.timeoutS,
    maxFailToPass: input.maxFailToPass,
    strengthK: input.strengthK,
  };
}

/** Each repository prepared, its baseline run and its candidates made, `concurrency` at a time. */
async function prepareRepos(
  input: SynthInput,
  ref: SynthRef,
  progress: SynthProgress,
): Promise<{ repos: { info: RepoInfo; candidates: number }[]; failed: { repo: string; error: string }[] }> {
  const failed: { index: number; repo: string; error: string }[] = [];
  const done = await mapInLanes(input.repos, input.concurrency, async (repo, index) => {
    try {
      const info = await prep.synthPrepareRepo({ ref, repo, index });
      progress.repoNamed(index, info.name);
      const b = await prep.synthBaseline({ ref, repo: info });
      progress.repoTests(index, b);
      const c = await prep.synthCandidates({ ref, repo: info, strategies: input.strategies, perFunction: input.perFunction });
      progress.repoCandidates(index, c);
      return { info, candidates: c.total };
    } catch (e) {
      const cause = e instanceof ActivityFailure ? e.cause : undefined;
      if (!(cause instanceof ApplicationFailure) || !INVALID_INPUT.includes(cause.type as FailureType)) throw e;
      failed.push({ index, repo: repo.name ?? repo.source, error: cause.message });
      return null;
    }
  });
  const repos = done.filter((r): r is { info: RepoInfo; candidates: number } => r !== null);
  const names = new Set<string>();
  for (const r of repos) {
    if (names.has(r.info.name)) throw nonRetryable(FailureType.InvalidInput, `synth.repos: two repositories are named ${JSON.stringify(r.info.name)} (give each a distinct name)`);
    names.add(r.info.name);
  }
  if (repos.length === 0) throw nonRetryable(FailureType.InvalidInput, failed.map((f) => f.error).join('; '));
  for (const f of failed) progress.repoFailed(f.index, f.error);
  return { repos, failed: failed.map((f) => ({ repo: f.repo, error: f.error })) };
}

/**
 * Validates candidates of `tier` until each repository has its share of `target` valid ones or none left: `concurrency`
 * lanes, each taking the plan's next chunk whenever it is free (lib/factory/plan.ts says why the tasks kept do not
 * depend on that timing).
 */
async function validateTier(
  tier: Tier,
  states: { info: RepoInfo; single: TierState; multi: TierState }[],
  target: number,
  ref: SynthRef,
  concurrency: number,
  progress: SynthProgress,
  finish: { requested: boolean },
): Promise<void> {
  progress.phase('validating');
  const plan = new TierPlan(
    states.map((s) => s[tier]),
    target,
  );
  let completed = 0;
  const lane = async (): Promise<void> => {
    for (;;) {
      if (finish.requested) return;
      const ch = plan.nextChunk();
      if (!ch) {
        if (plan.idle()) return;
        const seen = completed;
        // another lane's verdicts may open more work (a repository below its share, or one that ran out)
        await condition(() => completed !== seen || finish.requested);
        continue;
      }
      const r = await lanes.synthValidateChunk({ ref, repo: states[ch.repo]!.info, tier, from: ch.from, to: ch.to });
      plan.complete(ch, r.valid);
      completed++;
      progress.chunkDone(r);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
}

/** The run's status (query), current details (UI) and search attributes. */
class SynthProgress {
  readonly status: SynthStatus;
  private lastUpsert = -Infinity;
  private runs = 0;
  private cpuSeconds = 0;
  private laneSeconds = 0;

  constructor(ref: SynthRef, input: SynthInput) {
    this.status = {
      synthId: ref.synthId,
      phase: 'preparing',
      target: input.max,
      validated: 0,
      tried: 0,
      candidates: 0,
      rejected: {},
      repos: input.repos.map((r) => ({ name: r.name ?? r.source, tried: 0, validated: { single: 0, multi: 0 } })),
      outDir: input.outDir,
    };
    setHandler(synthStatusQuery, () => this.status);
    upsertSearchAttributes([
      { key: SYNTH_PHASE_SA, value: 'preparing' },
      { key: SYNTH_VALIDATED_SA, value: 0 },
    ]);
    this.details();
  }

  phase(p: SynthStatus['phase']): void {
    this.status.phase = p;
    upsertSearchAttributes([
      { key: SYNTH_PHASE_SA, value: p },
      { key: SYNTH_VALIDATED_SA, value: this.status.validated },
    ]);
    this.details();
  }

  repoNamed(i: number, name: string): void {
    this.status.repos[i]!.name = name;
  }
  repoFailed(i: number, error: string): void {
    this.status.repos[i]!.error = error;
  }
  repoTests(i: number, b: BaselineSummary): void {
    Object.assign(this.status.repos[i]!, { tests: b.passing, flaky: b.flaky.length, testSeconds: Math.round(b.seconds * 10) / 10 });
    this.cpuSeconds += b.cpuSeconds;
  }
  repoCandidates(i: number, c: CandidatesSummary): void {
    Object.assign(this.status.repos[i]!, { candidates: c.total, unparsable: c.stats.unparsable.length, doesNotCompile: c.stats.doesNotCompile, duplicates: c.stats.duplicates });
    this.status.candidates += c.total;
    this.details();
  }

  chunkDone(r: ChunkResult): void {
    const s = this.status;
    const repo = s.repos[r.repo];
    s.tried += r.to - r.from;
    s.validated += r.valid.length;
    if (repo) {
      repo.tried += r.to - r.from;
      repo.validated[r.tier] += r.valid.length;
    }
    for (const reason of REJECT_REASONS) if (r.rejected[reason]) s.rejected[reason] = (s.rejected[reason] ?? 0) + r.rejected[reason]!;
    this.runs += r.runs;
    this.cpuSeconds += r.cpuSeconds;
    this.laneSeconds += r.seconds;
    if (Date.now() - this.lastUpsert >= PROGRESS_EVERY_MS) {
      this.lastUpsert = Date.now();
      upsertSearchAttributes([{ key: SYNTH_VALIDATED_SA, value: s.validated }]);
      this.details();
    }
  }

  private details(): void {
    const s = this.status;
    const rej = Object.entries(s.rejected)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ');
    setCurrentDetails(
      [
        `**${s.phase}**: ${s.validated} validated of ${s.target} asked, ${s.tried} of ${s.candidates} candidates tried${rej ? ` (rejected: ${rej})` : ''}`,
        '',
        '| repository | tests | candidates | tried | single | multi |',
        '| --- | --- | --- | --- | --- | --- |',
        ...s.repos.map(
          (r) =>
            `| ${r.name} | ${r.error ? `left out: ${r.error.slice(0, 120)}` : (r.tests ?? '')} | ${r.candidates ?? ''} | ${r.tried} | ${r.validated.single} | ${r.validated.multi} |`,
        ),
        '',
        `output \`${s.outDir}\``,
      ].join('\n'),
    );
  }

  report(failed: { repo: string; error: string }[]): Record<string, unknown> {
    return { ...this.status, phase: undefined, failedRepos: failed, runs: this.runs, sandboxCpuSeconds: Math.round(this.cpuSeconds), laneSeconds: Math.round(this.laneSeconds) };
  }
}
