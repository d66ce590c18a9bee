// The whole project type-checks under `strict` (tsx runs TypeScript without checking types, so
// without this a type error would only show in an editor).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

test('tsc --noEmit -p . reports no errors', () => {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const tsc = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '-p', '.'], { cwd: root, encoding: 'utf8', timeout: 300_000 });
  assert.equal(r.status, 0, `tsc found errors:\n${r.stdout}${r.stderr}`);
});
