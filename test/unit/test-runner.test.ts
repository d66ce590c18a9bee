// scripts/test.sh, the runner `npm test` and .ci/run call: a run in which every test passes but a step outside the
// tests fails (lint, formatting, a file that exits non-zero) fails, and says which step it was. A CI run once ended
// with "717 passed, 0 failed" and status 1 because one file was not formatted, and nothing said so.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const root = resolve(import.meta.dirname, '../..');

// a tree with the runner, one passing unit file, and package scripts `lint` and `format:check` exiting as told
function tree(lint: number, format: number, extra?: { file: string; body: string }): string {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-runner-'));
  mkdirSync(join(dir, 'scripts'));
  mkdirSync(join(dir, 'test/unit'), { recursive: true });
  copyFileSync(join(root, 'scripts/test.sh'), join(dir, 'scripts/test.sh'));
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
  const scripts = { lint: `exit ${lint}`, 'format:check': `exit ${format}` };
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'runner-probe', type: 'module', scripts }));
  writeFileSync(join(dir, 'test/unit/ok.test.ts'), "import { test } from 'node:test';\ntest('passes', () => {});\n");
  if (extra) {
    mkdirSync(join(dir, extra.file, '..'), { recursive: true });
    writeFileSync(join(dir, extra.file), extra.body);
  }
  return dir;
}

function run(dir: string) {
  // its own cache, so the probe's wall times never replace the real run's
  const env: NodeJS.ProcessEnv = { ...process.env, XDG_CACHE_HOME: join(dir, 'cache') };
  delete env.NODE_TEST_CONTEXT; // set in a test file: without this the child runner skips every file
  const r = spawnSync('bash', ['scripts/test.sh'], { cwd: dir, env, encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

test('every test passing but formatting failing: status 1, and the summary names format:check', (t) => {
  const dir = tree(0, 1);
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const r = run(dir);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /1 passed, 0 failed/);
  assert.match(r.out, /the run failed because:\n\s+npm run format:check failed/);
  assert.doesNotMatch(r.out, /npm run lint failed/);
});

test('a file that exits non-zero outside its tests is named with its status; a clean run says nothing more', (t) => {
  const crash = { file: 'test/docker/exits.test.ts', body: "import { test } from 'node:test';\ntest('passes', () => {});\nprocess.on('exit', () => { process.exitCode = 3; });\n" };
  const dir = tree(0, 0, crash);
  const clean = tree(0, 0);
  t.after(() => {
    rmSync(dir, { recursive: true, force: true });
    rmSync(clean, { recursive: true, force: true });
  });
  const r = run(dir);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /the run failed because:\n\s+test\/docker\/exits\.test\.ts exited with status \d+/);
  const ok = run(clean);
  assert.equal(ok.status, 0, ok.out);
  assert.doesNotMatch(ok.out, /the run failed because/);
});
