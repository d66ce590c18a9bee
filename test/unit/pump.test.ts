// The pump's admission and staleness logic (lib/pump.ts, DESIGN §10) by hand, then as properties over thousands
// of random runs (fast-check: generated parameters and completion orders, shrunk to a minimal failing case):
// the staleness bound is never exceeded, each group is trained exactly once and in batch order, and the pump
// never deadlocks, also when reports repeat, arrive late, or the run loses its state and recovers from the store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  admissionVersion,
  admit,
  batchReady,
  complete,
  newestVersionFor,
  recoveredPump,
  startVersion,
  staleness,
  takeBatch,
  totalGroups,
  type PumpOrder,
  type PumpParams,
} from '../../lib/pump.ts';

test('admission rule by hand: B = 2, G = 2, C = 8 (two batches), η = 1', () => {
  const p: PumpParams = { groupsPerBatch: 2, groupSize: 2, capacity: 8, maxStaleness: 1, batches: 4 };
  const s = recoveredPump(p, 0);
  // version 0: batches 0 and 1 (⌊g/2⌋ − 1 ≤ 0) may start; C holds four groups, exactly those
  assert.deepEqual(admit(s, p, 0), [0, 1, 2, 3]);
  assert.deepEqual(admit(s, p, 0), [], 'full');
  assert.deepEqual(
    [0, 1, 2, 3].map((g) => admissionVersion(g, p)),
    [0, 0, 0, 0],
  );
  assert.equal(complete(s, p, 1), true);
  assert.equal(complete(s, p, 1), false, 'a repeated report is no news');
  // room for one group, but group 4 (batch 2) needs version 1
  assert.deepEqual(admit(s, p, 0), []);
  assert.equal(batchReady(s, p), false);
  complete(s, p, 0);
  assert.equal(batchReady(s, p), true);
  assert.deepEqual(takeBatch(s, p), [0, 1]);
  // handed to the learner: a report for its groups, before or after the step ends, is no news
  assert.equal(complete(s, p, 0), false);
  // step 0 done: version 1; batch 2 samples exactly from version 1 in admission order
  assert.deepEqual(admit(s, p, 1), [4, 5]);
  assert.equal(startVersion(4, p, 'admission', 1), 1);
  assert.equal(admissionVersion(6, p), 2);
  assert.equal(newestVersionFor(5, p), 2);
  assert.equal(staleness(5, p, 1), 1);
  assert.equal(s.taken, 1);
});

test('η = 0 is the synchronous loop: batch n starts only once checkpoint n exists, and samples from it', () => {
  const p: PumpParams = { groupsPerBatch: 3, groupSize: 1, capacity: 9, maxStaleness: 0, batches: 3 };
  const s = recoveredPump(p, 0);
  assert.deepEqual(admit(s, p, 0), [0, 1, 2]);
  for (const g of [2, 0, 1]) complete(s, p, g);
  assert.deepEqual(admit(s, p, 0), [], 'batch 1 waits for checkpoint 1');
  takeBatch(s, p);
  assert.deepEqual(admit(s, p, 1), [3, 4, 5]);
  assert.equal(startVersion(3, p, 'admission', 1), 1);
});

test('streaming starts on the newest version, never past the batch that trains the group', () => {
  const p = { groupsPerBatch: 2, maxStaleness: 3 };
  assert.equal(startVersion(1, p, 'streaming', 5), 0, 'batch 0 is trained by step 0: version 0 at most');
  assert.equal(startVersion(9, p, 'streaming', 2), 2);
  assert.equal(startVersion(9, p, 'admission', 2), 1);
});

test('a recovered pump resumes at the first untrained batch and keeps the stored results', () => {
  const p: PumpParams = { groupsPerBatch: 2, groupSize: 1, capacity: 4, maxStaleness: 1, batches: 3 };
  const s = recoveredPump(p, 1, [0, 1, 3, 9]);
  assert.deepEqual(s, { taken: 1, next: 2, inFlight: [], done: [3] });
  // group 3 is stored: passed over, so C's room goes to groups 2 and 4, 5
  assert.deepEqual(admit(s, p, 1), [2, 4, 5]);
  assert.equal(totalGroups(p), 6);
});

// ---- properties ------------------------------------------------------------------------------------------

interface Sim {
  trained: number;
  newest: number;
  /** a learner step running on batch `trained` (its groups taken) */
  stepRunning: boolean;
  /** per group: the oldest version any of its tokens came from, and how often it was trained */
  minVersion: Map<number, number>;
  timesTrained: Map<number, number>;
  /** groups running as child workflows (survive a lost run state), with their current version */
  running: Map<number, number>;
  /** groups that reported so far */
  reported: number[];
  order: PumpOrder;
}

const paramsArb = fc
  .record({
    groupsPerBatch: fc.integer({ min: 1, max: 5 }),
    groupSize: fc.integer({ min: 1, max: 4 }),
    extraBatches: fc.integer({ min: 0, max: 3 }),
    maxStaleness: fc.integer({ min: 0, max: 4 }),
    batches: fc.integer({ min: 1, max: 6 }),
    slack: fc.nat({ max: 3 }),
  })
  .map(({ groupsPerBatch, groupSize, extraBatches, maxStaleness, batches, slack }) => {
    // C from one batch up to four, plus a remainder smaller than a group
    return { groupsPerBatch, groupSize, capacity: (1 + extraBatches) * groupsPerBatch * groupSize + (slack % groupSize), maxStaleness, batches } satisfies PumpParams;
  });

/** One random run: `choices` drive which event happens next (complete a group, finish the step, a repeated report, a lost state, a newer version in a streaming turn). */
function runPump(p: PumpParams, order: PumpOrder, choices: number[]): { sim: Sim; events: number } {
  let s = recoveredPump(p, 0);
  const sim: Sim = { trained: 0, newest: 0, stepRunning: false, minVersion: new Map(), timesTrained: new Map(), running: new Map(), reported: [], order };
  const start = (gs: number[]) => {
    for (const g of gs) {
      const v = startVersion(g, p, order, sim.newest);
      assert.ok(v <= sim.newest, `group ${g} starts on version ${v}, newest is ${sim.newest}`);
      // a re-admitted group whose child is still running (a recovered run) keeps its child
      if (!sim.running.has(g)) sim.running.set(g, v);
      sim.minVersion.set(g, Math.min(sim.minVersion.get(g) ?? Infinity, sim.running.get(g)!));
    }
  };
  let pick = 0;
  // the generated choices, then the first option (a completion or the step) so that every run can end
  const next = () => (pick < choices.length ? choices[pick++]! : 0);
  let events = 0;
  const maxEvents = 4 * totalGroups(p) + 2 * p.batches + 10;
  while (sim.trained < p.batches) {
    start(admit(s, p, sim.newest));
    if (!sim.stepRunning && batchReady(s, p)) {
      for (const g of takeBatch(s, p)) sim.timesTrained.set(g, (sim.timesTrained.get(g) ?? 0) + 1);
      sim.stepRunning = true;
    }
    const runningGroups = [...sim.running.keys()].sort((a, b) => a - b);
    const options: (() => void)[] = [];
    for (const g of runningGroups) {
      options.push(() => {
        sim.running.delete(g);
        complete(s, p, g);
        sim.reported.push(g);
      });
      if (order === 'streaming') {
        // a turn on the newest version the group may use
        options.push(() => sim.running.set(g, Math.max(sim.running.get(g)!, Math.min(sim.newest, newestVersionFor(g, p)))));
      }
    }
    if (sim.stepRunning) {
      options.push(() => {
        // the step trained batch `trained`: every token's version was within η of it
        for (let g = sim.trained * p.groupsPerBatch; g < (sim.trained + 1) * p.groupsPerBatch; g++) {
          const st = staleness(g, p, sim.minVersion.get(g)!);
          assert.ok(st >= 0 && st <= p.maxStaleness, `group ${g} trained by step ${sim.trained} with staleness ${st} > η ${p.maxStaleness}`);
        }
        sim.trained++;
        sim.newest = sim.trained;
        sim.stepRunning = false;
      });
    }
    // a report again, at any moment (a group run twice after a recovery, a signal delivered late): no news
    if (sim.reported.length) options.push(() => complete(s, p, sim.reported[next() % sim.reported.length]!));
    // the run loses its state (terminated, then a new run recovers from the store); running children go on
    options.push(() => {
      if (sim.stepRunning) return;
      const stored = [...new Set([...s.done])];
      s = recoveredPump(p, sim.trained, stored);
    });
    // admission and the learner had their chance above: with nothing running, nothing can ever happen again
    assert.ok(sim.running.size > 0 || sim.stepRunning, `deadlock: nothing running, batch ${sim.trained} not complete (${JSON.stringify(s)})`);
    options[next() % options.length]!();
    events++;
    assert.ok(events < choices.length + maxEvents, 'no progress');
  }
  return { sim, events };
}

test('properties over random completion orders: the bound holds, every group is trained once, no deadlock', () => {
  let runs = 0;
  fc.assert(
    fc.property(paramsArb, fc.constantFrom<PumpOrder>('admission', 'streaming'), fc.array(fc.nat(), { minLength: 1, maxLength: 400 }), (p, order, choices) => {
      const { sim } = runPump(p, order, choices);
      runs++;
      for (let g = 0; g < totalGroups(p); g++) assert.equal(sim.timesTrained.get(g), 1, `group ${g} trained ${sim.timesTrained.get(g) ?? 0} times`);
      assert.equal(sim.trained, p.batches);
    }),
    { numRuns: 3000, seed: 19 },
  );
  assert.equal(runs, 3000);
});

test('property: admission never exceeds C and never starts a group before its version exists', () => {
  fc.assert(
    fc.property(paramsArb, fc.array(fc.nat({ max: 3 }), { minLength: 1, maxLength: 200 }), (p, choices) => {
      const s = recoveredPump(p, 0);
      let newest = 0;
      let trained = 0;
      let i = 0;
      while (trained < p.batches && i < 10_000) {
        for (const g of admit(s, p, newest)) assert.ok(newest >= admissionVersion(g, p) && g < totalGroups(p));
        assert.ok(s.inFlight.length * p.groupSize <= p.capacity, `${s.inFlight.length} groups of ${p.groupSize} in flight, C = ${p.capacity}`);
        const c = choices[i++ % choices.length]!;
        if (batchReady(s, p) && c === 0) {
          takeBatch(s, p);
          trained++;
          newest = trained;
        } else if (s.inFlight.length) complete(s, p, s.inFlight[c % s.inFlight.length]!);
        else if (batchReady(s, p)) {
          takeBatch(s, p);
          trained++;
          newest = trained;
        } else assert.fail(`deadlock at batch ${trained}: ${JSON.stringify(s)}`);
      }
      assert.equal(trained, p.batches);
    }),
    { numRuns: 2000, seed: 7 },
  );
});
