// Grading in fresh containers of a real task image.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { gradePatch } from '../activities/grade.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { imagesFor, requireDocker, sharedTask, testBackend } from './helpers/docker.ts';

const { backend, cleanup } = testBackend();
let task: SweTask;

before(async () => {
  await requireDocker();
  task = await sharedTask('tkem__cachetools-bb4b37c');
  await imagesFor([task]);
});
after(async () => {
  await cleanup();
});

describe('gradePatch', () => {
  test('gold patch → 1, every listed test PASSED', async () => {
    const g = await gradePatch({ task, patch: task.patch, backend });
    assert.equal(g.reward, 1, g.logTail);
    assert.equal(g.reason, 'passed');
    for (const id of [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS]) assert.equal(g.tests[id], 'PASSED', id);
    assert.ok(g.durationS > 0);
  });

  test('empty patch → 0', async () => {
    const g = await gradePatch({ task, patch: '  \n', backend });
    assert.equal(g.reward, 0);
    assert.equal(g.reason, 'empty_patch');
  });

  test('a patch that does not apply → 0, patch_apply_failed', async () => {
    const bad = 'diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1,1 +1,1 @@\n-old\n+new\n';
    const g = await gradePatch({ task, patch: bad, backend });
    assert.equal(g.reward, 0);
    assert.equal(g.reason, 'patch_apply_failed');
    assert.match(g.logTail, /nope\.py/);
  });

  test('a patch that edits the tests to pass → 0 (tests restored before test_patch)', async () => {
    // replace the failing tests' file with a trivially passing one; no source fix
    const testFile = task.FAIL_TO_PASS[0]!.split('::')[0]!;
    const cheat = await cheatPatch(testFile);
    const g = await gradePatch({ task, patch: cheat, backend });
    assert.equal(g.reward, 0, g.logTail);
    assert.equal(g.reason, 'tests_failed');
    assert.ok(task.FAIL_TO_PASS.some((id) => g.tests[id] !== 'PASSED'));
  });

  test('a test run past the limit → 0, timeout', async () => {
    const slow: SweTask = { ...task, test_cmd: `sleep 30; ${task.test_cmd}` };
    const g = await gradePatch({ task: slow, patch: task.patch, backend, timeoutS: 2 });
    assert.equal(g.reward, 0);
    assert.equal(g.reason, 'timeout');
  });
});

/** A diff that turns every test in `file` into `pass` (made in a sandbox so it applies exactly). */
async function cheatPatch(file: string): Promise<string> {
  const sb = await backend.start((await imagesFor([task]))[0]!);
  try {
    const r = await sb.exec(
      `python3 - <<'EOF'\nimport re\np='${file}'\ns=open(p).read()\ns=re.sub(r'(def test_\\w+\\(self[^)]*\\):)', r'\\1\\n        return', s)\nopen(p,'w').write(s)\nEOF`,
      30,
    );
    assert.equal(r.exit, 0, r.stderr);
    const d = await sb.diff();
    assert.match(d, /return/);
    return d;
  } finally {
    await sb.stop();
  }
}
