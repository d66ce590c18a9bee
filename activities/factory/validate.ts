// Validation of candidates in a lane (issue 28). For each candidate, cheapest check first:
//   1. selection   the tests that run the mutated functions (the baseline's coverage map); none: rejected unrun;
//   2. screening   the fastest of those tests (a quarter of a full run's time) with the bug, stopping at the first
//                  failure; all pass: rejected;
//   3. full run    the full test command with the bug: FAIL_TO_PASS = tests that passed at baseline and fail now
//                  (capped), every other baseline-passing test must still pass;
//   4. strength    K wrong fixes at the fix's site (lib/factory/alternatives.ts), each run on FAIL_TO_PASS, then on the
//                  rest of the selection, stopping at the first failure: how many the tests reject;
//   5. the buggy tree's git commit (a fixed identity and date: the id depends on the tree alone).
// Each verdict is stored before the next candidate starts, so a retried activity (a killed worker, a dead
// sandbox past the lane's own retries) resumes where it stopped; infrastructure never becomes a verdict.
import { hashInts, hashString } from '../../lib/seed.ts';
import { keys, openStore } from '../../lib/store.ts';
import { wrongFixes } from '../../lib/factory/alternatives.ts';
import { buggyFiles, multiCandidates, type Candidate } from '../../lib/factory/candidates.ts';
import type { TestFailure } from '../../lib/factory/problem.ts';
import { COMMIT_IDENTITY, type ChunkResult, type RejectReason, type RepoInfo, type SynthRef, type Tier, type Verdict } from '../../lib/factory/shapes.ts';
import { createSandboxBackend } from '../sandbox/index.ts';
import { heartbeating } from '../swe.ts';
import type { Lane, RunResult } from './lane.ts';
import { mutableSources, newLane, type Baseline } from './repo.ts';

/** failure details kept per verdict (the problem statement shows the first two) */
const KEPT_FAILURES = 3;
/** a run's limit: this many times the baseline's time for the same tests, plus start-up (a busy host slows every run alike) */
const TIME_FACTOR = 5;
const STARTUP_S = 30;

/** Tests that run each (file, line range): the baseline's coverage map, inverted. */
export class CoverageIndex {
  private readonly byFile = new Map<string, { line: number; tests: string[] }[]>();

  constructor(b: Pick<Baseline, 'functions' | 'coverage' | 'passing'>) {
    const passing = new Set(b.passing);
    const testsOf = new Map<number, string[]>();
    for (const [id, fns] of Object.entries(b.coverage)) {
      if (!passing.has(id)) continue;
      for (const f of fns) testsOf.set(f, [...(testsOf.get(f) ?? []), id]);
    }
    b.functions.forEach((fn, i) => {
      if (!fn) return;
      const list = this.byFile.get(fn.file) ?? [];
      list.push({ line: fn.line, tests: testsOf.get(i) ?? [] });
      this.byFile.set(fn.file, list);
    });
  }

  /** Tests that ran code starting in lines [from, to] of `file`. */
  tests(file: string, from: number, to: number): Set<string> {
    const out = new Set<string>();
    for (const c of this.byFile.get(file) ?? []) if (c.line >= from && c.line <= to) for (const t of c.tests) out.add(t);
    return out;
  }
}

interface Context {
  ref: SynthRef;
  repo: RepoInfo;
  baseline: Baseline;
  cover: CoverageIndex;
  files: Map<string, string>;
  limits: Record<string, number>;
}

/** A run's limit; a hanging test is stopped sooner, by its own limit (testLimits). */
function limit(ctx: Context, ids: readonly string[] | null): number {
  const base = ids ? ids.reduce((s, id) => s + (ctx.baseline.seconds[id] ?? 0), 0) : ctx.baseline.fullSeconds;
  return Math.max(60, Math.min(4 * ctx.ref.timeoutS, Math.ceil(base * TIME_FACTOR + STARTUP_S)));
}

/** a test's call may take this many times its baseline time, and at least TEST_LIMIT_S */
const TEST_FACTOR = 20;
const TEST_LIMIT_S = 10;

/** Per-test limits of a call: the default, and the tests slow enough at baseline to need more. */
export function testLimits(b: Pick<Baseline, 'seconds'>): Record<string, number> {
  const out: Record<string, number> = { '*': TEST_LIMIT_S };
  for (const [id, s] of Object.entries(b.seconds)) if (s * TEST_FACTOR > TEST_LIMIT_S) out[id] = Math.ceil(s * TEST_FACTOR);
  return out;
}

/** The selection: baseline-passing tests that run a mutated function, fastest first. */
function selection(ctx: Context, c: Candidate): string[] {
  const sel = new Set<string>();
  for (const m of c.mutations) for (const t of ctx.cover.tests(m.file, m.fn.startLine, m.fn.endLine)) sel.add(t);
  return [...sel].sort((a, b) => (ctx.baseline.seconds[a] ?? 0) - (ctx.baseline.seconds[b] ?? 0) || (a < b ? -1 : 1));
}

/** the screening runs the fastest selected tests up to this share of a full run's time (at least SCREEN_MIN_S, SCREEN_MIN_TESTS) */
const SCREEN_SHARE = 0.25;
const SCREEN_MIN_S = 3;
const SCREEN_MIN_TESTS = 20;

/**
 * The screening's tests: the fastest of the selection within a budget. A bug only slower tests catch is rejected
 * (`tests_pass`) rather than paid for with a near-full run; a bug that survives them all is cheap to reject.
 */
function screened(ctx: Context, sel: readonly string[]): string[] {
  const budget = Math.max(SCREEN_MIN_S, SCREEN_SHARE * ctx.baseline.fullSeconds);
  const out: string[] = [];
  let spent = 0;
  for (const id of sel) {
    spent += ctx.baseline.seconds[id] ?? 0;
    if (out.length >= SCREEN_MIN_TESTS && spent > budget) break;
    out.push(id);
  }
  return out;
}

/** One candidate's verdict (see the file's head). */
export async function judgeCandidate(lane: Lane, ctx: Context, c: Candidate): Promise<Verdict> {
  const t0 = Date.now();
  let runs = 0;
  const done = (v: Omit<Verdict, 'index' | 'tier' | 'runs' | 'seconds'>): Verdict => ({ index: c.index, tier: c.tier, ...v, runs, seconds: (Date.now() - t0) / 1000 });
  const reject = (reason: RejectReason) => done({ valid: false, reason });
  const sel = selection(ctx, c);
  if (sel.length === 0) return reject('no_covering_test');
  const bug = buggyFiles(ctx.files, c);
  const hung = (r: RunResult) => r.timedOut || [...r.tests.values()].some((t) => t.timedOut);

  runs++;
  const first = screened(ctx, sel);
  const screen = await lane.run({ files: bug, select: first, stopAtFirst: true, timeoutS: limit(ctx, first), testLimits: ctx.limits });
  if (hung(screen)) return reject('timeout');
  if (screen.collectErrors.length) return reject('collection_error');
  if (first.every((id) => screen.tests.get(id)?.outcome === 'PASSED')) return reject('tests_pass');

  runs++;
  const full = await lane.run({ files: bug, timeoutS: limit(ctx, null), testLimits: ctx.limits });
  if (hung(full)) return reject('timeout');
  if (full.collectErrors.length) return reject('collection_error');
  const flaky = new Set(ctx.baseline.flaky);
  const failing: string[] = [];
  for (const id of ctx.baseline.passing) {
    if (flaky.has(id)) continue;
    const o = full.tests.get(id)?.outcome ?? 'MISSING';
    if (o === 'FAILED' || o === 'ERROR') failing.push(id);
    else if (o !== 'PASSED') return reject('tests_changed');
  }
  // a failure outside the selection cannot come from the bug unless it repeats (a wall-clock test on a busy host does not)
  const selected = new Set(sel);
  const outside = failing.filter((id) => !selected.has(id));
  let noise = new Set<string>();
  if (outside.length) {
    runs++;
    const again = await lane.run({ files: bug, select: outside, timeoutS: limit(ctx, outside), testLimits: ctx.limits });
    noise = new Set(outside.filter((id) => again.tests.get(id)?.outcome === 'PASSED'));
  }
  const f2p = failing.filter((id) => !noise.has(id));
  if (f2p.length === 0) return reject('tests_pass');
  if (f2p.length > ctx.ref.maxFailToPass) return reject('too_many_failing');
  const failures: Record<string, TestFailure> = {};
  for (const id of f2p.slice(0, KEPT_FAILURES)) {
    const f = full.tests.get(id)?.failure;
    if (f) failures[id] = f;
  }

  const changed = Object.keys(bug).map((path) => ({ path, base: bug[path]!, gold: ctx.files.get(path)! }));
  const fixes = await wrongFixes(changed, ctx.ref.strengthK, hashInts(ctx.ref.seed, hashString(c.dedupeKey)));
  // a wrong fix runs FAIL_TO_PASS first (most fail there, and only their files are collected), then the other selected tests
  const rest = sel.filter((id) => !f2p.includes(id) && !noise.has(id));
  const passes = async (files: Record<string, string>, ids: string[]): Promise<boolean> => {
    if (ids.length === 0) return true;
    runs++;
    const r = await lane.run({ files, select: ids, stopAtFirst: true, timeoutS: limit(ctx, ids), testLimits: ctx.limits });
    return !r.timedOut && r.collectErrors.length === 0 && ids.every((id) => r.tests.get(id)?.outcome === 'PASSED');
  };
  const accepted: string[] = [];
  for (const w of fixes) if ((await passes(w.files, f2p)) && (await passes(w.files, rest))) accepted.push(w.what);
  runs++;
  const baseCommit = await lane.commitOf(bug, COMMIT_IDENTITY);
  return done({
    valid: true,
    failToPass: f2p,
    failures,
    testSeconds: full.seconds,
    strength: { tried: fixes.length, rejected: fixes.length - accepted.length, accepted },
    baseCommit,
  });
}

const contexts = new Map<string, Promise<Context>>();

/** The repository's baseline, coverage index and files, loaded once per worker. */
async function contextOf(ref: SynthRef, repo: RepoInfo): Promise<Context> {
  const k = `${ref.storeUrl}\0${ref.synthId}\0${repo.slug}`;
  let p = contexts.get(k);
  if (!p) {
    p = (async () => {
      const baseline = await openStore(ref.storeUrl).getJson<Baseline>(keys.synthBaseline(ref.synthId, repo.slug));
      if (!baseline) throw new Error(`no baseline of ${repo.name} in ${ref.storeUrl}`);
      const files = new Map((await mutableSources(ref, repo)).map((s) => [s.path, s.text]));
      return { ref, repo, baseline, cover: new CoverageIndex(baseline), files, limits: testLimits(baseline) };
    })();
    p.catch(() => contexts.delete(k));
    contexts.set(k, p);
  }
  return p;
}

const candidateLists = new Map<string, Promise<Candidate[]>>();

export function candidatesOf(ref: SynthRef, repo: RepoInfo, tier: Tier): Promise<Candidate[]> {
  const key = keys.synthCandidates(ref.synthId, repo.slug, tier);
  const k = `${ref.storeUrl}\0${key}`;
  let p = candidateLists.get(k);
  if (!p) {
    p = (async () => {
      const list = await openStore(ref.storeUrl).getJson<Candidate[]>(key);
      if (!list) throw new Error(`no ${tier} candidates of ${repo.name} in ${ref.storeUrl}`);
      return list;
    })();
    p.catch(() => candidateLists.delete(k));
    candidateLists.set(k, p);
  }
  return p;
}

/** Validates candidates [from, to) of a repository's tier in one lane; verdicts stored one by one. */
export async function synthValidateChunk(input: { ref: SynthRef; repo: RepoInfo; tier: Tier; from: number; to: number }): Promise<ChunkResult> {
  const { ref, repo, tier } = input;
  const t0 = Date.now();
  const ctx = await contextOf(ref, repo);
  const list = await candidatesOf(ref, repo, tier);
  const store = openStore(ref.storeUrl);
  const lane = newLane(ref, repo, await createSandboxBackend(ref.backend));
  const result: ChunkResult = { repo: repo.index, tier, from: input.from, to: input.to, valid: [], rejected: {}, runs: 0, cpuSeconds: 0, seconds: 0 };
  const work = async () => {
    for (const c of list.slice(input.from, input.to)) {
      const key = keys.synthVerdict(ref.synthId, repo.slug, tier, c.index);
      let v = await store.getJson<Verdict>(key);
      if (!v) {
        v = await judgeCandidate(lane, ctx, c);
        await store.putJson(key, v);
        result.runs += v.runs;
      }
      if (v.valid) result.valid.push(c.index);
      else result.rejected[v.reason!] = (result.rejected[v.reason!] ?? 0) + 1;
    }
  };
  try {
    await heartbeating(`validating ${repo.name} ${tier} ${input.from}..${input.to}`, work());
  } finally {
    await lane.close();
    result.cpuSeconds = lane.cpuSeconds;
    result.seconds = (Date.now() - t0) / 1000;
  }
  return result;
}

/** The harder tier's candidates of a repository: combinations of its validated singles, stored. */
export async function synthCombine(input: { ref: SynthRef; repo: RepoInfo; singles: number[]; max: number }): Promise<{ repo: number; total: number }> {
  const { ref, repo } = input;
  const store = openStore(ref.storeUrl);
  const key = keys.synthCandidates(ref.synthId, repo.slug, 'multi');
  const stored = await store.getJson<Candidate[]>(key);
  if (stored) return { repo: repo.index, total: stored.length };
  const singles = await candidatesOf(ref, repo, 'single');
  const chosen = input.singles.map((i) => singles[i]!).filter(Boolean);
  const sources = await mutableSources(ref, repo);
  const combos = await multiCandidates(repo.name, sources, chosen, { seed: ref.seed, max: input.max });
  await store.putJson(key, combos);
  return { repo: repo.index, total: combos.length };
}
