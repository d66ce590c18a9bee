// The models the server holds, and swapping the one it serves. A small cache of models keyed by the directory
// they were loaded from (checkpoint directories are written once, so a directory names its weights): runs and
// episodes in flight on several checkpoints at once (two runs sharing a worker, an asynchronous run's versions
// in use, DESIGN §10) each find theirs without a reload. A request holds the model it started on until it ends;
// a swap serves the new model to new requests at once. Beyond `capacity` the least recently used models no
// request is running on are closed (when the server loaded them). Loads and swaps run one at a time.
import { resolve } from 'node:path';

/** What the server needs from gpu-learner's `Learner` (structural, so any engine with this shape serves). */
export interface ServableModel {
  readonly config?: { vocab_size?: number; max_position_embeddings?: number };
  generate(
    promptIds: Int32Array,
    opts: { maxNewTokens: number; temperature?: number; topP?: number; seed?: number; stopIds?: number[]; allowedIds?: number[]; topLogprobs?: number },
  ): Promise<{ ids: Int32Array; logprobs: Float32Array; finishReason: 'stop' | 'length'; topIds?: Int32Array; topLogprobs?: Float32Array }>;
  close(): void;
}

export type LoadModel = (dir: string) => Promise<ServableModel>;

/** Models the server keeps loaded by default: the versions an asynchronous run has in use (η + 1) and another run's. */
export const MODEL_CACHE_DEFAULT = 4;

/** gpu-learner's Learner.load on the CPU. */
export async function defaultLoadModel(dir: string): Promise<ServableModel> {
  const { Learner } = await import('../gpu-learner/index.ts');
  return Learner.load(dir);
}

/** A served model and the requests running on it. */
export interface Slot {
  readonly learner: ServableModel;
  /** checkpoint index, null when unknown */
  readonly checkpoint: number | null;
  /** the directory it was loaded from, null when unknown */
  readonly path: string | null;
  inFlight: number;
  drained: (() => void)[];
  /** the server loaded it, so it closes it when it lets go of it */
  readonly owned: boolean;
}

export function slot(learner: ServableModel, checkpoint: number | null, path: string | null, owned: boolean): Slot {
  return { learner, checkpoint, path, inFlight: 0, drained: [], owned };
}

export class ServedModels {
  private swaps: Promise<unknown> = Promise.resolve();
  /** models with a directory, least recently used first (the current one among them) */
  private readonly byPath = new Map<string, Slot>();

  constructor(
    private slotNow: Slot,
    readonly capacity = MODEL_CACHE_DEFAULT,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity: must be a positive integer, got ${capacity}`);
    this.remember(slotNow);
  }

  /** the model new requests without a directory get */
  get current(): Slot {
    return this.slotNow;
  }

  /** directories of the models held now, least recently used first */
  get cachedPaths(): string[] {
    return [...this.byPath.keys()];
  }

  /** The model loaded from `path`, marked most recently used; undefined when none is held. */
  lookup(path: string): Slot | undefined {
    const key = resolve(path);
    const s = this.byPath.get(key);
    if (s) {
      this.byPath.delete(key);
      this.byPath.set(key, s);
    }
    return s;
  }

  /** Holds a model for one request (pair with release): the one loaded from `path`, or the current one when no path is given; null when `path` is not held. */
  acquire(path?: string | null): Slot | null {
    const s = path == null ? this.slotNow : this.lookup(path);
    if (!s) return null;
    s.inFlight++;
    return s;
  }

  release(s: Slot): void {
    if (--s.inFlight > 0) return;
    for (const f of s.drained.splice(0)) f();
    this.evict();
  }

  /**
   * Serves `next` to new requests and keeps it by its directory. A model without a directory cannot be asked for
   * again: once replaced it is closed after its requests (when owned). Call it inside `serialised`.
   */
  async swapIn(next: Slot): Promise<void> {
    const old = this.slotNow;
    this.slotNow = next;
    this.remember(next);
    this.evict();
    if (old.path === null && old !== next) {
      await drained(old);
      if (old.owned) old.learner.close();
    }
  }

  /**
   * Serves the model in directory `path` (checkpoint index `checkpoint`): the one held, or a copy `load` reads
   * (the server owns it). Whether it had to load. Runs after the swaps queued before it.
   */
  serveDirectory(path: string, checkpoint: number | null, load: LoadModel, closing: () => boolean = () => false): Promise<{ loaded: boolean }> {
    return this.serialised(async () => {
      const held = this.lookup(path);
      if (held && held.checkpoint === checkpoint) {
        this.slotNow = held;
        return { loaded: false };
      }
      const learner = await load(path);
      if (closing()) {
        learner.close();
        throw new ServerClosingError();
      }
      await this.swapIn(slot(learner, checkpoint, path, true));
      return { loaded: true };
    });
  }

  /** Runs `fn` after every swap queued before it, so loads and swaps happen one at a time, in order. */
  serialised<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.swaps.then(fn, fn);
    this.swaps = p.catch(() => undefined);
    return p;
  }

  /** Waits for pending swaps, then for the requests on every model held. */
  async settle(): Promise<void> {
    await this.swaps;
    await Promise.all([this.slotNow, ...this.byPath.values()].map(drained));
  }

  /** Closes every model the server loaded (after `settle`, at shutdown). */
  closeOwned(): void {
    const all = new Set([this.slotNow, ...this.byPath.values()]);
    this.byPath.clear();
    for (const s of all) if (s.owned) s.learner.close();
  }

  private remember(s: Slot): void {
    if (s.path === null) return;
    const key = resolve(s.path);
    const before = this.byPath.get(key);
    this.byPath.delete(key);
    this.byPath.set(key, s);
    // the same directory loaded again (another checkpoint index for it): the older copy goes once idle
    if (before && before !== s && before.owned) void drained(before).then(() => before.learner.close());
  }

  /** Closes the least recently used models beyond `capacity` that no request runs on and that are not served now. */
  private evict(): void {
    for (const [key, s] of this.byPath) {
      if (this.byPath.size <= this.capacity) return;
      if (s === this.slotNow || s.inFlight > 0) continue;
      this.byPath.delete(key);
      if (s.owned) s.learner.close();
    }
  }
}

/** The server is shutting down: a model loaded meanwhile is not served. */
export class ServerClosingError extends Error {
  override name = 'ServerClosingError';
  constructor() {
    super('server is closing');
  }
}

function drained(s: Slot): Promise<void> {
  return s.inFlight === 0 ? Promise.resolve() : new Promise((r) => s.drained.push(r));
}
