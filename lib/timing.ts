// Named, timed phases of a long effect (SkyRL's `Timer` around `# 1. generation`, `# 2. rewards`): each phase
// runs through `time`, and `record()` gives every phase's wall seconds as one record, so a caller reports
// or logs one object per step. Not for workflow code (it reads the clock).

/** Seconds rounded to the millisecond: enough for phases of effects, and short in JSON. */
const ms = (s: number) => Math.round(s * 1000) / 1000;

export class PhaseTimer {
  private readonly t0 = performance.now();
  private readonly seconds: Record<string, number> = {};

  /** Runs `fn` as phase `name` (a phase run twice adds up). */
  async time<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
    const t = performance.now();
    try {
      return await fn();
    } finally {
      this.seconds[name] = (this.seconds[name] ?? 0) + (performance.now() - t) / 1000;
    }
  }

  /** Every phase's seconds, in the order they first ran, and `total` since the timer was made. */
  record(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [k, v] of Object.entries(this.seconds)) out[k] = ms(v);
    out.total = ms((performance.now() - this.t0) / 1000);
    return out;
  }
}
