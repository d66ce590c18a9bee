// Activities of an async pump run (DESIGN §10): a group's result stored where the run (or a run that recovers it)
// finds it, what the store says after a crash, and a batch's groups gathered for the learner step and the metrics.
import { mergeIterationSummaries, type IterationSummary } from '../lib/grpo.ts';
import { keys, listCheckpoints, openStore } from '../lib/store.ts';
import type { LearnerItem, RolloutFailure } from '../lib/training/shapes.ts';

/** What a group child workflow stores: the learner step reads `items`, the metrics the rest. */
export interface GroupResult {
  /** the group's index across the run */
  g: number;
  items: LearnerItem[];
  summary: IterationSummary;
  failures: RolloutFailure[];
  rolloutErrors: number;
  /** the version its episodes started on (streaming episodes may go on on newer ones) */
  checkpoint: number;
}

export interface StoreGroupResultInput {
  storeUrl: string;
  runId: string;
  /** batch */
  n: number;
  /** task index in the batch */
  j: number;
  result: GroupResult;
}

/** Stores a complete group (atomic; a retry writes the same result). */
export async function storeGroupResult(input: StoreGroupResultInput): Promise<{ key: string }> {
  const key = keys.groupResult(input.runId, input.n, input.j);
  await openStore(input.storeUrl).putJson(key, input.result);
  return { key };
}

export interface RecoverPumpInput {
  storeUrl: string;
  runId: string;
  groupsPerBatch: number;
  batches: number;
  /** η: no group of a batch past newest + η can have started */
  maxStaleness: number;
}
export interface RecoverPumpResult {
  /** the newest complete checkpoint (batches trained so far); -1 when there is none */
  checkpoint: number;
  /** groups of untrained batches whose results are stored */
  stored: number[];
  /** steps below the checkpoint without a metrics line (the run ended between the step and its line) */
  missingMetrics: number[];
}

/** What a run started on an existing store picks up: its newest checkpoint and the complete groups not trained yet. */
export async function recoverPump(input: RecoverPumpInput): Promise<RecoverPumpResult> {
  const store = openStore(input.storeUrl);
  const checkpoint = (await listCheckpoints(store, input.runId)).at(-1) ?? -1;
  const stored: number[] = [];
  const from = Math.max(0, checkpoint);
  for (let n = from; n < Math.min(input.batches, from + input.maxStaleness + 1); n++) {
    for (const f of await store.children(keys.groups(input.runId, n))) {
      const m = /^(\d+)\.json$/.exec(f);
      if (m && Number(m[1]) < input.groupsPerBatch) stored.push(n * input.groupsPerBatch + Number(m[1]));
    }
  }
  const text = (await store.get(keys.metrics(input.runId)))?.toString('utf8') ?? '';
  const lines = new Set(
    text
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => (JSON.parse(l) as { iteration: number }).iteration),
  );
  const missingMetrics = Array.from({ length: Math.max(0, checkpoint) }, (_, k) => k).filter((k) => !lines.has(k));
  return { checkpoint, stored: stored.sort((a, b) => a - b), missingMetrics };
}

export interface CollectBatchInput {
  storeUrl: string;
  runId: string;
  n: number;
  groupsPerBatch: number;
  /** failures listed (the count is exact) */
  maxFailures: number;
}
export interface CollectBatchResult {
  /** store keys of the groups' results, in task order (the learner step's itemParts) */
  itemParts: string[];
  summary: IterationSummary;
  failures: RolloutFailure[];
  rolloutErrors: number;
  /** the oldest version its episodes started on */
  sampledFrom: number;
}

/** Batch n's B groups from the store, in task order: what its learner step reads and its metrics line. */
export async function collectBatch(input: CollectBatchInput): Promise<CollectBatchResult> {
  const store = openStore(input.storeUrl);
  const itemParts: string[] = [];
  const parts: GroupResult[] = [];
  for (let j = 0; j < input.groupsPerBatch; j++) {
    const key = keys.groupResult(input.runId, input.n, j);
    const r = await store.getJson<GroupResult>(key);
    if (!r) throw new Error(`group ${j} of batch ${input.n} of run ${input.runId} is not in ${store.url}`);
    itemParts.push(key);
    parts.push(r);
  }
  return {
    itemParts,
    summary: mergeIterationSummaries(parts.map((p) => p.summary)),
    failures: parts.flatMap((p) => p.failures).slice(0, input.maxFailures),
    rolloutErrors: parts.reduce((a, p) => a + p.rolloutErrors, 0),
    sampledFrom: Math.min(...parts.map((p) => p.checkpoint)),
  };
}
