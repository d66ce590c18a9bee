// The policy server's model cache (policy-server/models.ts): models held by directory, a pinned request finds
// its own while another is served, the least recently used idle models go beyond the capacity, a model a request
// runs on is never closed under it. The models here only count their closes: what is tested is the cache's
// bookkeeping (the HTTP side over real Learners is in test/cpu-heavy/policy-server.test.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ServedModels, slot, type ServableModel } from '../../policy-server/models.ts';

function model(name: string, closed: string[]): ServableModel {
  return {
    async generate() {
      throw new Error(`${name} does not generate here`);
    },
    close() {
      closed.push(name);
    },
  };
}

test('held by directory, LRU beyond the capacity, never closing a model in use', async () => {
  const closed: string[] = [];
  const loads: string[] = [];
  const load = async (dir: string) => {
    loads.push(dir);
    return model(dir, closed);
  };
  const m = new ServedModels(slot(model('/c/0', closed), 0, '/c/0', true), 2);
  assert.deepEqual(await m.serveDirectory('/c/1', 1, load), { loaded: true });
  assert.equal(m.current.path, '/c/1');
  // /c/0 is still held: a pinned request gets it, the current one stays /c/1
  const held0 = m.acquire('/c/0')!;
  assert.equal(held0.checkpoint, 0);
  assert.equal(m.current.path, '/c/1');
  // serving it again needs no load
  assert.deepEqual(await m.serveDirectory('/c/0', 0, load), { loaded: false });
  assert.equal(m.current.path, '/c/0');
  // a third model: /c/1 is the least recently used idle one beyond capacity 2, and goes
  assert.deepEqual(await m.serveDirectory('/c/2', 2, load), { loaded: true });
  assert.deepEqual(closed, ['/c/1']);
  assert.equal(m.acquire('/c/1'), null, 'not held any more');
  // a fourth model: /c/2 is idle and least recently used (/c/0 has a request on it)
  await m.serveDirectory('/c/3', 3, load);
  assert.deepEqual(closed, ['/c/1', '/c/2']);
  assert.deepEqual(m.cachedPaths, ['/c/0', '/c/3']);
  // with /c/3 in use too, a fifth exceeds the capacity until a request ends: nothing is closed under a request
  const held3 = m.acquire('/c/3')!;
  await m.serveDirectory('/c/4', 4, load);
  assert.deepEqual(m.cachedPaths, ['/c/0', '/c/3', '/c/4']);
  assert.deepEqual(closed, ['/c/1', '/c/2']);
  m.release(held0);
  assert.deepEqual(closed, ['/c/1', '/c/2', '/c/0'], 'closed once its request ended');
  m.release(held3);
  assert.deepEqual(m.cachedPaths, ['/c/3', '/c/4']);
  assert.deepEqual(loads, ['/c/1', '/c/2', '/c/3', '/c/4']);
  // two spellings of one directory are one model
  assert.equal(m.acquire('/c/x/../4')?.checkpoint, 4);
});

test('a model without a directory is closed once replaced and its requests end; one the server did not load is never closed', async () => {
  const closed: string[] = [];
  const m = new ServedModels(slot(model('given', closed), 0, null, false), 2);
  const r = m.acquire()!;
  // the swap waits for the request on the replaced model
  const swapped = m.serialised(() => m.swapIn(slot(model('mine', closed), 1, null, true)));
  await new Promise((res) => setImmediate(res));
  assert.equal(m.current.checkpoint, 1, 'new requests get the new model at once');
  m.release(r);
  await swapped;
  assert.deepEqual(closed, [], '"given" was not the server\'s to close');
  await m.serialised(() => m.swapIn(slot(model('third', closed), 2, null, true)));
  assert.deepEqual(closed, ['mine']);
  m.closeOwned();
  assert.deepEqual(closed, ['mine', 'third']);
});
