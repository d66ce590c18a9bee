// The workflows' own logic with stubbed activities, in Temporal's TestWorkflowEnvironment (a local dev
// server from the temporal binary we already have: no download, DESIGN §2): iterations, continue-as-new,
// leave-one-out advantages reaching the learner, a policy server that moved (one shared resync), lost
// rollouts and evaluation episodes counted apart, shards, config errors naming the field.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ApplicationFailure } from '@temporalio/common';
import { WorkflowFailedError } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { createActivities } from '../../activities/index.ts';
import { FailureType, retryable } from '../../lib/failures.ts';
import { temporalBinary } from '../../services/temporal-server.ts';
import { buildWorkflowBundle } from '../../workers/index.ts';
import { EVAL_DONE_SA, EVAL_PASS1_SA, RL_EVAL_PASS1_SA } from '../../workflows/evaluation-signals.ts';
import { RL_ITERATION_SA, RL_MEAN_REWARD_SA, RL_PHASE_SA } from '../../workflows/signals.ts';
import type { LearnerStepInput, RolloutInput, TrainingRunResult } from '../../lib/training/shapes.ts';
import type { GroupResult } from '../../activities/pump.ts';
import { resumeSignal, statusQuery, stopAfterIterationSignal } from '../../workflows/signals.ts';
import { mergeIterationSummaries } from '../../lib/grpo.ts';
import type { EvaluationRunResult } from '../../lib/eval/shapes.ts';
import { tinyConfig, waitFor } from '../helpers/temporal.ts';

type Activities = ReturnType<typeof createActivities>;

let env: TestWorkflowEnvironment;
let workers: Worker[] = [];
let running: Promise<unknown>;
/** the stubs the workers call now (each test sets its own) */
let stubs: Partial<Activities> = {};

/**
 * The SDK's local test server. Its start-up wait is 5 s, which a loaded 2-core host can exceed (seen once in a full
 * run beside other work): a start that timed out is tried again, twice at most; any other error is thrown.
 */
async function localEnvironment(): Promise<TestWorkflowEnvironment> {
  const searchAttributes = [RL_ITERATION_SA, RL_MEAN_REWARD_SA, RL_PHASE_SA, RL_EVAL_PASS1_SA, EVAL_PASS1_SA, EVAL_DONE_SA];
  for (let attempt = 1; ; attempt++) {
    try {
      return await TestWorkflowEnvironment.createLocal({ server: { executable: { type: 'existing-path', path: temporalBinary() }, searchAttributes } });
    } catch (e) {
      if (attempt >= 3 || !/did not start within/.test(String((e as Error)?.message))) throw e;
    }
  }
}

before(async () => {
  let bundle: WorkflowBundleWithSourceMap;
  [env, bundle] = await Promise.all([localEnvironment(), buildWorkflowBundle()]);
  // every activity name the workflows schedule, each calling the current test's stub
  const names = [
    'initCheckpoint',
    'sampleBatch',
    'syncPolicy',
    'rollout',
    'learnerStep',
    'storeLearnerItems',
    'recordMetrics',
    'reportRun',
    'prepareEvaluation',
    'evalEpisode',
    'recordEvalError',
    'writeEvaluationReport',
    'reportEvaluation',
    'recoverPump',
    'storeGroupResult',
    'collectBatch',
  ] as const;
  const activities = Object.fromEntries(
    names.map((n) => [
      n,
      (...args: unknown[]) => {
        const f = stubs[n] as ((...a: unknown[]) => Promise<unknown>) | undefined;
        if (!f) throw ApplicationFailure.nonRetryable(`activity ${n} is not stubbed in this test`);
        return f(...args);
      },
    ]),
  );
  workers = await Promise.all(['learner', 'rollout'].map((taskQueue) => Worker.create({ connection: env.nativeConnection, taskQueue, workflowBundle: bundle, activities })));
  running = Promise.all(workers.map((w) => w.run()));
});
after(async () => {
  for (const w of workers) w.shutdown();
  await running;
  await env?.teardown();
});

/** Runs `fn` with the workers calling `activities`. */
async function withWorkers<T>(activities: Partial<Activities>, fn: () => Promise<T>): Promise<T> {
  stubs = activities;
  return fn();
}

const summaryOf = (inp: RolloutInput, reward: number) => ({
  key: `traj/${inp.n}/${inp.taskId}/${inp.sample}`,
  taskId: inp.taskId,
  sample: inp.sample,
  reward,
  end: 'submitted' as const,
  steps: 3,
  tokens: 10,
  responseTokens: 4,
  seconds: 0.1,
});

/** A stubbed learner step's result: checkpoint `checkpoint` trained on `n` trajectories (one sequence each). */
const stepResult = (checkpoint: number, n: number, o: { loss: number; tokens: number }) =>
  ({ checkpoint, loss: o.loss, gradNorm: 1, clipFraction: 0, skipped: false, tokens: o.tokens, trajectories: n, sequences: n, lr: 1e-3, reused: false }) as never;

test('trainingRun: iterations through continue-as-new, LOO advantages to the learner, a moved policy server resynced once, a lost rollout counted apart', async () => {
  const calls = { syncs: [] as string[], steps: [] as LearnerStepInput[], reports: 0, rollouts: [] as string[] };
  let moved = false;
  const activities: Partial<Activities> = {
    initCheckpoint: async () => ({ checkpoint: 0, key: 'ckpt/0', created: true }),
    sampleBatch: async ({ n }) => ({ taskIds: [`a${n}`, `b${n}`], configKey: `cfg/${n}` }),
    syncPolicy: async ({ checkpoint }) => {
      calls.syncs.push(`${checkpoint}`);
      return { policyUrl: moved ? 'http://policy-2' : 'http://policy-1', checkpoint };
    },
    rollout: async (inp) => {
      calls.rollouts.push(`${inp.n}/${inp.taskId}/${inp.sample}@${inp.policyUrl}`);
      // iteration 1: the learner worker restarted, its server moved; the first rollout to notice triggers the resync
      if (inp.n === 1 && !moved) {
        moved = true;
        throw retryable(FailureType.PolicyUnavailable, 'connection refused');
      }
      if (inp.n === 1 && inp.policyUrl !== 'http://policy-2') throw retryable(FailureType.PolicyUnavailable, 'connection refused');
      // iteration 2: one rollout loses its sandbox for good
      if (inp.n === 2 && inp.taskId === 'b2' && inp.sample === 1) throw ApplicationFailure.nonRetryable('sandbox gone', 'SandboxDeadError');
      return summaryOf(inp, inp.sample === 0 ? 1 : 0);
    },
    learnerStep: async (inp) => {
      calls.steps.push(inp);
      return stepResult(inp.checkpoint + 1, inp.items.length, { loss: 0.5, tokens: 40 });
    },
    recordMetrics: async () => undefined,
    reportRun: async () => {
      calls.reports++;
      return { iterations: 0, plots: [], tracking: null };
    },
  };
  const config = { ...tinyConfig('/tmp/unused', { runId: 'wf-unit', iterations: 3, batch: { tasks: 2, samples: 2 }, maxInflightRollouts: 2 }), continueAsNewEvery: 2 };
  const result = (await withWorkers(activities, () =>
    env.client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: 'wf-unit', args: [config] }),
  )) as TrainingRunResult;

  assert.equal(result.iterations, 3);
  assert.equal(result.checkpoint, 3);
  assert.deepEqual(
    result.recent.map((r) => r.iteration),
    [0, 1, 2],
    'state carried over continue-as-new',
  );
  assert.deepEqual(
    calls.steps.map((s) => s.checkpoint),
    [0, 1, 2],
  );
  // rewards 1 (sample 0) and 0 (sample 1) per task: leave-one-out advantages +1 and -1
  assert.deepEqual(
    calls.steps[0]!.items.map((i) => [i.key, i.advantage]),
    [
      ['traj/0/a0/0', 1],
      ['traj/0/a0/1', -1],
      ['traj/0/b0/0', 1],
      ['traj/0/b0/1', -1],
    ],
  );
  // iteration 1: one sync at its start, one shared resync however many rollouts saw the old server
  assert.deepEqual(calls.syncs, ['0', '1', '1', '2']);
  const iteration1 = calls.rollouts.filter((r) => r.startsWith('1/'));
  assert.ok(iteration1.filter((r) => r.endsWith('@http://policy-1')).length <= 2, 'only the rollouts in flight when it moved saw the old server');
  assert.equal(iteration1.filter((r) => r.endsWith('@http://policy-2')).length, 4, 'every rollout ran again on the new one');
  // iteration 2: the lost rollout is out of the batch and its group's baseline (b2 has one episode: A = r)
  assert.deepEqual(
    calls.steps[2]!.items.map((i) => [i.key, i.advantage]),
    [
      ['traj/2/a2/0', 1],
      ['traj/2/a2/1', -1],
      ['traj/2/b2/0', 1],
    ],
  );
  assert.equal(result.lastMetrics!.rolloutErrors, 1);
  assert.equal(result.lastMetrics!.episodes, 3);
  assert.deepEqual(
    result.lastMetrics!.rolloutFailures!.map((f) => [f.taskId, f.sample]),
    [['b2', 1]],
  );
  assert.equal(calls.reports, 4, 'a report after each iteration and a final one');
});

test('integrity.pauseAbove: an iteration whose hack rate is above it pauses the run, which says why in its details; resume goes on', async () => {
  const recorded: unknown[] = [];
  const activities: Partial<Activities> = {
    initCheckpoint: async () => ({ checkpoint: 0, key: 'ckpt/0', created: true }),
    sampleBatch: async ({ n }) => ({ taskIds: [`t${n}`], configKey: `cfg/${n}` }),
    syncPolicy: async ({ checkpoint }) => ({ policyUrl: 'http://policy', checkpoint }),
    // iteration 0: three of four graded episodes caught by the audit; iteration 1: none
    rollout: async (inp) => ({ ...summaryOf(inp, 0), integrity: inp.n === 0 && inp.sample < 3 ? ['suspicious_patch/frame-getframe'] : ['test_file_edit/restored-tests'] }),
    learnerStep: async (inp) =>
      ({ checkpoint: inp.checkpoint + 1, loss: 0, gradNorm: 0, clipFraction: 0, skipped: false, tokens: 1, trajectories: 4, sequences: 0, lr: 1e-3, reused: false }) as never,
    recordMetrics: async ({ metrics }) => void recorded.push(metrics),
    reportRun: async () => ({ iterations: 0, plots: [], tracking: null }),
  };
  const config = { ...tinyConfig('/tmp/unused', { runId: 'wf-hacks', iterations: 2, batch: { tasks: 1, samples: 4 }, maxInflightRollouts: 4 }), integrity: { pauseAbove: 0.5 } };
  await withWorkers(activities, async () => {
    const h = await env.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: 'wf-hacks', args: [config] });
    const paused = await waitFor('the run paused itself', async () => {
      const st = await h.query(statusQuery);
      return st.paused && st.iteration === 1 ? st : undefined;
    });
    assert.equal(paused.lastMetrics!.integrity!.hackRate, 0.75);
    const text = (await h.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
    assert.match(text, /hack rate 75\.0% \(3 of 4 graded episodes\) at iteration 0 is above integrity\.pauseAbove 0\.5/);
    assert.match(text, /swerl report --integrity wf-hacks/);
    await h.signal(resumeSignal);
    const r = (await h.result()) as TrainingRunResult;
    assert.equal(r.iterations, 2);
    assert.deepEqual(r.lastMetrics!.integrity, { episodes: 4, hacks: 0, hackRate: 0, counts: { test_file_edit: 4, 'test_file_edit/restored-tests': 4 } });
  });
  const first = recorded[0] as { integrity: { counts: Record<string, number> } };
  assert.deepEqual(first.integrity.counts, { suspicious_patch: 3, 'suspicious_patch/frame-getframe': 3, test_file_edit: 1, 'test_file_edit/restored-tests': 1 });
});

test('evaluationRun: episodes in shards, an episode that could not happen recorded as an error with its reason', async () => {
  const episodes: string[] = [];
  const errors: { taskId: string; run: number; reason: string }[] = [];
  const activities: Partial<Activities> = {
    prepareEvaluation: async () => ({ evalId: 'ev-unit', taskIds: ['t1', 't2', 't3'], runs: 2, checkpoint: 4, modelName: 'm', repos: {} }) as never,
    syncPolicy: async ({ checkpoint }) => ({ policyUrl: 'http://policy', checkpoint }),
    evalEpisode: async ({ taskId, run, policyUrl }) => {
      episodes.push(`${taskId}#${run}@${policyUrl}`);
      if (taskId === 't2' && run === 1) throw ApplicationFailure.nonRetryable('docker unreachable', 'SandboxUnavailableError');
      return { taskId, run, end: 'submitted', resolved: run === 0, steps: 2, stored: false } as never;
    },
    recordEvalError: async (e) => {
      errors.push(e);
    },
    writeEvaluationReport: async () => ({ pass1: 0.5, passAtK: [0.5, 0.66], episodes: { planned: 6, completed: 5, resolved: 3, errors: 1 } }) as never,
  };
  const config = { evalId: 'ev-unit', tasksFile: 'tasks.jsonl', model: { run: 'r', checkpoint: 4 }, runs: 2, shardSize: 4, concurrency: 2, store: { url: 'file:///tmp/unused' } };
  const r = (await withWorkers(activities, () =>
    env.client.workflow.execute('evaluationRun', { taskQueue: 'learner', workflowId: 'ev-unit', args: [config] }),
  )) as EvaluationRunResult;
  assert.equal(r.summary.pass1, 0.5);
  assert.deepEqual(
    [...episodes].sort(),
    ['t1#0', 't1#1', 't2#0', 't2#1', 't3#0', 't3#1'].map((e) => `${e}@http://policy`),
  );
  assert.deepEqual(
    errors.map((e) => [e.taskId, e.run]),
    [['t2', 1]],
  );
  assert.match(errors[0]!.reason, /SandboxUnavailableError: docker unreachable/);
  const shards: string[] = [];
  for await (const w of env.client.workflow.list({ query: `WorkflowType = 'evaluationShard'` })) shards.push(w.workflowId);
  assert.deepEqual(shards.sort(), ['ev-unit-shard-0', 'ev-unit-shard-1']);
});

test('a bad config fails the workflow at once, naming the field and the value', async () => {
  for (const [type, args] of [
    ['trainingRun', [{ batch: { tasks: 0 } }]],
    ['evaluationRun', [{ tasksFile: 'x', model: { run: 'r' }, runs: 0 }]],
  ] as const) {
    await assert.rejects(
      withWorkers({}, () => env.client.workflow.execute(type, { taskQueue: 'learner', workflowId: `bad-${type}`, args: [...args] })),
      (e: unknown) => {
        assert.ok(e instanceof WorkflowFailedError);
        const cause = e.cause as ApplicationFailure;
        assert.equal(cause.type, FailureType.InvalidConfig);
        assert.equal(cause.nonRetryable, true);
        assert.match(cause.message, type === 'trainingRun' ? /batch\.tasks: must be ≥ 1, got 0/ : /runs: must be ≥ 1, got 0/);
        return true;
      },
    );
  }
});

/** Stubs of a pump run's activities over an in-memory store: what each rollout and step saw. */
function pumpStubs() {
  const groups = new Map<string, GroupResult>();
  const seen = { rollouts: [] as RolloutInput[], steps: [] as { checkpoint: number; keys: string[] }[], syncs: [] as number[] };
  const activities: Partial<Activities> = {
    initCheckpoint: async () => ({ checkpoint: 0, key: 'ckpt/0', created: true }),
    recoverPump: async () => ({ checkpoint: 0, stored: [], missingMetrics: [] }),
    sampleBatch: async ({ n }) => ({ taskIds: [`a${n}`, `b${n}`], configKey: `cfg/${n}` }),
    syncPolicy: async ({ checkpoint }) => {
      seen.syncs.push(checkpoint);
      return { policyUrl: 'http://policy', checkpoint };
    },
    rollout: async (inp) => {
      seen.rollouts.push(inp);
      return summaryOf(inp, inp.sample === 0 ? 1 : 0);
    },
    storeGroupResult: async ({ n, j, result }) => {
      groups.set(`g/${n}/${j}`, result);
      return { key: `g/${n}/${j}` };
    },
    collectBatch: async ({ n, groupsPerBatch }) => {
      const keys = Array.from({ length: groupsPerBatch }, (_, j) => `g/${n}/${j}`);
      const parts = keys.map((k) => groups.get(k)!);
      return {
        itemParts: keys,
        summary: mergeIterationSummaries(parts.map((p) => p.summary)),
        failures: [],
        rolloutErrors: 0,
        sampledFrom: Math.min(...parts.map((p) => p.checkpoint)),
      };
    },
    learnerStep: async (inp) => {
      seen.steps.push({ checkpoint: inp.checkpoint, keys: inp.itemParts ?? [] });
      const items = (inp.itemParts ?? []).flatMap((k) => groups.get(k)!.items);
      return stepResult(inp.checkpoint + 1, items.length, { loss: 0, tokens: 8 });
    },
    recordMetrics: async () => undefined,
    reportRun: async () => ({ iterations: 0, plots: [], tracking: null }),
  };
  return { activities, seen, groups };
}

test("pump (admission, η = 1) through continue-as-new after every step: batch n from checkpoint n−1, step k on exactly batch k's groups", async () => {
  const { activities, seen } = pumpStubs();
  const config = {
    ...tinyConfig('/tmp/unused', { runId: 'wf-pump', iterations: 4, batch: { tasks: 2, samples: 2 }, maxInflightRollouts: 8, async: { mode: 'pump', maxStaleness: 1 } }),
    continueAsNewEvery: 1,
  };
  const result = (await withWorkers(activities, () =>
    env.client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: 'wf-pump', args: [config] }),
  )) as TrainingRunResult;
  assert.equal(result.checkpoint, 4);
  assert.deepEqual(
    result.recent.map((r) => r.iteration),
    [0, 1, 2, 3],
  );
  assert.deepEqual(
    seen.steps,
    [0, 1, 2, 3].map((k) => ({ checkpoint: k, keys: [`g/${k}/0`, `g/${k}/1`] })),
  );
  for (const r of seen.rollouts) assert.equal(r.checkpoint, Math.max(0, r.n - 1), `${r.taskId}/${r.sample} of batch ${r.n}`);
  assert.equal(seen.rollouts.length, 4 * 2 * 2, 'each rollout once');
  assert.ok(seen.rollouts.every((r) => r.streaming === undefined));
  // a sync of the newest checkpoint at the start and after each step
  assert.deepEqual(seen.syncs, [0, 1, 2, 3, 4]);
  const runs: string[] = [];
  for await (const w of env.client.workflow.list({ query: `WorkflowId = 'wf-pump'` })) runs.push(w.runId);
  assert.ok(runs.length >= 4, `a chain of ${runs.length} runs`);
  assert.equal(result.lastMetrics!.sampledFrom, 2);
});

test('pump (streaming, η = 2): rollouts may move up to their batch; a stop after step 1 admits no later batch and ends once it is trained', async () => {
  const { activities, seen } = pumpStubs();
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let entered!: () => void;
  const inFirstStep = new Promise<void>((r) => (entered = r));
  const step = activities.learnerStep!;
  // the first step waits until the stop request is in
  activities.learnerStep = async (inp) => {
    if (inp.checkpoint === 0) {
      entered();
      await gate;
    }
    return step(inp);
  };
  const config = tinyConfig('/tmp/unused', {
    runId: 'wf-pump-stop',
    iterations: 6,
    batch: { tasks: 2, samples: 2 },
    maxInflightRollouts: 12,
    async: { mode: 'pump', maxStaleness: 2, order: 'streaming' },
  });
  const h = await withWorkers(activities, () => env.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: 'wf-pump-stop', args: [config] }));
  await inFirstStep;
  // while step 0 waits, the pump fills up to C and the two later batches finish their rollouts
  const st = await waitFor(
    'batches 1 and 2 done while step 0 waits',
    async () => {
      const s = await h.query(statusQuery);
      return s.pump?.done === 4 ? s : null;
    },
    60_000,
    50,
  );
  assert.deepEqual(st.pump, { inFlight: 0, done: 4, next: 6 }, 'three batches admitted (C = 12 rollouts), batch 0 in its step, batches 1 and 2 complete');
  await h.signal(stopAfterIterationSignal, { iteration: 1 });
  release();
  const result = (await h.result()) as TrainingRunResult;
  assert.equal(result.stopped, true);
  assert.equal(result.checkpoint, 2);
  assert.deepEqual(
    seen.steps.map((s) => s.checkpoint),
    [0, 1],
  );
  assert.ok(Math.max(...seen.rollouts.map((r) => r.n)) <= 2, 'nothing of batch 3 or later');
  for (const r of seen.rollouts) assert.deepEqual(r.streaming, { newest: r.n });
});
