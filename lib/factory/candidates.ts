// A repository's bug candidates in the order the factory tries them (issue 28): every mutation the chosen
// strategies make in its package files, compile-checked (parsed again) before any container, at most
// `perFunction` per function, functions and their mutations in a seeded order, interleaved so that the
// first candidates spread over many functions and strategies. The harder tier combines 2–3 validated
// single bugs in different functions. Pure and seeded: the same repository, strategies and seed give the
// same list on every worker.
import { hashInts, hashString, seededPermutation } from '../seed.ts';
import { applyMutations, enumerateMutations, parsesCleanly, type Mutation, type Strategy } from './mutations.ts';
import { dedupeKey, treePatch } from './patch.ts';

export interface SourceFile {
  path: string;
  text: string;
}

/** One candidate: a bug of one or more mutations (one per function), and the patch that fixes it. */
export interface Candidate {
  /** position in the repository's candidate list (single tier) or combination list (multi tier) */
  index: number;
  tier: 'single' | 'multi';
  mutations: Mutation[];
  /** the fix (the revert), against the buggy state */
  patch: string;
  dedupeKey: string;
}

export interface CandidateStats {
  files: number;
  /** Python files under the package directories that do not parse (skipped) */
  unparsable: string[];
  functions: number;
  /** mutations found, by strategy */
  found: Partial<Record<Strategy, number>>;
  /** rejected before any container: the mutated file does not parse */
  doesNotCompile: number;
  /** the same fix as an earlier candidate */
  duplicates: number;
  candidates: number;
}

/**
 * Lets timers and I/O run (a worker's heartbeats, its workflow tasks) when this call has held the thread for a
 * while: awaiting parses only yields to microtasks, which would starve them through thousands of candidates.
 */
export function yielder(everyMs = 50): () => Promise<void> {
  let last = Date.now();
  return async () => {
    if (Date.now() - last < everyMs) return;
    await new Promise((r) => setTimeout(r, 0));
    last = Date.now();
  };
}

/** Whether `path` is a package file the factory may mutate: under a package dir (or it), not under an excluded one, not a test. */
export function isMutable(path: string, packageDirs: readonly string[], exclude: readonly string[]): boolean {
  if (!path.endsWith('.py')) return false;
  const under = (d: string) => path === d || path.startsWith(d.endsWith('/') ? d : `${d}/`);
  if (!packageDirs.some(under) || exclude.some(under)) return false;
  const parts = path.split('/');
  const base = parts.at(-1)!;
  return !parts.slice(0, -1).some((p) => p === 'tests' || p === 'test' || p === 'testing') && !/^test_.*\.py$|_test\.py$|^conftest\.py$/.test(base);
}

/** The file's text after `muts` (one file's mutations). */
function mutatedText(files: ReadonlyMap<string, string>, muts: readonly Mutation[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const path of new Set(muts.map((m) => m.file))) {
    out.set(
      path,
      applyMutations(
        files.get(path)!,
        muts.filter((m) => m.file === path),
      ),
    );
  }
  return out;
}

/** The fix of a bug: the patch from the buggy files back to the originals. */
export function fixPatch(files: ReadonlyMap<string, string>, muts: readonly Mutation[]): string {
  const buggy = mutatedText(files, muts);
  return treePatch(Object.fromEntries(buggy), Object.fromEntries([...buggy.keys()].map((p) => [p, files.get(p)!])));
}

/** The buggy text of each file a candidate changes. */
export function buggyFiles(files: ReadonlyMap<string, string>, c: Pick<Candidate, 'mutations'>): Record<string, string> {
  return Object.fromEntries(mutatedText(files, c.mutations));
}

async function candidateOf(repo: string, files: ReadonlyMap<string, string>, muts: Mutation[], tier: Candidate['tier'], index: number): Promise<Candidate | 'does-not-compile'> {
  const buggy = mutatedText(files, muts);
  for (const text of buggy.values()) if (!(await parsesCleanly(text))) return 'does-not-compile';
  const patch = treePatch(Object.fromEntries(buggy), Object.fromEntries([...buggy.keys()].map((p) => [p, files.get(p)!])));
  return { index, tier, mutations: muts, patch, dedupeKey: dedupeKey(repo, patch) };
}

/** The single-bug candidates of a repository, in the order to try them. */
export async function singleCandidates(
  repo: string,
  sources: readonly SourceFile[],
  o: { strategies: ReadonlySet<Strategy>; seed: number; perFunction: number },
): Promise<{ candidates: Candidate[]; stats: CandidateStats }> {
  const files = new Map(sources.map((s) => [s.path, s.text]));
  const stats: CandidateStats = { files: sources.length, unparsable: [], functions: 0, found: {}, doesNotCompile: 0, duplicates: 0, candidates: 0 };
  const byFunction = new Map<string, Mutation[]>();
  const breathe = yielder();
  for (const s of [...sources].sort((a, b) => a.path.localeCompare(b.path))) {
    await breathe();
    const muts = await enumerateMutations(s.path, s.text, o.strategies);
    if (!muts) {
      stats.unparsable.push(s.path);
      continue;
    }
    for (const m of muts) {
      stats.found[m.strategy] = (stats.found[m.strategy] ?? 0) + 1;
      const key = `${m.file}:${m.fn.startLine}:${m.fn.name}`;
      const list = byFunction.get(key) ?? [];
      list.push(m);
      byFunction.set(key, list);
    }
  }
  stats.functions = byFunction.size;
  const fnKeys = seededPermutation([...byFunction.keys()], hashInts(o.seed, hashString(repo), 1));
  // per function: its strategies in a seeded order, then round-robin over them, each strategy's mutations shuffled
  const queues = fnKeys.map((k) => {
    const muts = byFunction.get(k)!;
    const byStrategy = new Map<Strategy, Mutation[]>();
    for (const m of seededPermutation(muts, hashInts(o.seed, hashString(k), 2))) byStrategy.set(m.strategy, [...(byStrategy.get(m.strategy) ?? []), m]);
    const lanes = seededPermutation([...byStrategy.values()], hashInts(o.seed, hashString(k), 3));
    const order: Mutation[] = [];
    for (let i = 0; order.length < muts.length; i++) for (const l of lanes) if (l[i]) order.push(l[i]!);
    return { order, next: 0, taken: 0 };
  });
  const seenKeys = new Set<string>();
  const out: Candidate[] = [];
  for (let open = true; open;) {
    open = false;
    for (const q of queues) {
      while (q.taken < o.perFunction && q.next < q.order.length) {
        await breathe();
        const m = q.order[q.next++]!;
        const c = await candidateOf(repo, files, [m], 'single', out.length);
        if (c === 'does-not-compile') {
          stats.doesNotCompile++;
          continue;
        }
        if (seenKeys.has(c.dedupeKey)) {
          stats.duplicates++;
          continue;
        }
        seenKeys.add(c.dedupeKey);
        out.push(c);
        q.taken++;
        open = true;
        break;
      }
    }
  }
  stats.candidates = out.length;
  return { candidates: out, stats };
}

/**
 * Combinations of validated single bugs (2 or 3, in different functions) for the harder tier, each single
 * used once, in a seeded order; at most `max`.
 */
export async function multiCandidates(repo: string, sources: readonly SourceFile[], singles: readonly Candidate[], o: { seed: number; max: number }): Promise<Candidate[]> {
  const files = new Map(sources.map((s) => [s.path, s.text]));
  const pool = seededPermutation(singles, hashInts(o.seed, hashString(repo), 4));
  const used = new Set<number>();
  const out: Candidate[] = [];
  const rng = hashInts(o.seed, hashString(repo), 5);
  const breathe = yielder();
  for (let i = 0; i < pool.length && out.length < o.max; i++) {
    await breathe();
    if (used.has(i)) continue;
    const size = hashInts(rng, out.length) % 2 === 0 ? 2 : 3;
    const group = [i];
    const fns = new Set([fnKey(pool[i]!)]);
    for (let j = i + 1; j < pool.length && group.length < size; j++) {
      if (used.has(j) || fns.has(fnKey(pool[j]!)) || overlaps(pool, group, j)) continue;
      group.push(j);
      fns.add(fnKey(pool[j]!));
    }
    if (group.length < 2) continue;
    const c = await candidateOf(
      repo,
      files,
      group.flatMap((g) => pool[g]!.mutations),
      'multi',
      out.length,
    );
    if (c === 'does-not-compile') continue;
    for (const g of group) used.add(g);
    out.push(c);
  }
  return out;
}

function fnKey(c: Candidate): string {
  const m = c.mutations[0]!;
  return `${m.file}:${m.fn.startLine}`;
}

function overlaps(pool: readonly Candidate[], group: readonly number[], j: number): boolean {
  return pool[j]!.mutations.some((m) => group.some((g) => pool[g]!.mutations.some((x) => x.file === m.file && x.start < m.end && m.start < x.end)));
}
