// Seeds (DESIGN §2): every random choice derives from the run's seed through these functions, so a task
// id names the same map, a rollout samples the same tokens and a batch holds the same tasks on every
// worker and in every replay. Runs and recorded histories depend on the exact values: change nothing here
// without re-recording (test/unit/seed.test.ts pins them). Pure: no I/O, no clocks.

/** 32-bit integer hash (splitmix/murmur finaliser): mixes one word. */
export function mix32(x: number): number {
  x = (x + 0x9e3779b9) | 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** Hash of several integers, order-sensitive, in [0, 2^32). */
export function hashInts(...xs: number[]): number {
  let h = 0x2545f491;
  for (const x of xs) h = mix32((h ^ mix32(x | 0)) + Math.imul(h, 31));
  return h >>> 0;
}

/** Sampling seed of an episode's turn, from (episode seed, turn); a positive 31-bit integer. */
export function turnSeed(seed: number, turn: number): number {
  return hashInts(seed, turn, 0x7e5) & 0x7fffffff;
}

/** FNV-1a of a string's UTF-16 code units, for folding ids into integer seeds. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** Fisher–Yates with a hash-derived stream: the same order on every worker and in every replay (batches, the factory's candidates). */
export function seededPermutation<T>(xs: readonly T[], seed: number): T[] {
  const a = [...xs];
  for (let i = a.length - 1; i > 0; i--) {
    const j = hashInts(seed, i) % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

/** mulberry32 from `seed` as given: uint32 draws, the same stream on every platform. The one PRNG of swerl. */
export function mulberry32U32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** mulberry32 from `seed` as given, uniform in [0, 1). */
export function mulberry32(seed: number): () => number {
  const u = mulberry32U32(seed);
  return () => u() / 4294967296;
}

/** mulberry32 from a mixed seed (nearby seeds give unrelated streams); next() ∈ [0, 1). */
export class Rng {
  private readonly u: () => number;
  constructor(seed: number) {
    this.u = mulberry32U32(mix32(seed));
  }
  nextU32(): number {
    return this.u();
  }
  next(): number {
    return this.u() / 4294967296;
  }
}

/** A training episode's seed from (run seed, iteration, task id, sample). */
export function rolloutSeed(seed: number, n: number, taskId: string, sample: number): number {
  return hashInts(seed, n, hashString(taskId), sample);
}

/** An evaluation episode's seed from (evaluation seed, task, run): the rollout seed of iteration 0 with the run as the sample. */
export function evalEpisodeSeed(seed: number, taskId: string, run: number): number {
  return rolloutSeed(seed, 0, taskId, run);
}

/**
 * The seed of the j-th engine call of one request that the policy server splits into chunks (stop strings):
 * the request's own seed first, then a golden-ratio step per chunk, kept below 2^52 (exact in a double).
 */
export function chunkSeed(seed: number, j: number): number {
  return j === 0 ? seed : (seed + j * 0x9e3779b1) % 2 ** 52;
}

/**
 * The seed of the i-th of a request's n samples (the policy server's `n`): the request's own seed for the first,
 * so n = 1 samples what it always did, then a hash of (seed, i) for each other, apart from every chunk seed.
 */
export function sampleSeed(seed: number, i: number): number {
  if (i === 0) return seed;
  const hi = Math.floor(seed / 2 ** 32);
  return hashInts(seed - hi * 2 ** 32, hi, i);
}

/** xmur3 string hash -> 32-bit seed (model init: each tensor gets its own stream, independent of tensor order). */
export function xmur3(text: string): number {
  let h = 1779033703 ^ text.length;
  for (let i = 0; i < text.length; i++) {
    h = Math.imul(h ^ text.charCodeAt(i), 3432918353);
    h = (h << 13) | (h >>> 19);
  }
  h = Math.imul(h ^ (h >>> 16), 2246822507);
  h = Math.imul(h ^ (h >>> 13), 3266489909);
  return (h ^ (h >>> 16)) >>> 0;
}

/** sfc32: small fast counter PRNG, uniform 32-bit outputs. */
export function sfc32(a: number, b: number, c: number, d: number): () => number {
  return () => {
    a >>>= 0;
    b >>>= 0;
    c >>>= 0;
    d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return t >>> 0;
  };
}
