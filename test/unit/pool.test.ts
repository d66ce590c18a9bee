// The bounded pool (lib/pool.ts) and the policy resync helper (lib/policy-resync.ts): pure promise logic,
// shared by the workflows and the command-line tools.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ActivityFailure, ApplicationFailure, RetryState } from '@temporalio/common';
import { lanesPerGroup, mapInLanes } from '../../lib/pool.ts';
import { MAX_POLICY_RESYNCS, policyResync } from '../../lib/policy-resync.ts';
import { FailureType, nonRetryable, retryable } from '../../lib/failures.ts';

const tick = () => new Promise<void>((r) => setImmediate(r));

test('mapInLanes keeps at most `lanes` calls running, starts items in order and returns results in order', async () => {
  let running = 0;
  let most = 0;
  const started: number[] = [];
  const out = await mapInLanes([5, 1, 4, 2, 3, 0, 6], 3, async (x, i) => {
    started.push(i);
    running++;
    most = Math.max(most, running);
    for (let k = 0; k < x; k++) await tick();
    running--;
    return x * 10;
  });
  assert.deepEqual(out, [50, 10, 40, 20, 30, 0, 60]);
  assert.equal(most, 3);
  assert.deepEqual(started.slice(0, 3), [0, 1, 2], 'the first lanes take the first items');
  assert.deepEqual(
    [...started].sort((a, b) => a - b),
    [0, 1, 2, 3, 4, 5, 6],
    'every item once',
  );
});

test('mapInLanes: fewer items than lanes, no items, a failing item, bad lanes', async () => {
  assert.deepEqual(await mapInLanes([1], 8, async (x) => x + 1), [2]);
  assert.deepEqual(await mapInLanes([], 2, async (x: number) => x), []);
  await assert.rejects(
    mapInLanes([1, 2, 3], 2, async (x) => {
      if (x === 2) throw new Error('item 2 failed');
      return x;
    }),
    /item 2 failed/,
  );
  await assert.rejects(
    mapInLanes([1], 0, async (x) => x),
    /lanes: must be a positive integer, got 0/,
  );
  await assert.rejects(
    mapInLanes([1], 1.5, async (x) => x),
    /got 1\.5/,
  );
});

test('lanesPerGroup splits the lanes over the groups running at once, at least one each', () => {
  assert.equal(lanesPerGroup(8, 3), 2);
  assert.equal(lanesPerGroup(2, 5), 1);
  assert.equal(lanesPerGroup(4, 0), 4);
});

const activityFailure = (cause: Error) => new ActivityFailure('activity failed', 'rollout', '1', RetryState.NON_RETRYABLE_FAILURE, 'worker', cause);
const unavailable = () => activityFailure(retryable(FailureType.PolicyUnavailable, 'policy server gone'));

test('policyResync: concurrent calls that saw the same server go share one sync, then call again on the new URL', async () => {
  let syncs = 0;
  let served = ''; // the server at http://a is gone
  const policy = policyResync('http://a', async () => {
    syncs++;
    await tick();
    served = 'http://b';
    return served;
  });
  const calls: string[] = [];
  const call = (url: string | undefined) => {
    calls.push(url!);
    return url === served ? Promise.resolve(url) : Promise.reject(unavailable());
  };
  const out = await Promise.all([policy.run(call), policy.run(call), policy.run(call)]);
  assert.deepEqual(out, ['http://b', 'http://b', 'http://b']);
  assert.equal(syncs, 1);
  assert.equal(policy.url, 'http://b');
  assert.deepEqual(calls, ['http://a', 'http://a', 'http://a', 'http://b', 'http://b', 'http://b']);
});

test('policyResync: other failures, no sync, and a server that stays gone stand', async () => {
  const other = activityFailure(nonRetryable(FailureType.PolicyRejected, 'bad request'));
  let syncs = 0;
  const policy = policyResync('http://a', async () => {
    syncs++;
    return `http://s${syncs}`;
  });
  await assert.rejects(
    policy.run(() => Promise.reject(other)),
    (e) => e === other,
  );
  assert.equal(syncs, 0);
  await assert.rejects(
    policyResync('http://a').run(() => Promise.reject(unavailable())),
    ActivityFailure,
  );
  let tries = 0;
  await assert.rejects(
    policy.run(() => (tries++, Promise.reject(unavailable()))),
    ActivityFailure,
  );
  assert.equal(tries, MAX_POLICY_RESYNCS + 1);
  assert.equal(syncs, MAX_POLICY_RESYNCS);
});

test('isFailureType sees through activity failures; an ApplicationFailure of another type is not it', async () => {
  const { isFailureType } = await import('../../lib/failures.ts');
  assert.equal(isFailureType(unavailable(), FailureType.PolicyUnavailable), true);
  assert.equal(isFailureType(ApplicationFailure.create({ type: 'PolicyUnavailabl' }), FailureType.PolicyUnavailable), false);
  assert.equal(isFailureType(new Error('x'), FailureType.PolicyUnavailable), false);
});
