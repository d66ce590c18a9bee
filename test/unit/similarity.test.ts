import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parsePatch, similarityReward } from '../../lib/swe/similarity.ts';
import { sweTasks } from '../helpers/swe-tasks.ts';

const tasks = await sweTasks();

const gold = `diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,4 +1,4 @@
 def f(x):
-    return x + 1
+    return x + 2
 
 def g(y):
`;

test('identical patch → 1, also for every task gold patch', () => {
  assert.equal(similarityReward(gold, gold).reward, 1);
  for (const t of tasks) assert.equal(similarityReward(t.patch, t.patch).reward, 1, t.instance_id);
});

test('index hashes and hunk line numbers do not count', () => {
  const moved = gold.replace('index 1111111..2222222', 'index abcdef0..1234567').replace('@@ -1,4 +1,4 @@', '@@ -10,4 +10,4 @@');
  assert.equal(similarityReward(moved, gold).reward, 1);
});

test('empty → −1, malformed → −1', () => {
  assert.deepEqual(similarityReward('', gold).reward, -1);
  assert.deepEqual(similarityReward('  \n', gold).reason, 'empty_patch');
  assert.equal(similarityReward('just some text', gold).reward, -1);
  // hunk header says 4 lines but the body is shorter
  assert.equal(similarityReward(gold.split('\n').slice(0, 7).join('\n'), gold).reason, 'malformed_patch');
  assert.equal(similarityReward(gold.replace('@@ -1,4 +1,4 @@', '@@ broken @@'), gold).reward, -1);
  assert.equal(similarityReward(gold.replace('+    return x + 2', '*    return x + 2'), gold).reward, -1);
});

test('partially similar patches score in (0, 1), closer ones higher', () => {
  const close = gold.replace('x + 2', 'x + 3');
  const far = gold.replace('+    return x + 2', '+    raise NotImplementedError("nope")');
  const rc = similarityReward(close, gold).reward;
  const rf = similarityReward(far, gold).reward;
  assert.ok(rc > 0 && rc < 1, String(rc));
  assert.ok(rf > 0 && rf < rc, `${rf} < ${rc}`);
  const other = tasks[0]!;
  const cross = similarityReward(tasks[1]!.patch, other.patch).reward;
  assert.ok(cross > 0 && cross < 1);
});

test('task patches and test patches parse', () => {
  for (const t of tasks) {
    assert.ok(parsePatch(t.patch).ok, t.instance_id);
    assert.ok(parsePatch(t.test_patch).ok, t.instance_id);
  }
});
