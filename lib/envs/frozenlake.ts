// FrozenLake as a multi-turn text environment (DESIGN §3): the grid is the observation, one action
// letter per turn, reward 1 at the goal. Maps come from a seed through our own PRNG, so a task id
// names its map on every worker. Pure: no I/O, no clocks; the optional `latency` only waits.
//
// `latency` makes a long-tailed variant for asynchronous training (DESIGN §10, bench/async.ts): each step
// waits a seeded lognormal time whose median grows with the episode's length, as an agent's tool calls and
// the slowest SWE episodes do, so the tail shows on a small machine without burning its cores.

import { z } from 'zod';
import type { ChatMessage, EndReason, EnvStep, TextEnvironment } from '../types.ts';
import { hashInts, Rng } from '../seed.ts';

/** Action letters, each a single token in the frozenlake preset vocabulary. */
export const FROZENLAKE_ACTIONS = ['L', 'D', 'R', 'U'] as const;
export type FrozenLakeAction = (typeof FROZENLAKE_ACTIONS)[number];

const MOVES: Record<FrozenLakeAction, [number, number]> = { L: [0, -1], D: [1, 0], R: [0, 1], U: [-1, 0] };

/** A seeded heavy-tailed wait per environment step: lognormal, median `medianMs · (1 + growth · step)`, at most `maxMs`. */
export const StepLatencySchema = z
  .object({
    medianMs: z.number().min(0).max(600_000).describe('median wait of a step, ms'),
    sigma: z.number().min(0).max(4).default(1).describe('σ of the underlying normal: 0 is a fixed wait, 1 already a long tail (p99 ≈ 10 × the median)'),
    growth: z.number().min(0).max(100).default(0).describe('growth of the median per step taken (later turns are slower)'),
    maxMs: z.number().min(0).max(3_600_000).default(60_000).describe('the longest wait, ms'),
  })
  .strict();
export type StepLatency = z.infer<typeof StepLatencySchema>;

/**
 * The wait of step `step` (1-based) of the episode (mapSeed, episodeSeed), in ms: exp(ln(median) + σ·z), z a standard
 * normal from a Box–Muller pair of the episode's seeded stream, capped at maxMs. The same episode waits the same.
 */
export function stepLatencyMs(l: StepLatency, mapSeed: number, episodeSeed: number, step: number): number {
  const median = l.medianMs * (1 + l.growth * step);
  if (median <= 0) return 0;
  const rng = new Rng(hashInts(mapSeed, episodeSeed, step, 0x1a7e));
  const u1 = Math.max(rng.next(), 1e-12);
  const z = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * rng.next());
  return Math.min(l.maxMs, Math.exp(Math.log(median) + l.sigma * z));
}

export const FrozenLakeConfigSchema = z.object({
  size: z.number().int().min(2).max(16).default(4).describe('side of the square map; S at top-left, G at bottom-right'),
  holeProbability: z.number().min(0).max(0.8).default(0.2).describe('chance that a cell other than S and G is a hole (every map is solvable)'),
  maxSteps: z.number().int().min(1).max(1000).default(8).describe('turns per episode'),
  stepLimit: z
    .enum(['truncate', 'fail'])
    .default('truncate')
    .describe(
      "an episode still on the ice after maxSteps moves: `truncate`, the episode loop cuts it (compact-filtered, no gradient); `fail`, the lake's own end (reward 0, trained like a fall)",
    ),
  slippery: z.boolean().default(false).describe("Gym's semantics: the intended move with p 1/3, each perpendicular move with p 1/3"),
  systemPrompt: z.string().default('Reach G. Avoid H. Reply L D R U.').describe("the system prompt; keep it expressible in the policy's tokenizer"),
  latency: StepLatencySchema.optional().describe('a seeded lognormal wait per step (the long-tailed variant of bench/async.ts); absent: none'),
});
export type FrozenLakeConfig = z.infer<typeof FrozenLakeConfigSchema>;
export type FrozenLakeConfigInput = z.input<typeof FrozenLakeConfigSchema>;

export type Cell = 'S' | 'F' | 'H' | 'G';

/** Whether G is reachable from S through non-hole cells (4-neighbour BFS). */
export function hasPath(map: readonly (readonly Cell[])[]): boolean {
  const n = map.length;
  const seen = map.map((r) => r.map(() => false));
  const queue: [number, number][] = [[0, 0]];
  seen[0][0] = true;
  while (queue.length) {
    const [r, c] = queue.shift()!;
    if (map[r][c] === 'G') return true;
    for (const [dr, dc] of Object.values(MOVES)) {
      const nr = r + dr;
      const nc = c + dc;
      if (nr < 0 || nc < 0 || nr >= n || nc >= n || seen[nr][nc] || map[nr][nc] === 'H') continue;
      seen[nr][nc] = true;
      queue.push([nr, nc]);
    }
  }
  return false;
}

/** A map from a seed: S top-left, G bottom-right, holes with the given probability, always solvable. */
export function generateMap(seed: number, size = 4, holeProbability = 0.2): Cell[][] {
  const rng = new Rng(seed);
  for (let attempt = 0; attempt < 1000; attempt++) {
    const map: Cell[][] = [];
    for (let r = 0; r < size; r++) {
      const row: Cell[] = [];
      for (let c = 0; c < size; c++) row.push(rng.next() < holeProbability ? 'H' : 'F');
      map.push(row);
    }
    map[0][0] = 'S';
    map[size - 1][size - 1] = 'G';
    if (hasPath(map)) return map;
  }
  // unreachable for holeProbability ≤ 0.8 in practice; an open map is always solvable
  return Array.from({ length: size }, (_, r) => Array.from({ length: size }, (_, c): Cell => (r === 0 && c === 0 ? 'S' : r === size - 1 && c === size - 1 ? 'G' : 'F')));
}

/** Grid text with the agent shown as P, rows joined by newlines (no trailing newline). */
export function renderGrid(map: readonly (readonly Cell[])[], pos: readonly [number, number]): string {
  return map.map((row, r) => row.map((cell, c) => (r === pos[0] && c === pos[1] ? 'P' : cell)).join('')).join('\n');
}

/** The first action letter in the text, or null (a wasted step). */
export function parseAction(text: string): FrozenLakeAction | null {
  for (const ch of text) if ((FROZENLAKE_ACTIONS as readonly string[]).includes(ch)) return ch as FrozenLakeAction;
  return null;
}

export class FrozenLakeEnv implements TextEnvironment {
  readonly config: FrozenLakeConfig;
  readonly map: Cell[][];
  /** a small action vocabulary: the episode loop may pass these as allowed tokens */
  readonly actionTokens: string[] = [...FROZENLAKE_ACTIONS];
  private pos: [number, number] = [0, 0];
  private rng: Rng;
  private state: 'running' | 'goal' | 'hole' | 'out_of_steps' = 'running';
  private actions: string[] = [];
  private wasted = 0;

  constructor(
    readonly mapSeed: number,
    config: FrozenLakeConfigInput = {},
    /** seeds the slip draws (slippery maps) and the step latency; defaults to the map seed */
    private readonly episodeSeed = mapSeed,
    /** how a step waits its latency (a test may count instead of waiting) */
    private readonly wait: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  ) {
    this.config = FrozenLakeConfigSchema.parse(config);
    this.map = generateMap(mapSeed, this.config.size, this.config.holeProbability);
    this.rng = new Rng(hashInts(mapSeed, episodeSeed, 0x5119));
  }

  get position(): [number, number] {
    return [this.pos[0], this.pos[1]];
  }

  async reset(): Promise<ChatMessage[]> {
    this.pos = [0, 0];
    this.state = 'running';
    this.actions = [];
    this.wasted = 0;
    this.rng = new Rng(hashInts(this.mapSeed, this.episodeSeed, 0x5119));
    return [
      { role: 'system', content: this.config.systemPrompt },
      { role: 'user', content: renderGrid(this.map, this.pos) },
    ];
  }

  async step(assistantText: string): Promise<EnvStep> {
    if (this.state !== 'running') throw new Error('FrozenLake: step after the episode ended');
    if (this.config.latency) await this.wait(stepLatencyMs(this.config.latency, this.mapSeed, this.episodeSeed, this.actions.length + 1));
    const action = parseAction(assistantText);
    if (action === null) {
      this.wasted++;
      this.actions.push('?');
      return this.outOfSteps() ? { observation: renderGrid(this.map, this.pos), done: true, end: 'done' } : { observation: renderGrid(this.map, this.pos), done: false };
    }
    this.actions.push(action);
    const [dr, dc] = MOVES[this.slip(action)];
    const n = this.config.size;
    const r = Math.min(n - 1, Math.max(0, this.pos[0] + dr));
    const c = Math.min(n - 1, Math.max(0, this.pos[1] + dc));
    this.pos = [r, c];
    const cell = this.map[r][c];
    if (cell === 'H') this.state = 'hole';
    if (cell === 'G') this.state = 'goal';
    this.outOfSteps();
    const done = this.state !== 'running';
    return { observation: renderGrid(this.map, this.pos), done, ...(done ? { end: 'done' as const } : {}) };
  }

  /** With stepLimit `fail`, a running episode whose moves reached maxSteps ends here. */
  private outOfSteps(): boolean {
    if (this.state === 'running' && this.config.stepLimit === 'fail' && this.actions.length >= this.config.maxSteps) this.state = 'out_of_steps';
    return this.state === 'out_of_steps';
  }

  private slip(action: FrozenLakeAction): FrozenLakeAction {
    if (!this.config.slippery) return action;
    const i = FROZENLAKE_ACTIONS.indexOf(action);
    const k = Math.floor(this.rng.next() * 3); // 0: intended, 1: left of it, 2: right of it
    return FROZENLAKE_ACTIONS[k === 0 ? i : k === 1 ? (i + 3) % 4 : (i + 1) % 4];
  }

  async reward(_end: EndReason): Promise<{ reward: number; info?: Record<string, unknown> }> {
    return {
      reward: this.state === 'goal' ? 1 : 0,
      info: {
        mapSeed: this.mapSeed,
        outcome: this.state,
        position: this.position,
        actions: this.actions.join(''),
        wastedSteps: this.wasted,
        map: this.map.map((r) => r.join('')).join('\n'),
      },
    };
  }

  async close(): Promise<void> {}
}

/** Deterministic task ids for one iteration: `fl-<mapSeed>`. */
export function frozenLakeTaskIds(count: number, seed: number, iteration: number): string[] {
  return Array.from({ length: count }, (_, k) => `fl-${hashInts(seed, iteration, k)}`);
}

export function frozenLakeFromTaskId(taskId: string, config: FrozenLakeConfigInput = {}, episodeSeed?: number): FrozenLakeEnv {
  const m = /^fl-(\d+)$/.exec(taskId);
  if (!m) throw new Error(`not a FrozenLake task id: ${JSON.stringify(taskId)} (expected fl-<mapSeed>)`);
  const mapSeed = Number(m[1]);
  return new FrozenLakeEnv(mapSeed, config, episodeSeed ?? mapSeed);
}
