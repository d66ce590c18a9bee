// Dataset and bookkeeping activities (rollout queue): the task batch of an iteration and the metrics log.
import { ApplicationFailure } from '@temporalio/activity';
import { validateConfig, type TrainingConfig } from '../lib/config.ts';
import { frozenLakeTaskIds } from '../lib/envs/frozenlake.ts';
import { keys, openStore } from '../lib/store.ts';
import type { IterationMetrics, SampleBatchInput, SampleBatchResult } from '../workflows/shapes.ts';

/** Task ids of iteration n: deterministic from (run seed, n), so a retry draws the same batch. */
export function taskIdsFor(config: TrainingConfig, n: number): string[] {
  switch (config.env.kind) {
    case 'frozenlake':
      return frozenLakeTaskIds(config.batch.tasks, config.seed, n);
    default:
      throw ApplicationFailure.create({
        type: 'InvalidConfig',
        nonRetryable: true,
        message: `config.env.kind: no task source for ${JSON.stringify(config.env.kind)} yet`,
      });
  }
}

/** Draws the iteration's tasks and stores the config snapshot its rollouts and learner step read. */
export async function sampleBatch(input: SampleBatchInput): Promise<SampleBatchResult> {
  const v = validateConfig(input.config);
  if (!v.ok) throw ApplicationFailure.create({ type: 'InvalidConfig', nonRetryable: true, message: v.errors.join('; ') });
  const store = openStore(v.config.store.url);
  const configKey = keys.iterationConfig(input.runId, input.n);
  const batchKey = keys.batch(input.runId, input.n);
  const stored = await store.getJson<{ taskIds: string[] }>(batchKey);
  const taskIds = stored?.taskIds ?? taskIdsFor(v.config, input.n);
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
  if (seen.has(input.metrics.iteration)) return;
  lines.push(JSON.stringify({ runId: input.runId, ...input.metrics }));
  await store.put(key, `${lines.join('\n')}\n`);
}
