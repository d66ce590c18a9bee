// The rollout pump's admission and staleness logic (DESIGN §10), pure and workflow-safe. Groups are numbered
// across the run: group g is task g mod B of batch ⌊g/B⌋ (B = batch.tasks), G rollouts (batch.samples) each.
// Versions are checkpoint indices; the newest, v, is the number of batches trained so far (step k trains batch k
// and writes checkpoint k+1).
//
// AReaL's admission rule counted in groups: group g may start once v ≥ ⌊g/B⌋ − η, groups start in index order,
// and at most C rollouts are in flight. The learner takes complete groups oldest first: step k trains exactly the
// groups of batch k, once all B are complete. So a token of batch k comes from a version ≥ k − η and the learner
// that trains it is version k: no trained token is more than η versions old. Order "admission" samples all of
// group g from version max(0, ⌊g/B⌋ − η) exactly (deterministic); "streaming" starts on the newest version and
// may move to newer ones between turns, never past ⌊g/B⌋ (checkpoint ⌊g/B⌋ + 1 needs this group trained).

export interface PumpParams {
  /** B: groups (tasks) per batch */
  groupsPerBatch: number;
  /** G: rollouts (samples) per group */
  groupSize: number;
  /** C: rollouts in flight at most (at least one batch, B·G) */
  capacity: number;
  /** η: how many versions older than the learner a trained token may be */
  maxStaleness: number;
  /** batches the run trains (config.iterations) */
  batches: number;
}

/** What the pump knows beyond the run's version: small, carried through continue-as-new. */
export interface PumpState {
  /** batches handed to the learner (trained, or in its step now): the next step trains batch `taken` */
  taken: number;
  /** the next group to admit (groups below it were admitted, by this run or one it recovered) */
  next: number;
  /** admitted groups not complete yet, ascending */
  inFlight: number[];
  /** complete groups not trained yet, ascending */
  done: number[];
}

export type PumpOrder = 'admission' | 'streaming';

/** A fresh pump, or one recovered from the store: training resumes at batch `trained`; `stored` are groups whose results are stored. */
export function recoveredPump(p: PumpParams, trained: number, stored: readonly number[] = []): PumpState {
  const first = trained * p.groupsPerBatch;
  return { taken: trained, next: first, inFlight: [], done: [...new Set(stored.filter((g) => g >= first && g < totalGroups(p)))].sort((a, b) => a - b) };
}

export function totalGroups(p: PumpParams): number {
  return p.batches * p.groupsPerBatch;
}

export function batchOf(g: number, p: Pick<PumpParams, 'groupsPerBatch'>): number {
  return Math.floor(g / p.groupsPerBatch);
}

/** The oldest version group g may be sampled from: max(0, ⌊g/B⌋ − η); it may start once the newest version reaches it. */
export function admissionVersion(g: number, p: Pick<PumpParams, 'groupsPerBatch' | 'maxStaleness'>): number {
  return Math.max(0, batchOf(g, p) - p.maxStaleness);
}

/** The newest version an episode of group g may use: ⌊g/B⌋ (it is trained by step ⌊g/B⌋). */
export function newestVersionFor(g: number, p: Pick<PumpParams, 'groupsPerBatch'>): number {
  return batchOf(g, p);
}

/** The version group g starts on: exactly its admission version ("admission"), or the newest there is ("streaming"). */
export function startVersion(g: number, p: Pick<PumpParams, 'groupsPerBatch' | 'maxStaleness'>, order: PumpOrder, newest: number): number {
  return order === 'admission' ? admissionVersion(g, p) : Math.min(newest, newestVersionFor(g, p));
}

/** Rollouts in flight (whole groups). */
export function rolloutsInFlight(s: PumpState, p: Pick<PumpParams, 'groupSize'>): number {
  return s.inFlight.length * p.groupSize;
}

/**
 * Admits every group the rule allows now, in index order: g < `until` groups (the run's end, or where a stop
 * request cuts it), one more group fits in C, and newest ≥ ⌊g/B⌋ − η. Groups already complete (a recovered run
 * learning of them) are passed over. Returns the admitted groups; `s` is updated.
 */
export function admit(s: PumpState, p: PumpParams, newest: number, until = totalGroups(p)): number[] {
  const out: number[] = [];
  const end = Math.min(until, totalGroups(p));
  while (s.next < end) {
    const g = s.next;
    if (s.done.includes(g)) {
      s.next++;
      continue;
    }
    if (rolloutsInFlight(s, p) + p.groupSize > p.capacity) break;
    if (newest < batchOf(g, p) - p.maxStaleness) break;
    s.inFlight.push(g);
    s.next++;
    out.push(g);
  }
  return out;
}

/**
 * Group g is complete. Accepted once for a group of a batch not handed to the learner yet, whether this run admitted
 * it or a run before a crash did; a repeated or late report changes nothing. Whether it was news.
 */
export function complete(s: PumpState, p: Pick<PumpParams, 'groupsPerBatch'>, g: number): boolean {
  if (g < s.taken * p.groupsPerBatch || s.done.includes(g)) return false;
  s.inFlight = s.inFlight.filter((x) => x !== g);
  s.done = insertSorted(s.done, g);
  return true;
}

/** Whether the next batch to train (`taken`) is complete: all its B groups done. */
export function batchReady(s: PumpState, p: PumpParams): boolean {
  if (s.taken >= p.batches) return false;
  const first = s.taken * p.groupsPerBatch;
  for (let g = first; g < first + p.groupsPerBatch; g++) if (!s.done.includes(g)) return false;
  return true;
}

/** Hands the next batch's groups to the learner (call when batchReady), oldest first; from now on their reports are no news. */
export function takeBatch(s: PumpState, p: PumpParams): number[] {
  if (!batchReady(s, p)) throw new Error(`batch ${s.taken} is not complete`);
  const first = s.taken * p.groupsPerBatch;
  const groups = Array.from({ length: p.groupsPerBatch }, (_, j) => first + j);
  s.done = s.done.filter((g) => g >= first + p.groupsPerBatch);
  s.taken++;
  return groups;
}

/** Versions between the learner that trains group g (⌊g/B⌋) and the version `sampledBy` that sampled a token of it. */
export function staleness(g: number, p: Pick<PumpParams, 'groupsPerBatch'>, sampledBy: number): number {
  return batchOf(g, p) - sampledBy;
}

function insertSorted(xs: readonly number[], x: number): number[] {
  const i = xs.findIndex((y) => y > x);
  return i < 0 ? [...xs, x] : [...xs.slice(0, i), x, ...xs.slice(i)];
}
