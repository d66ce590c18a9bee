// The factory's work on a repository before any candidate (issue 28): the source normalised and its image
// built, the baseline (the full test command twice; a test whose verdict differs is flaky and excluded; a
// failing baseline stops everything and names the failing tests; the second run also records which
// functions each test calls), and the candidates (lib/factory/candidates.ts) from the package's files.
import { createSandboxBackend } from '../sandbox/index.ts';
import { ensureBaseImage, ensureTaskImage } from '../images.ts';
import { runsPytest } from '../../lib/swe/grade-plan.ts';
import { keys, openStore } from '../../lib/store.ts';
import { FailureType, nonRetryable } from '../../lib/failures.ts';
import { parseRepoSource, type SynthRepo } from '../../lib/factory/config.ts';
import { isMutable, singleCandidates, type Candidate, type SourceFile } from '../../lib/factory/candidates.ts';
import type { BaselineSummary, CandidatesSummary, RepoInfo, SynthRef } from '../../lib/factory/shapes.ts';
import type { TestOutcome } from '../../lib/swe/grading.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { Lane, type RunResult } from './lane.ts';
import { loadSource, pythonFilesOf, readTarball, sha256, SourceError, testFilesIn, writeTarball, type TarEntry } from './source.ts';
import { heartbeating } from '../swe.ts';
import { clockReadingTests } from '../../lib/swe/canaries.ts';

/** What the baseline found (stored; candidates are judged against it). */
export interface Baseline {
  /** PASSED in both runs, in the first run's order: FAIL_TO_PASS and PASS_TO_PASS come from these */
  passing: string[];
  flaky: string[];
  /** passing twice but read a clock (of `flaky`, which lists them too): never listed, as flaky ones are not */
  clocked?: string[];
  /** neither passing nor failing (SKIPPED, XFAIL, XPASS) */
  other: Record<string, TestOutcome>;
  /** per-test seconds of the first run */
  seconds: Record<string, number>;
  /** wall time of the first (untraced) full run */
  fullSeconds: number;
  /** code objects the traced run saw, and per test the indices of those it ran */
  functions: { file: string; line: number }[];
  coverage: Record<string, number[]>;
  /** files holding the collected tests */
  testFiles: string[];
}

const SKIP_TOP = new Set(['tests', 'test', 'testing', 'docs', 'doc', 'examples', 'example', 'benchmarks', 'bench', 'scripts', 'tools', 'ci', '.github']);
const SKIP_MODULES = new Set(['setup.py', 'conftest.py', 'noxfile.py', 'tasks.py', 'fabfile.py', 'docs.py']);

/** Package directories when none are given: top-level directories (children of src/) and modules with Python source outside tests and docs. */
export function defaultPackageDirs(paths: readonly string[]): string[] {
  const out = new Set<string>();
  for (const p of paths) {
    if (!p.endsWith('.py')) continue;
    const parts = p.split('/');
    if (parts.length === 1) {
      if (!SKIP_MODULES.has(p) && !/^test_|_test\.py$/.test(p)) out.add(p);
      continue;
    }
    if (SKIP_TOP.has(parts[0]!) || parts[0]!.startsWith('.')) continue;
    if (parts[0] === 'src' && parts.length > 2) out.add(`src/${parts[1]}`);
    else if (parts[0] === 'src') out.add(p);
    else out.add(parts[0]!);
  }
  return [...out].sort();
}

const fail = (msg: string) => nonRetryable(FailureType.InvalidInput, msg);

/** Normalises the source into the store and builds the repository's image (idempotent). */
export async function synthPrepareRepo(input: { ref: SynthRef; repo: SynthRepo; index: number }): Promise<RepoInfo> {
  const { ref, repo } = input;
  const spec = parseRepoSource(repo.source);
  let loaded: Awaited<ReturnType<typeof loadSource>>;
  try {
    loaded = await loadSource(repo.source, spec);
  } catch (e) {
    if (e instanceof SourceError) throw fail(e.message);
    throw e;
  }
  const name = repo.name ?? loaded.defaultName;
  const label = `repository ${name} (${repo.source})`;
  const paths = loaded.entries.map((e) => e.path);
  const pythonFiles = pythonFilesOf(loaded.entries);
  if (testFilesIn(paths, pythonFiles).length === 0) throw fail(`${label} has no tests: no file named ${pythonFiles.join(' or ')} (pytest's python_files)`);
  const packageDirs = repo.packageDirs ?? defaultPackageDirs(paths);
  const mutable = paths.filter((p) => isMutable(p, packageDirs, repo.packageDirsExclude));
  if (mutable.length === 0) throw fail(`${label} has no Python source to put bugs in (package dirs ${JSON.stringify(packageDirs)}, excluding tests)`);
  if (!runsPytest(repo.testCmd)) throw fail(`${label}: test command ${JSON.stringify(repo.testCmd)} does not run pytest (the factory reads pytest's per-test results)`);
  const tarball = await writeTarball(loaded.entries);
  const provenance = { ...loaded.provenance, sha256: loaded.provenance.sha256 || sha256(tarball), ...(repo.commit ? { commit: repo.commit } : {}) };
  const short = (provenance.commit ?? provenance.sha256).slice(0, 7);
  const slug = name.replace('/', '__');
  const store = openStore(ref.storeUrl);
  const tarballKey = keys.synthRepoTarball(ref.synthId, slug, short);
  if (!(await store.exists(tarballKey))) await store.put(tarballKey, tarball);
  await ensureBaseImage();
  // the repository's own image: the recipe of a task's image, with the repository as given
  const recipe: SweTask = {
    instance_id: `factory-${slug}-${short}`,
    repo: name,
    base_commit: short,
    problem_statement: '-',
    patch: '',
    test_patch: '',
    FAIL_TO_PASS: [],
    PASS_TO_PASS: [],
    test_cmd: repo.testCmd,
    source_tarball: store.dirFor(tarballKey),
  };
  const { image } = await ensureTaskImage(recipe);
  if (ref.backend === 'kubernetes') await loadIntoLocalCluster(image);
  return { index: input.index, name, slug, short, tarballKey, image, testCmd: repo.testCmd, packageDirs, packageDirsExclude: repo.packageDirsExclude, provenance };
}

/** swerl's own cluster cannot pull: images go in from Docker (another cluster must reach them itself). */
async function loadIntoLocalCluster(image: string): Promise<void> {
  const { clusterStatus, loadImages } = await import('../../services/k8s-cluster.ts');
  const st = await clusterStatus().catch(() => null);
  if (st?.running) await loadImages([image]);
}

const sourceCache = new Map<string, Promise<TarEntry[]>>();

/** The repository's files (normalised tarball from the store), cached per worker. */
export function repoEntries(ref: SynthRef, repo: RepoInfo): Promise<TarEntry[]> {
  const k = `${ref.storeUrl}\0${repo.tarballKey}`;
  let p = sourceCache.get(k);
  if (!p) {
    p = (async () => {
      const b = await openStore(ref.storeUrl).get(repo.tarballKey);
      if (!b) throw new Error(`the normalised source ${repo.tarballKey} is missing from ${ref.storeUrl}`);
      return readTarball(b);
    })();
    p.catch(() => sourceCache.delete(k));
    sourceCache.set(k, p);
  }
  return p;
}

/** The repository's files that `keep` takes, as text. */
async function sourcesWhere(ref: SynthRef, repo: RepoInfo, keep: (path: string) => boolean): Promise<SourceFile[]> {
  const entries = await repoEntries(ref, repo);
  return entries.filter((e) => !e.link && keep(e.path)).map((e) => ({ path: e.path, text: e.data.toString('utf8') }));
}

/** The package files bugs may go in, as text. */
export function mutableSources(ref: SynthRef, repo: RepoInfo): Promise<SourceFile[]> {
  return sourcesWhere(ref, repo, (p) => isMutable(p, repo.packageDirs, repo.packageDirsExclude));
}

export function newLane(ref: SynthRef, repo: RepoInfo, backend: Awaited<ReturnType<typeof createSandboxBackend>>): Lane {
  return new Lane(backend, repo.image, repo.testCmd, ref.limits, { 'swerl.run': ref.synthId.slice(0, 63) });
}

/** Why a baseline run produced nothing to compare (the command is not found, ran no tests, or timed out), or null. */
function brokenRun(repo: RepoInfo, r: RunResult, timeoutS: number): string | null {
  const label = `repository ${repo.name}`;
  if (r.timedOut) return `${label}: the test command ran past ${timeoutS} s at baseline`;
  if (r.tests.size > 0 || r.collectErrors.length > 0) return null;
  if (r.exit === 127 || r.exit === 126 || /command not found|No module named pytest/.test(r.logTail))
    return `${label}: test command ${JSON.stringify(repo.testCmd)} not found (exit ${r.exit}): ${r.logTail.slice(-300)}`;
  if (r.exit === 5) return `${label}: test command ${JSON.stringify(repo.testCmd)} collected no tests`;
  return `${label}: test command ${JSON.stringify(repo.testCmd)} reported no test results (exit ${r.exit}): ${r.logTail.slice(-300)}`;
}

/** Two full runs; flaky tests excluded; a failing baseline is an error naming the failing tests. */
export async function synthBaseline(input: { ref: SynthRef; repo: RepoInfo }): Promise<BaselineSummary> {
  const { ref, repo } = input;
  const store = openStore(ref.storeUrl);
  const key = keys.synthBaseline(ref.synthId, repo.slug);
  const stored = await store.getJson<Baseline>(key);
  if (stored) return summarise(repo, stored);
  const lane = newLane(ref, repo, await createSandboxBackend(ref.backend));
  let summary: BaselineSummary;
  try {
    summary = await heartbeating(`baseline of ${repo.name}`, baselineRuns(ref, repo, lane, key));
  } finally {
    await lane.close();
  }
  return { ...summary, cpuSeconds: lane.cpuSeconds };
}

async function baselineRuns(ref: SynthRef, repo: RepoInfo, lane: Lane, key: string): Promise<BaselineSummary> {
  const a = await lane.run({ timeoutS: ref.timeoutS });
  const broken = brokenRun(repo, a, ref.timeoutS);
  if (broken) throw fail(broken);
  const b = await lane.run({ timeoutS: ref.timeoutS * 3, cover: true });
  const base = compareBaseline(a, b);
  if (base.failing.length) {
    // failed twice: once more on their own; a test that passes now is flaky too (wall-clock tests on a busy host)
    const c = await lane.run({ select: base.failing, timeoutS: ref.timeoutS });
    const passed = base.failing.filter((id) => c.tests.get(id)?.outcome === 'PASSED');
    base.baseline.flaky.push(...passed);
    base.failing = base.failing.filter((id) => !passed.includes(id));
  }
  const failing = [...new Set([...a.collectErrors.map((c) => `${c.nodeid} (does not import)`), ...base.failing])];
  if (failing.length) {
    const shown = failing.slice(0, 20).join(', ');
    throw fail(`repository ${repo.name}: the tests fail at the given state, so no task can be made: ${failing.length} failing: ${shown}${failing.length > 20 ? ', …' : ''}`);
  }
  const sources = await testSources(ref, repo, base.baseline.testFiles);
  const baseline: Baseline = { ...(await setAsideClockTests(base.baseline, sources)), fullSeconds: a.seconds };
  await openStore(ref.storeUrl).putJson(key, baseline);
  return summarise(repo, baseline);
}

/** The test files' texts, from the normalised source. */
async function testSources(ref: SynthRef, repo: RepoInfo, files: readonly string[]): Promise<Map<string, string>> {
  const wanted = new Set(files);
  return new Map((await sourcesWhere(ref, repo, (p) => wanted.has(p))).map((f) => [f.path, f.text]));
}

/**
 * The baseline with its passing tests that read a clock (lib/swe/canaries.ts's rule) moved to the flaky ones and
 * named in `clocked`. They passed twice here, but a timing test's verdict is the load of the machine it runs on: on a
 * loaded grader it fails a correct fix (mistune's `*_are_near_linear` tests did, in 25 of its 38 factory tasks).
 */
export async function setAsideClockTests<B extends Omit<Baseline, 'fullSeconds'>>(baseline: B, sources: ReadonlyMap<string, string>): Promise<B> {
  const clocked = await clockReadingTests(sources, baseline.passing);
  if (!clocked.length) return baseline;
  const set = new Set(clocked);
  return { ...baseline, passing: baseline.passing.filter((id) => !set.has(id)), flaky: [...baseline.flaky, ...clocked], clocked };
}

/** Flaky tests (outcomes differ between the runs, or present in one only), failing ones, the rest. */
export function compareBaseline(a: RunResult, b: RunResult): { baseline: Omit<Baseline, 'fullSeconds'>; failing: string[] } {
  const ids = [...a.tests.keys(), ...[...b.tests.keys()].filter((id) => !a.tests.has(id))];
  const passing: string[] = [];
  const flaky: string[] = [];
  const failing: string[] = [];
  const other: Record<string, TestOutcome> = {};
  const seconds: Record<string, number> = {};
  for (const id of ids) {
    const x = a.tests.get(id)?.outcome;
    const y = b.tests.get(id)?.outcome;
    if (x !== y) flaky.push(id);
    else if (x === 'PASSED') passing.push(id);
    else if (x === 'FAILED' || x === 'ERROR') failing.push(id);
    else if (x) other[id] = x;
    seconds[id] = a.tests.get(id)?.seconds ?? 0;
  }
  const coverage: Record<string, number[]> = {};
  for (const [id, t] of b.tests) if (t.covered) coverage[id] = t.covered;
  const testFiles = [...new Set(ids.map((id) => id.split('::')[0]!))].sort();
  return { baseline: { passing, flaky, other, seconds, functions: b.functions, coverage, testFiles }, failing };
}

function summarise(repo: RepoInfo, b: Baseline): BaselineSummary {
  const covered = new Set(Object.values(b.coverage).flat());
  return {
    repo: repo.name,
    tests: b.passing.length + b.flaky.length + Object.keys(b.other).length,
    passing: b.passing.length,
    flaky: b.flaky,
    ...(b.clocked?.length ? { clocked: b.clocked } : {}),
    other: Object.keys(b.other).length,
    seconds: b.fullSeconds,
    coveredFunctions: covered.size,
    cpuSeconds: 0,
  };
}

/** The repository's single-bug candidates, stored; their count and how they were found. */
export async function synthCandidates(input: { ref: SynthRef; repo: RepoInfo; strategies: string[]; perFunction: number }): Promise<CandidatesSummary> {
  const { ref, repo } = input;
  const store = openStore(ref.storeUrl);
  const key = keys.synthCandidates(ref.synthId, repo.slug, 'single');
  const statsKey = `${key}.stats.json`;
  const stored = await store.getJson<CandidatesSummary>(statsKey);
  if (stored && (await store.exists(key))) return stored;
  return heartbeating(`candidates of ${repo.name}`, makeCandidates(ref, repo, input.strategies, input.perFunction, key, statsKey));
}

async function makeCandidates(ref: SynthRef, repo: RepoInfo, strategies: string[], perFunction: number, key: string, statsKey: string): Promise<CandidatesSummary> {
  const store = openStore(ref.storeUrl);
  const sources = await mutableSources(ref, repo);
  const { candidates, stats } = await singleCandidates(repo.name, sources, {
    strategies: new Set(strategies as never),
    seed: ref.seed,
    perFunction,
  });
  if (sources.length === stats.unparsable.length) throw fail(`repository ${repo.name}: none of its ${sources.length} Python files parses`);
  await store.putJson(key, candidates satisfies Candidate[]);
  const summary: CandidatesSummary = { repo: repo.index, total: candidates.length, stats };
  await store.putJson(statsKey, summary);
  return summary;
}
