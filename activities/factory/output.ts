// The factory's output (issue 28): SWE-bench-format records in DIR/tasks.jsonl, each with its buggy tree as a
// tarball at DIR/tarballs/<id>.tar.gz (relative: the directory moves as a whole), the gold patch (the revert),
// an empty test_patch, FAIL_TO_PASS and PASS_TO_PASS, the test command, a problem statement from the failing
// tests (lib/factory/problem.ts; rewritten by an issue writer when one is given), the quality metadata
// (lib/swe/quality.ts) and the provenance. The split by repository goes into `split` and into
// DIR/train.jsonl and DIR/validation.jsonl; DIR/report.json sums the run up. Files are replaced atomically.
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hashString } from '../../lib/seed.ts';
import { keys, openStore } from '../../lib/store.ts';
import { templateStatement } from '../../lib/factory/problem.ts';
import { rewriteStatement } from './issue-writer.ts';
import { QUALITY_VERSION, type TaskQuality } from '../../lib/swe/quality.ts';
import { FACTORY_VERSION, type RepoInfo, type SynthRef, type Tier, type Verdict } from '../../lib/factory/shapes.ts';
import { buggyFiles, type Candidate } from '../../lib/factory/candidates.ts';
import { heartbeating } from '../swe.ts';
import { repoEntries, type Baseline } from './repo.ts';
import { writeTarball } from './source.ts';
import { candidatesOf } from './validate.ts';
import { BASE_ENVIRONMENT } from '../images.ts';

export interface WriteInput {
  ref: SynthRef;
  repos: RepoInfo[];
  /** per repository and tier, the candidate indices to write (validated) */
  selection: { repo: number; tier: Tier; indices: number[] }[];
  validationRepos: string[];
  issueWriter?: { url: string; model?: string };
  /** the run's summary, written to report.json */
  report: Record<string, unknown>;
}

async function writeAtomic(path: string, data: string | Buffer): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, data);
  await rename(tmp, path);
}

/** Instance ids: `<owner>__<name>.<source sha7>.<strategy or multiN>.<dedupe key 8>`. */
export function instanceIdOf(repo: Pick<RepoInfo, 'slug' | 'short'>, c: Candidate): string {
  const kind = c.tier === 'single' ? c.mutations[0]!.strategy : `multi${c.mutations.length}`;
  return `${repo.slug}.${repo.short}.${kind}.${c.dedupeKey.slice(0, 8)}`;
}

/** The task records and files of the selection. */
export async function synthWrite(input: WriteInput): Promise<{ tasks: number; train: number; validation: number; tasksFile: string }> {
  return heartbeating('writing the task set', writeTaskSet(input));
}

async function writeTaskSet(input: WriteInput): Promise<{ tasks: number; train: number; validation: number; tasksFile: string }> {
  const { ref } = input;
  const store = openStore(ref.storeUrl);
  const out = ref.outDir;
  await mkdir(join(out, 'tarballs'), { recursive: true });
  const validation = new Set(input.validationRepos);
  const records: Record<string, unknown>[] = [];
  for (const sel of input.selection) {
    const repo = input.repos[sel.repo]!;
    const baseline = await store.getJson<Baseline>(keys.synthBaseline(ref.synthId, repo.slug));
    if (!baseline) throw new Error(`no baseline of ${repo.name}`);
    const list = await candidatesOf(ref, repo, sel.tier);
    const entries = await repoEntries(ref, repo);
    const files = new Map(entries.filter((e) => !e.link).map((e) => [e.path, e.data]));
    for (const index of sel.indices) {
      const c = list[index]!;
      const v = await store.getJson<Verdict>(keys.synthVerdict(ref.synthId, repo.slug, sel.tier, index));
      if (!v?.valid) throw new Error(`candidate ${index} of ${repo.name} (${sel.tier}) has no valid verdict`);
      records.push(await taskRecord(input, repo, baseline, c, v, files, entries, validation.has(repo.name)));
    }
  }
  const line = (r: Record<string, unknown>) => JSON.stringify(r);
  const train = records.filter((r) => r.split === 'train');
  const val = records.filter((r) => r.split === 'validation');
  await writeAtomic(join(out, 'tasks.jsonl'), records.map(line).join('\n') + (records.length ? '\n' : ''));
  await writeAtomic(join(out, 'train.jsonl'), train.map(line).join('\n') + (train.length ? '\n' : ''));
  await writeAtomic(join(out, 'validation.jsonl'), val.map(line).join('\n') + (val.length ? '\n' : ''));
  await writeAtomic(
    join(out, 'report.json'),
    JSON.stringify({ ...input.report, tasks: records.length, train: train.length, validation: val.length, validationRepos: input.validationRepos }, null, 2) + '\n',
  );
  return { tasks: records.length, train: train.length, validation: val.length, tasksFile: join(out, 'tasks.jsonl') };
}

async function taskRecord(
  input: WriteInput,
  repo: RepoInfo,
  baseline: Baseline,
  c: Candidate,
  v: Verdict,
  files: Map<string, Buffer>,
  entries: Awaited<ReturnType<typeof repoEntries>>,
  isValidation: boolean,
): Promise<Record<string, unknown>> {
  const id = instanceIdOf(repo, c);
  const f2p = v.failToPass!;
  const f2pSet = new Set(f2p);
  const p2p = baseline.passing.filter((t) => !f2pSet.has(t) && !baseline.flaky.includes(t));
  // the buggy tree: the repository with the mutated files
  const texts = new Map(c.mutations.map((m) => [m.file, files.get(m.file)!.toString('utf8')]));
  const buggy = new Map(Object.entries(buggyFiles(texts, c)).map(([p, t]) => [p, Buffer.from(t)]));
  const tarPath = join(input.ref.outDir, 'tarballs', `${id}.tar.gz`);
  await writeAtomic(tarPath, await writeTarball(entries.map((e) => (buggy.has(e.path) ? { ...e, data: buggy.get(e.path)! } : e))));
  const seed = hashString(id);
  const template = templateStatement({ failing: f2p, failures: v.failures ?? {}, testFiles: new Set(baseline.testFiles), patch: c.patch, seed });
  const statement = input.issueWriter ? await rewriteStatement(input.issueWriter, template, c.patch, seed) : { text: template, by: 'template' };
  const strength = v.strength!;
  const quality: TaskQuality = {
    version: QUALITY_VERSION,
    // the gold state is the repository as given, whose two baseline runs passed every one of these tests
    gold: { runs: 2, passed: 2 },
    strength: { tried: strength.tried, rejected: strength.rejected, score: strength.tried ? strength.rejected / strength.tried : null, accepted: strength.accepted },
    failToPass: f2p.length,
    passToPass: p2p.length,
    testSeconds: Math.round(baseline.fullSeconds * 100) / 100,
    dedupeKey: c.dedupeKey,
  };
  return {
    instance_id: id,
    repo: repo.name,
    base_commit: v.baseCommit,
    problem_statement: statement.text,
    hints_text: '',
    patch: c.patch,
    test_patch: '',
    FAIL_TO_PASS: f2p,
    PASS_TO_PASS: p2p,
    test_cmd: repo.testCmd,
    source_tarball: `tarballs/${id}.tar.gz`,
    environment: BASE_ENVIRONMENT,
    split: isValidation ? 'validation' : 'train',
    tier: c.tier,
    quality,
    provenance: {
      factory: FACTORY_VERSION,
      ...repo.provenance,
      seed: input.ref.seed,
      statement: statement.by,
      bugs: c.mutations.map((m) => ({ strategy: m.strategy, file: m.file, function: m.fn.name, line: m.line, change: m.what })),
    },
  };
}
