// How the factory spreads its work over repositories (pure; the workflow runs it, so it is deterministic):
// fair shares of the tasks asked for, and the chunks of candidates of one round. A round's chunks depend only
// on the verdicts of earlier rounds, so a run with the same seed keeps the same tasks however its lanes are timed.

/**
 * `total` split as evenly as possible over repositories that can give at most `caps[i]` each (water-filling);
 * units left by the division go to the lowest indices.
 */
export function fairShares(total: number, caps: readonly number[]): number[] {
  const shares = caps.map(() => 0);
  let left = Math.max(0, Math.floor(total));
  let open = caps.map((_, i) => i).filter((i) => caps[i]! > 0);
  while (left > 0 && open.length) {
    const each = Math.max(1, Math.floor(left / open.length));
    for (const i of open) {
      if (left === 0) break;
      const give = Math.min(each, caps[i]! - shares[i]!, left);
      shares[i]! += give;
      left -= give;
    }
    open = open.filter((i) => shares[i]! < caps[i]!);
  }
  return shares;
}

export interface TierState {
  /** candidates of the tier */
  total: number;
  /** the next candidate not yet given to a chunk */
  next: number;
  /** validated candidate indices (in the order rounds found them) */
  valid: number[];
}

export interface Chunk {
  repo: number;
  from: number;
  to: number;
}

/** Largest chunk: a lane's verdicts come back (and the plan adjusts) at least this often. */
const MAX_CHUNK = 16;

/**
 * The next round's chunks: each repository below its fair share of `target` (among those with candidates left)
 * gets enough candidates for what it lacks at its yield so far, split so that `lanes` lanes have work; none when done.
 */
export function nextRound(states: readonly TierState[], target: number, lanes: number): Chunk[] {
  const caps = states.map((s) => (s.next < s.total ? Infinity : s.valid.length));
  const shares = fairShares(target, caps);
  const open = states.map((_, i) => i).filter((i) => states[i]!.next < states[i]!.total && states[i]!.valid.length < shares[i]!);
  if (open.length === 0) return [];
  const per = Math.max(1, Math.ceil(lanes / open.length));
  const chunks: Chunk[] = [];
  for (const i of open) {
    const s = states[i]!;
    const tried = s.next;
    const rate = (s.valid.length + 1) / (tried + 2);
    const want = Math.ceil((shares[i]! - s.valid.length) / rate);
    const size = Math.max(1, Math.min(MAX_CHUNK, Math.ceil(want / per)));
    for (let k = 0; k < per && s.next < s.total; k++) {
      const to = Math.min(s.total, s.next + size);
      chunks.push({ repo: i, from: s.next, to });
      s.next = to;
    }
  }
  return chunks;
}

/** The indices to keep per repository: its fair share of `target` over what each validated, lowest indices first. */
export function selection(states: readonly TierState[], target: number): number[][] {
  const shares = fairShares(
    target,
    states.map((s) => s.valid.length),
  );
  return states.map((s, i) => [...s.valid].sort((a, b) => a - b).slice(0, shares[i]));
}
