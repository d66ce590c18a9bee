// The model the server serves, and swapping it: a request holds the model it started on until it ends, a
// swap serves the new model to new requests at once and closes the old one (when the server loaded it)
// once its requests have finished. Swaps run one at a time.

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
  /** the server loaded it, so it closes it when replaced */
  readonly owned: boolean;
}

export function slot(learner: ServableModel, checkpoint: number | null, path: string | null, owned: boolean): Slot {
  return { learner, checkpoint, path, inFlight: 0, drained: [], owned };
}

export class ServedModels {
  private swaps: Promise<unknown> = Promise.resolve();
  constructor(private slotNow: Slot) {}

  /** the model new requests get */
  get current(): Slot {
    return this.slotNow;
  }

  /** Holds the current model for one request (pair with release). */
  acquire(): Slot {
    const s = this.slotNow;
    s.inFlight++;
    return s;
  }

  release(s: Slot): void {
    if (--s.inFlight === 0) for (const f of s.drained.splice(0)) f();
  }

  /** Serves `next` to new requests, then waits for the old model's requests and closes it when owned (call it inside `serialised`). */
  async swapIn(next: Slot): Promise<void> {
    const old = this.slotNow;
    this.slotNow = next;
    await drained(old);
    if (old.owned) old.learner.close();
  }

  /** Runs `fn` after every swap queued before it, so loads and swaps happen one at a time, in order. */
  serialised<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.swaps.then(fn, fn);
    this.swaps = p.catch(() => undefined);
    return p;
  }

  /** Waits for pending swaps, then for the requests on the current model. */
  async settle(): Promise<void> {
    await this.swaps;
    await drained(this.slotNow);
  }

  /** Closes the current model when the server loaded it (after `settle`, at shutdown). */
  closeOwned(): void {
    if (this.slotNow.owned) this.slotNow.learner.close();
  }
}

function drained(s: Slot): Promise<void> {
  return s.inFlight === 0 ? Promise.resolve() : new Promise((r) => s.drained.push(r));
}
