// `swerl serve`'s options: continuous batching on by default, --no-batching and --max-batch reach the server's
// options, a bad --max-batch is refused naming the field.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ServeOptionsSchema } from '../../scripts/commands/serve.ts';

test('swerl serve: batching by default; --no-batching and --max-batch parsed; a bad --max-batch names the field', () => {
  const base = { model: '/m', port: '0', host: '127.0.0.1', name: 'policy', device: 'cpu' };
  assert.deepEqual(ServeOptionsSchema.parse({ ...base, batching: true }).batching, true);
  const o = ServeOptionsSchema.parse({ ...base, batching: false, maxBatch: '8' });
  assert.equal(o.batching, false);
  assert.equal(o.maxBatch, 8);
  const bad = ServeOptionsSchema.safeParse({ ...base, batching: true, maxBatch: '0' });
  assert.ok(!bad.success);
  assert.deepEqual(bad.error.issues[0]!.path, ['maxBatch']);
  assert.match(bad.error.issues[0]!.message, /maxBatch: at least 1/);
});
