// The seed functions' values are part of every run and recorded history (a task id names its map, a
// rollout its sampled tokens): these pins fail if any of them changes by a bit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chunkSeed, evalEpisodeSeed, hashInts, hashString, mix32, Rng, rolloutSeed } from '../../lib/seed.ts';

test('mix32 and hashInts give the recorded values', () => {
  assert.deepEqual([mix32(0), mix32(1), mix32(-1), mix32(0x7fffffff)], [2462723854, 2527132011, 920564995, 849629901]);
  assert.deepEqual([hashInts(), hashInts(7), hashInts(7, 0, 3), hashInts(1, 2, 3, 4, 5)], [625341585, 537571135, 3902035894, 1700040712]);
  assert.notEqual(hashInts(1, 2), hashInts(2, 1), 'order-sensitive');
});

test('Rng walks the recorded stream', () => {
  const r = new Rng(42);
  assert.deepEqual([r.nextU32(), r.nextU32(), r.next()], [763744907, 2711839145, 0.49404995795339346]);
});

test('episode seeds: rollouts, evaluation episodes (a rollout of iteration 0) and stop-string chunks', () => {
  assert.deepEqual([rolloutSeed(7, 0, 'fl-123', 1), rolloutSeed(0, 3, 'django__django-11099', 0)], [1348024836, 3564513812]);
  assert.equal(evalEpisodeSeed(7, 'fl-123', 1), rolloutSeed(7, 0, 'fl-123', 1));
  assert.equal(hashString(''), 0x811c9dc5);
  assert.deepEqual([chunkSeed(5, 0), chunkSeed(5, 1), chunkSeed(2 ** 51, 3)], [5, 2654435766, 2251807776992531]);
});
