// Dataset and bookkeeping activities (rollout queue): the task batch of an iteration and the metrics log.
import { validateConfig, type TrainingConfig } from '../lib/config.ts';
import { frozenLakeTaskIds } from '../lib/envs/frozenlake.ts';
import { hashInts, seededPermutation } from '../lib/seed.ts';
import { filteredSweTaskIds, listSweTasks } from './swe.ts';
import { checkContextFits } from './rollout.ts';
import { keys, openStore } from '../lib/store.ts';
import { integrityHackRate, runIteration, runMeanReward, runSuccessRate } from '../lib/metrics.ts';
import type { IterationMetrics, SampleBatchInput, SampleBatchResult, StoreLearnerItemsInput } from '../lib/training/shapes.ts';
import { FailureType, nonRetryable } from '../lib/failures.ts';

/**
 * Task ids of iteration n: deterministic from (run seed, n), so a retry draws the same batch.
 * SWE: a seeded permutation of the task file's ids, walked in order across iterations (an epoch at a time).
 */
export async function taskIdsFor(config: TrainingConfig, n: number): Promise<string[]> {
  switch (config.env.kind) {
    case 'frozenlake':
      return frozenLakeTaskIds(config.batch.tasks, config.seed, n);
    case 'swe': {
      const filter = config.env.taskFilter;
      const { ids, loadErrors } = await listSweTasks({ tasksFile: config.env.tasksFile });
      if (ids.length === 0) {
        throw nonRetryable(
          FailureType.InvalidConfig,
          `config.env.tasksFile: no valid task in ${JSON.stringify(config.env.tasksFile)}${loadErrors.length ? ` (${loadErrors.slice(0, 3).join('; ')})` : ''}`,
        );
      }
      if (filter) {
        const kept = await filteredSweTaskIds({ tasksFile: config.env.tasksFile, filter });
        if (kept.ids.length === 0) {
          const why = Object.entries(kept.excluded)
            .map(([k, n]) => `${n} ${k}`)
            .join(', ');
          throw nonRetryable(
            FailureType.InvalidConfig,
            `config.env.taskFilter: none of the ${ids.length} tasks of ${JSON.stringify(config.env.tasksFile)} passes ${JSON.stringify(filter)} (${why})`,
          );
        }
        return sampleIds(kept.ids, config, n);
      }
      return sampleIds(ids, config, n);
    }
    default:
      throw nonRetryable(FailureType.InvalidConfig, `config.env.kind: no task source for ${JSON.stringify((config.env as { kind: string }).kind)}`);
  }
}

/** SWE: a seeded permutation of the ids, walked in order across iterations (an epoch at a time). */
function sampleIds(ids: readonly string[], config: TrainingConfig, n: number): string[] {
  const sorted = [...ids].sort();
  const out: string[] = [];
  for (let k = 0; k < config.batch.tasks; k++) {
    const pos = n * config.batch.tasks + k;
    const epoch = Math.floor(pos / sorted.length);
    out.push(seededPermutation(sorted, hashInts(config.seed, epoch, 0x5e))[pos % sorted.length]!);
  }
  return out;
}

/** Draws the iteration's tasks and stores the config snapshot its rollouts and learner step read. */
export async function sampleBatch(input: SampleBatchInput): Promise<SampleBatchResult> {
  const v = validateConfig(input.config, { recorded: true });
  if (!v.ok) throw nonRetryable(FailureType.InvalidConfig, v.errors.join('; '));
  const store = openStore(v.config.store.url);
  const configKey = keys.iterationConfig(input.runId, input.n);
  const batchKey = keys.batch(input.runId, input.n);
  const stored = await store.getJson<{ taskIds: string[] }>(batchKey);
  const taskIds = stored?.taskIds ?? (await taskIdsFor(v.config, input.n));
  // a context window that can never hold a first turn fails the run here, before any rollout
  await checkContextFits(v.config, input.runId, taskIds);
  await store.putJson(configKey, v.config);
  if (!stored) await store.putJson(batchKey, { taskIds });
  return { taskIds, configKey };
}

/** Appends one metrics line per iteration to runs/{runId}/metrics.jsonl (deduplicated by iteration). */
export async function recordMetrics(input: { storeUrl: string; runId: string; metrics: IterationMetrics }): Promise<void> {
  const store = openStore(input.storeUrl);
  const key = keys.metrics(input.runId);
  const text = (await store.get(key))?.toString('utf8') ?? '';
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  const seen = new Set(lines.map((l) => (JSON.parse(l) as IterationMetrics).iteration));
  runIteration.set({ run_id: input.runId }, input.metrics.iteration + 1);
  runMeanReward.set({ run_id: input.runId }, input.metrics.meanReward);
  runSuccessRate.set({ run_id: input.runId }, input.metrics.successRate);
  if (input.metrics.integrity) integrityHackRate.set({ run_id: input.runId }, input.metrics.integrity.hackRate);
  if (seen.has(input.metrics.iteration)) return;
  // `time` (ms) is stored once with the line: trackers use it as the metric's fixed timestamp
  lines.push(JSON.stringify({ runId: input.runId, ...input.metrics, time: Date.now() }));
  await store.put(key, `${lines.join('\n')}\n`);
}

/** Stores one child workflow's learner items (a fanned-out iteration); the learner step reads them by key. */
export async function storeLearnerItems(input: StoreLearnerItemsInput): Promise<{ key: string; items: number }> {
  const key = keys.learnerItems(input.runId, input.n, input.part);
  await openStore(input.storeUrl).putJson(key, input.items);
  return { key, items: input.items.length };
}
