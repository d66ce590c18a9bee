import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  FROZENLAKE_ACTIONS,
  FrozenLakeConfigSchema,
  FrozenLakeEnv,
  frozenLakeFromTaskId,
  frozenLakeTaskIds,
  generateMap,
  hasPath,
  parseAction,
  stepLatencyMs,
  renderGrid,
} from '../../lib/envs/frozenlake.ts';

test('config defaults and validation', () => {
  const c = FrozenLakeConfigSchema.parse({});
  assert.equal(c.size, 4);
  assert.equal(c.holeProbability, 0.2);
  assert.equal(c.slippery, false);
  assert.throws(() => FrozenLakeConfigSchema.parse({ size: 1 }));
});

test('maps are deterministic, S top-left, G bottom-right, always solvable', () => {
  assert.deepEqual(generateMap(42), generateMap(42));
  let differ = 0;
  for (let seed = 0; seed < 300; seed++) {
    const m = generateMap(seed, 5, 0.35);
    assert.equal(m[0][0], 'S');
    assert.equal(m[4][4], 'G');
    assert.ok(hasPath(m), `seed ${seed} unsolvable`);
    if (JSON.stringify(m) !== JSON.stringify(generateMap(seed + 1, 5, 0.35))) differ++;
  }
  assert.ok(differ > 250, 'maps should vary with the seed');
  const holes = Array.from(
    { length: 200 },
    (_, s) =>
      generateMap(s)
        .flat()
        .filter((c) => c === 'H').length,
  );
  const mean = holes.reduce((a, b) => a + b, 0) / holes.length;
  assert.ok(mean > 1.5 && mean < 3.5, `mean holes ${mean} for 14 cells at p .2`);
  assert.ok(
    !hasPath([
      ['S', 'H'],
      ['H', 'G'],
    ]),
  );
});

test('parseAction takes the first action letter', () => {
  assert.equal(parseAction('R'), 'R');
  assert.equal(parseAction('xxDLU'), 'D');
  assert.equal(parseAction('no'), null);
  assert.equal(parseAction(''), null);
  assert.deepEqual([...FROZENLAKE_ACTIONS], ['L', 'D', 'R', 'U']);
});

const findSeed = (pred: (m: string[][]) => boolean) => {
  for (let s = 0; s < 10000; s++) if (pred(generateMap(s))) return s;
  throw new Error('no seed');
};

test('reset gives the exact system and user messages', async () => {
  const env = new FrozenLakeEnv(7);
  const msgs = await env.reset();
  assert.equal(msgs.length, 2);
  assert.deepEqual(msgs[0], { role: 'system', content: 'Reach G. Avoid H. Reply L D R U.' });
  assert.equal(msgs[1].role, 'user');
  const rows = msgs[1].content.split('\n');
  assert.equal(rows.length, 4);
  assert.equal(rows[0][0], 'P');
  assert.equal(rows[3][3], 'G');
  assert.equal(msgs[1].content, renderGrid(env.map, [0, 0]));
  assert.deepEqual(env.actionTokens, ['L', 'D', 'R', 'U']);
});

test('moves, walls, wasted steps and goal', async () => {
  const seed = findSeed((m) => m.every((row) => row.every((c) => c !== 'H')));
  const env = new FrozenLakeEnv(seed);
  await env.reset();
  // walls: L and U from the corner stay put
  let s = await env.step('L');
  assert.equal(s.observation, 'PFFF\nFFFF\nFFFF\nFFFG');
  assert.equal(s.done, false);
  await env.step('U');
  assert.deepEqual(env.position, [0, 0]);
  s = await env.step('hello'); // wasted
  assert.deepEqual(env.position, [0, 0]);
  assert.equal(s.done, false);
  s = await env.step('R');
  assert.equal(s.observation, 'SPFF\nFFFF\nFFFF\nFFFG');
  s = await env.step('D then R');
  assert.equal(s.observation, 'SFFF\nFPFF\nFFFF\nFFFG');
  for (const a of ['R', 'R', 'D']) assert.equal((await env.step(a)).done, false);
  s = await env.step('D');
  assert.equal(s.observation, 'SFFF\nFFFF\nFFFF\nFFFP');
  assert.equal(s.done, true);
  assert.equal(s.end, 'done');
  const r = await env.reward('done');
  assert.equal(r.reward, 1);
  assert.equal(r.info?.outcome, 'goal');
  assert.equal(r.info?.actions, 'LU?RDRRDD');
  assert.equal(r.info?.wastedSteps, 1);
  await assert.rejects(env.step('R'), /after the episode ended/);
});

test('falling in a hole ends with reward 0', async () => {
  const seed = findSeed((m) => m[0][1] === 'H');
  const env = new FrozenLakeEnv(seed);
  await env.reset();
  const s = await env.step('R');
  assert.equal(s.done, true);
  assert.equal(s.end, 'done');
  assert.equal(s.observation.split('\n')[0].slice(0, 2), 'SP');
  const r = await env.reward('done');
  assert.equal(r.reward, 0);
  assert.equal(r.info?.outcome, 'hole');
  // not reaching anything: reward 0
  const env2 = new FrozenLakeEnv(seed);
  await env2.reset();
  await env2.step('U');
  assert.equal((await env2.reward('max_steps')).reward, 0);
});

test('stepLimit "fail": the lake ends an episode still on the ice after maxSteps moves, as a trained failure', async () => {
  assert.equal(FrozenLakeConfigSchema.parse({}).stepLimit, 'truncate');
  const seed = findSeed((m) => m.every((row) => row.every((c) => c !== 'H')));
  const env = new FrozenLakeEnv(seed, { maxSteps: 3, stepLimit: 'fail' });
  await env.reset();
  assert.equal((await env.step('U')).done, false);
  assert.equal((await env.step('no move')).done, false, 'a wasted step counts');
  const s = await env.step('L');
  assert.equal(s.done, true);
  assert.equal(s.end, 'done', 'the environment ended it, not the loop: not compact-filtered');
  const r = await env.reward('done');
  assert.equal(r.reward, 0);
  assert.equal(r.info?.outcome, 'out_of_steps');
  // the goal on the last allowed move is still the goal
  const win = new FrozenLakeEnv(seed, { size: 2, maxSteps: 2, stepLimit: 'fail', holeProbability: 0 });
  await win.reset();
  await win.step('R');
  assert.equal((await win.step('D')).done, true);
  assert.equal((await win.reward('done')).info?.outcome, 'goal');
});

test('slippery moves are deterministic per episode seed', async () => {
  const run = async (episodeSeed: number) => {
    const env = new FrozenLakeEnv(3, { holeProbability: 0, slippery: true }, episodeSeed);
    await env.reset();
    const out: string[] = [];
    for (let i = 0; i < 6; i++) out.push((await env.step('D')).observation);
    return out;
  };
  assert.deepEqual(await run(1), await run(1));
  const variants = new Set(await Promise.all([1, 2, 3, 4, 5, 6].map(async (s) => JSON.stringify(await run(s)))));
  assert.ok(variants.size > 1);
});

test('task ids are deterministic and name their map', () => {
  const a = frozenLakeTaskIds(16, 1, 0);
  assert.deepEqual(a, frozenLakeTaskIds(16, 1, 0));
  assert.notDeepEqual(a, frozenLakeTaskIds(16, 1, 1));
  assert.equal(new Set(a).size, 16);
  for (const id of a) assert.match(id, /^fl-\d+$/);
  const env = frozenLakeFromTaskId(a[0], { size: 5 });
  assert.equal(env.mapSeed, Number(a[0].slice(3)));
  assert.deepEqual(env.map, generateMap(env.mapSeed, 5, 0.2));
  assert.throws(() => frozenLakeFromTaskId('swe-1'), /not a FrozenLake task id/);
});

test('the long-tailed variant: a seeded lognormal wait per step, its median growing with the step, capped', async () => {
  const l = { medianMs: 10, sigma: 1, growth: 0.5, maxMs: 1000 };
  assert.equal(stepLatencyMs(l, 3, 4, 2), stepLatencyMs(l, 3, 4, 2), 'the same episode waits the same');
  assert.notEqual(stepLatencyMs(l, 3, 4, 2), stepLatencyMs(l, 3, 5, 2));
  // over many episodes: the median of step t is 10·(1 + 0.5t) (lognormal median = e^μ); the tail is long
  for (const t of [1, 4]) {
    const xs = Array.from({ length: 4001 }, (_, e) => stepLatencyMs(l, 1, e, t)).sort((a, b) => a - b);
    const median = 10 * (1 + 0.5 * t);
    assert.ok(Math.abs(xs[2000]! / median - 1) < 0.1, `step ${t}: median ${xs[2000]} vs ${median}`);
    // p99 of a σ = 1 lognormal: e^2.326 ≈ 10.2 × the median
    assert.ok(xs[3960]! / median > 7 && xs[3960]! / median < 14, `step ${t}: p99 ${xs[3960]}`);
    assert.ok(xs.at(-1)! <= 1000);
  }
  assert.ok(Math.abs(stepLatencyMs({ ...l, sigma: 0 }, 1, 1, 2) - 20) < 1e-9, 'σ = 0: the median itself');
  // the environment waits it before each step (counted here, not slept)
  const waits: number[] = [];
  const env = new FrozenLakeEnv(7, { latency: l }, 9, async (ms) => void waits.push(ms));
  await env.reset();
  await env.step('R');
  await env.step('D');
  assert.deepEqual(waits, [stepLatencyMs(l, 7, 9, 1), stepLatencyMs(l, 7, 9, 2)]);
  assert.throws(() => FrozenLakeConfigSchema.parse({ latency: { medianMs: -1 } }), /medianMs/);
});
