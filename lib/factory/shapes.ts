// What the task factory's workflow (workflows/synthesize-tasks.ts) and its activities (activities/factory/)
// pass each other: references and small summaries; candidates, baselines and verdicts live in the store.
import type { SandboxLimits } from '../sandbox.ts';
import type { TestFailure } from './problem.ts';
import type { CandidateStats } from './candidates.ts';

export const FACTORY_VERSION = 'swerl-factory/1';

/** The bug strategies (lib/factory/mutations.ts), in the order `--strategies` lists them. */
export const STRATEGIES = ['swap-operator', 'off-by-one', 'negate-condition', 'remove-statement', 'swap-arguments', 'wrong-return', 'change-default'] as const;
export type Strategy = (typeof STRATEGIES)[number];

/** Everything an activity needs to find the run's work. */
export interface SynthRef {
  synthId: string;
  storeUrl: string;
  outDir: string;
  seed: number;
  backend: 'docker' | 'kubernetes';
  limits?: Partial<SandboxLimits>;
  timeoutS: number;
  maxFailToPass: number;
  strengthK: number;
}

export interface SourceInfo {
  /** as given: a path, or pypi:NAME==VERSION */
  source: string;
  kind: 'dir' | 'tarball' | 'pypi';
  sha256: string;
  url?: string;
  commit?: string;
  dirty?: boolean;
}

/** A prepared repository: its normalised source in the store and its image. */
export interface RepoInfo {
  index: number;
  /** OWNER/NAME or NAME */
  name: string;
  /** the name as one path segment (OWNER__NAME) */
  slug: string;
  /** the first 7 hex digits of the source's sha256 (or its git commit) */
  short: string;
  /** store key of the normalised tarball */
  tarballKey: string;
  image: string;
  testCmd: string;
  packageDirs: string[];
  packageDirsExclude: string[];
  provenance: SourceInfo;
}

export interface BaselineSummary {
  repo: string;
  tests: number;
  passing: number;
  flaky: string[];
  /** of `flaky`, the tests that passed but read a clock (never listed: their verdict is the machine's load) */
  clocked?: string[];
  /** SKIPPED, XFAIL, XPASS at baseline (neither FAIL_TO_PASS nor PASS_TO_PASS) */
  other: number;
  /** wall time of one full run */
  seconds: number;
  /** functions of the package at least one test runs */
  coveredFunctions: number;
  /** sandbox CPU seconds of the baseline runs (0 when it was stored before) */
  cpuSeconds: number;
}

export type Tier = 'single' | 'multi';

export const REJECT_REASONS = [
  /** no test runs the mutated function (from the baseline's coverage): nothing could fail */
  'no_covering_test',
  /** every test still passes */
  'tests_pass',
  /** the run passed its time limit */
  'timeout',
  /** a test module no longer imports */
  'collection_error',
  /** a test that passed at baseline is now skipped, xfailed or missing */
  'tests_changed',
  /** more tests fail than maxFailToPass */
  'too_many_failing',
] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

/** What validation found for one candidate (stored; the workflow sees counts). */
export interface Verdict {
  index: number;
  tier: Tier;
  valid: boolean;
  reason?: RejectReason;
  /** FAIL_TO_PASS ids in baseline order (valid candidates) */
  failToPass?: string[];
  /** failure details of the first FAIL_TO_PASS tests (for the problem statement) */
  failures?: Record<string, TestFailure>;
  /** wall time of the full test command with the bug */
  testSeconds?: number;
  strength?: { tried: number; rejected: number; accepted: string[] };
  /** the git commit of the buggy tree (lib/factory/shapes.ts COMMIT_IDENTITY) */
  baseCommit?: string;
  /** test runs this verdict took, and their wall time */
  runs: number;
  seconds: number;
}

export interface ChunkResult {
  repo: number;
  tier: Tier;
  from: number;
  to: number;
  valid: number[];
  rejected: Partial<Record<RejectReason, number>>;
  runs: number;
  /** sandbox CPU seconds (cgroup), where the backend reports them */
  cpuSeconds: number;
  seconds: number;
}

export interface CandidatesSummary {
  repo: number;
  total: number;
  stats: CandidateStats;
}

/** The factory's progress (query `status`, the UI's current details). */
export interface SynthStatus {
  synthId: string;
  phase: 'preparing' | 'baseline' | 'candidates' | 'validating' | 'combining' | 'writing' | 'done';
  target: number;
  validated: number;
  tried: number;
  candidates: number;
  rejected: Partial<Record<RejectReason, number>>;
  repos: {
    name: string;
    error?: string;
    /** baseline: tests passing twice, flaky ones, seconds of a full run */
    tests?: number;
    flaky?: number;
    testSeconds?: number;
    candidates?: number;
    /** files skipped because they do not parse; candidates rejected before any container; duplicates */
    unparsable?: number;
    doesNotCompile?: number;
    duplicates?: number;
    tried: number;
    validated: { single: number; multi: number };
  }[];
  outDir: string;
}

export interface SynthResult {
  outDir: string;
  tasksFile: string;
  tasks: number;
  train: number;
  validation: number;
  validationRepos: string[];
  tried: number;
  rejected: Partial<Record<RejectReason, number>>;
}

/** The identity and date of every buggy-state commit, so that its id depends on the tree alone. */
export const COMMIT_IDENTITY = { name: 'swerl', email: 'swerl@localhost', date: '1970-01-01T00:00:00+0000', message: 'swerl-factory: buggy state' } as const;
