// A bounded pool of lanes: at most `lanes` calls of `work` run at once, each lane taking the next item as
// soon as its previous one is done. Promises only, no timers or I/O, so the same function serves workflow
// code (deterministic: items start in index order, as their activities or children are scheduled) and
// plain async code (image builds, `swerl grade`, local task validation).

/**
 * `work(item, index)` over every item, at most `lanes` at once; results in the items' order. The first
 * failure rejects the whole call (lanes already running go on to their end, as with Promise.all).
 */
export async function mapInLanes<T, R>(items: readonly T[], lanes: number, work: (item: T, index: number) => Promise<R>): Promise<R[]> {
  if (!Number.isInteger(lanes) || lanes < 1) throw new RangeError(`lanes: must be a positive integer, got ${lanes}`);
  const results = new Array<R>(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await work(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(lanes, items.length) }, lane));
  return results;
}

/** Lanes for each of `groups` groups running at once out of `total` lanes (at least one each). */
export function lanesPerGroup(total: number, groups: number): number {
  return Math.max(1, Math.floor(total / Math.max(1, groups)));
}
