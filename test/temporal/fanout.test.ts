// The chunked fan-out: a batch larger than `rolloutsPerWorkflow` runs through rolloutChunk
// child workflows of whole tasks, none holding more than its share of the in-flight bound, and the
// iteration's result equals the one it computes when it runs every rollout itself.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { temporal } from '@temporalio/proto';
import { validateConfig } from '../../lib/config.ts';
import { keys, openStore } from '../../lib/store.ts';
import type { IterationMetrics, TrainingRunResult } from '../../lib/training/shapes.ts';
import { iterationWorkflowId, rolloutChunkWorkflowId } from '../../lib/training/shapes.ts';
import { tinyConfig, useTemporalWithWorker, type TestTemporal } from '../helpers/temporal.ts';
import { environmentFactory, failedAttempts, registerEnvironment } from '../../activities/rollout.ts';
import { SandboxDeadError } from '../../lib/sandbox.ts';
import type { Trajectory } from '../../lib/types.ts';

// The production FrozenLake environment, except that in runs named `lost-*` one rollout (the first task to
// reach the environment with sample 1) loses its "sandbox" in every step of every attempt
const victims = new Map<string, string>();
const frozenLake = environmentFactory('frozenlake')!;
registerEnvironment('frozenlake', async (config, taskId, seed, labels) => {
  const setup = await frozenLake(config, taskId, seed, labels);
  const run = labels['swerl.run'] ?? '';
  if (run.startsWith('lost-') && labels['swerl.sample'] === '1' && (victims.get(run) ?? victims.set(run, taskId).get(run)) === taskId) {
    const broken = Object.create(setup.env) as typeof setup.env;
    broken.step = async () => {
      throw new SandboxDeadError('sbx-test', 'container killed during a tool command');
    };
    return { ...setup, env: broken };
  }
  return setup;
});

let t: TestTemporal;
useTemporalWithWorker((x) => (t = x));

const EventType = {
  scheduled: 10, // ACTIVITY_TASK_SCHEDULED
  completed: 12,
  failed: 13,
  timedOut: 14,
  canceled: 16,
  childInitiated: 29, // START_CHILD_WORKFLOW_EXECUTION_INITIATED
} as const;

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

async function history(workflowId: string): Promise<HistoryEvent[]> {
  return (await t.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
}

/** The largest number of rollout activities scheduled and not yet closed at any point of a history. */
function maxPendingRollouts(events: HistoryEvent[]): number {
  const pending = new Set<string>();
  let max = 0;
  for (const e of events) {
    const type = Number(e.eventType);
    if (type === EventType.scheduled && e.activityTaskScheduledEventAttributes?.activityType?.name === 'rollout') {
      pending.add(String(e.eventId));
      max = Math.max(max, pending.size);
    }
    const closed = e.activityTaskCompletedEventAttributes ?? e.activityTaskFailedEventAttributes ?? e.activityTaskTimedOutEventAttributes ?? e.activityTaskCanceledEventAttributes;
    if (closed?.scheduledEventId) pending.delete(String(closed.scheduledEventId));
  }
  return max;
}

function rolloutsScheduled(events: HistoryEvent[]): number {
  return events.filter((e) => Number(e.eventType) === EventType.scheduled && e.activityTaskScheduledEventAttributes?.activityType?.name === 'rollout').length;
}

async function metricsOf(storeUrl: string, runId: string): Promise<IterationMetrics[]> {
  const text = (await openStore(storeUrl).get(keys.metrics(runId)))?.toString('utf8') ?? '';
  return text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as IterationMetrics);
}

test('a batch beyond rolloutsPerWorkflow fans out through child workflows and matches the inline iteration', async () => {
  const batch = { tasks: 6, samples: 2 };
  const inline = tinyConfig(t.dir, { runId: 'inline', iterations: 1, batch, maxInflightRollouts: 2 });
  const chunked = tinyConfig(t.dir, { runId: 'chunked', iterations: 1, batch, maxInflightRollouts: 2, rolloutsPerWorkflow: 4 });
  const [a, b] = await Promise.all(
    [inline, chunked].map((c) => t.client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: c.runId!, args: [c] }) as Promise<TrainingRunResult>),
  );
  assert.equal(a.iterations, 1);
  assert.equal(b.iterations, 1);

  // 6 tasks of 2 samples, 4 rollouts per workflow: 3 children of 2 whole tasks; the iteration schedules no rollout itself
  const parent = await history(iterationWorkflowId('chunked', 0));
  assert.equal(rolloutsScheduled(parent), 0);
  assert.equal(parent.filter((e) => Number(e.eventType) === EventType.childInitiated).length, 3);
  // 2 in flight over all children: 2 children at a time, 1 lane each
  for (let k = 0; k < 3; k++) {
    const events = await history(rolloutChunkWorkflowId('chunked', 0, k));
    assert.equal(rolloutsScheduled(events), 4, `child ${k}`);
    assert.equal(maxPendingRollouts(events), 1, `child ${k}: one lane`);
  }
  const inlineEvents = await history(iterationWorkflowId('inline', 0));
  assert.equal(rolloutsScheduled(inlineEvents), 12);
  assert.equal(maxPendingRollouts(inlineEvents), 2);

  const store = openStore(chunked.store.url);
  assert.equal((await store.list(keys.trajectories('chunked', 0))).length, 12);
  const [ma] = await metricsOf(inline.store.url, 'inline');
  const [mb] = await metricsOf(chunked.store.url, 'chunked');
  assert.equal(mb.rolloutWorkflows, 3);
  assert.equal(ma.rolloutWorkflows, undefined);
  assert.equal(mb.learnerTrajectories, 12);
  // same seeds, same episodes: the aggregated summary and the learner's step are the inline ones
  for (const k of ['episodes', 'meanReward', 'successRate', 'zeroAdvantageGroups', 'tokens', 'responseTokens', 'meanSteps', 'rolloutErrors'] as const) {
    assert.ok(Math.abs(Number(ma[k]) - Number(mb[k])) < 1e-9, `${k}: inline ${ma[k]}, chunked ${mb[k]}`);
  }
  assert.deepEqual(mb.ends, ma.ends);
  assert.deepEqual(mb.filtered, ma.filtered);
  assert.ok(Math.abs(ma.loss - mb.loss) <= 1e-6 * Math.max(1, Math.abs(ma.loss)), `loss: inline ${ma.loss}, chunked ${mb.loss}`);
  assert.ok(Math.abs(ma.gradNorm - mb.gradNorm) <= 1e-5 * Math.max(1, ma.gradNorm), `gradNorm: inline ${ma.gradNorm}, chunked ${mb.gradNorm}`);
});

test('a rollout whose retries run out for infrastructure is a rollout error: counted, listed, left out of training (inline and fanned out)', async () => {
  const batch = { tasks: 6, samples: 2 };
  const rollout = { startToCloseMinutes: 5, heartbeatSeconds: 2, heartbeatTimeoutSeconds: 10, maxAttempts: 2 };
  const configs = [
    tinyConfig(t.dir, { runId: 'lost-inline', iterations: 1, batch, maxInflightRollouts: 4, rollout }),
    tinyConfig(t.dir, { runId: 'lost-chunked', iterations: 1, batch, maxInflightRollouts: 4, rollout, rolloutsPerWorkflow: 4 }),
  ];
  await Promise.all(configs.map((c) => t.client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: c.runId!, args: [c] })));
  for (const c of configs) {
    const runId = c.runId!;
    const victim = victims.get(runId)!;
    const [m] = await metricsOf(c.store.url, runId);
    assert.equal(m.rolloutErrors, 1, `${runId}: counted`);
    assert.deepEqual(
      m.rolloutFailures?.map((f) => [f.taskId, f.sample]),
      [[victim, 1]],
      `${runId}: listed`,
    );
    assert.match(m.rolloutFailures![0]!.error, /sandbox sbx-test is dead: container killed during a tool command/);
    assert.equal(m.episodes, 11, `${runId}: not an episode`);
    assert.equal(m.learnerTrajectories, 11, `${runId}: left out of training`);
    const store = openStore(c.store.url);
    const trajs = await Promise.all((await store.list(keys.trajectories(runId, 0))).map((k) => store.getJson<Trajectory>(k)));
    assert.equal(trajs.length, 11);
    assert.ok(!trajs.some((tr) => tr!.taskId === victim && tr!.sample === 1), `${runId}: no trajectory for the lost rollout`);
    // every attempt's error is on record in the store
    const failed = await failedAttempts(store, runId, 0, victim, 1);
    assert.deepEqual(
      failed.map((f) => f.attempt),
      [1, 2],
    );
    for (const f of failed) assert.match(f.error, /^SandboxDeadError: sandbox sbx-test is dead/);
  }
});

test('fan-out bounds are config errors naming the field', () => {
  const big = validateConfig({ batch: { tasks: 512, samples: 64 }, rolloutsPerWorkflow: 64 });
  assert.equal(big.ok, false);
  assert.match(!big.ok ? big.errors.join('\n') : '', /config\.rolloutsPerWorkflow: must be at least 192 for 512 tasks × 64 samples \(512 child workflows, at most 200\), got 64/);
  const over = validateConfig({ rolloutsPerWorkflow: 5000 });
  assert.match(!over.ok ? over.errors.join('\n') : '', /config\.rolloutsPerWorkflow: must be ≤ 1900, got 5000/);
  const hb = validateConfig({ rollout: { heartbeatSeconds: 10, heartbeatTimeoutSeconds: 5 } });
  assert.match(!hb.ok ? hb.errors.join('\n') : '', /config\.rollout\.heartbeatTimeoutSeconds: must be > rollout\.heartbeatSeconds \(10\), got 5/);
  // the largest batch the schema allows fans out within every bound
  const max = validateConfig({ batch: { tasks: 512, samples: 64 }, maxInflightRollouts: 4096 });
  assert.equal(max.ok, true);
});
