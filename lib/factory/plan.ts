// How the factory spreads its work over repositories (pure; the workflow runs it): fair shares of the tasks asked
// for, and which repository's candidates a free lane takes next. No lane waits for another: a lane takes the next
// chunk of the repository furthest below its share whenever it is free. The tasks kept do not depend on that
// timing: every candidate's verdict is its own, a repository stops only once it has its share of valid ones (or has
// none left), and the kept ones are its lowest-indexed valid candidates, so a run with the same seed keeps the same
// tasks however its lanes were timed (more candidates may have been judged).

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
  /** the next candidate not yet given to a lane */
  next: number;
  /** validated candidate indices */
  valid: number[];
}

export interface Chunk {
  repo: number;
  from: number;
  to: number;
}

/** Largest chunk: a lane's verdicts come back (and the plan adjusts) at least this often. */
const MAX_CHUNK = 8;

/** One tier's plan over the repositories' states (which it advances; they outlive it, so a tier can be resumed with a larger target). */
export class TierPlan {
  private readonly inFlight: number[];

  constructor(
    private readonly states: readonly TierState[],
    private readonly target: number,
  ) {
    this.inFlight = states.map(() => 0);
  }

  /** The shares now: repositories that have run out (nothing left, nothing in flight) are capped at what they validated. */
  shares(): number[] {
    return fairShares(
      this.target,
      this.states.map((s, i) => (s.next >= s.total && this.inFlight[i] === 0 ? s.valid.length : Infinity)),
    );
  }

  /** The next chunk for a free lane: from the repository furthest below its share (counting what is in flight at its yield so far), or null. */
  nextChunk(): Chunk | null {
    const shares = this.shares();
    let best = -1;
    let bestNeed = 0;
    this.states.forEach((s, i) => {
      if (s.next >= s.total) return;
      const need = shares[i]! - s.valid.length - this.inFlight[i]! * this.rate(i);
      if (need > bestNeed) [best, bestNeed] = [i, need];
    });
    if (best < 0) return null;
    const s = this.states[best]!;
    const size = Math.max(1, Math.min(MAX_CHUNK, Math.ceil(bestNeed / this.rate(best))));
    const ch = { repo: best, from: s.next, to: Math.min(s.total, s.next + size) };
    s.next = ch.to;
    this.inFlight[best]! += ch.to - ch.from;
    return ch;
  }

  /** A chunk's valid candidates. */
  complete(ch: Chunk, valid: readonly number[]): void {
    this.inFlight[ch.repo]! -= ch.to - ch.from;
    this.states[ch.repo]!.valid.push(...valid);
  }

  /** Nothing in flight. */
  idle(): boolean {
    return this.inFlight.every((n) => n === 0);
  }

  /** Valid candidates per judged one so far, with a prior of one half. */
  private rate(i: number): number {
    const s = this.states[i]!;
    return (s.valid.length + 1) / (s.next - this.inFlight[i]! + 2);
  }
}

/** The indices to keep per repository: its fair share of `target` over what each validated, lowest indices first. */
export function selection(states: readonly TierState[], target: number): number[][] {
  const shares = fairShares(
    target,
    states.map((s) => s.valid.length),
  );
  return states.map((s, i) => [...s.valid].sort((a, b) => a - b).slice(0, shares[i]));
}
