// The repository's SWE tasks as scripts/build-swe-tasks.ts builds them (data/swe/ → data/swe/build/): each base is
// its library with exactly the task's two patches undone, named by its hash, and an sdist whose bytes are not the
// pinned ones is refused by name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { ensureSdist } from '../../scripts/build-swe-tasks.ts';
import { sweTasks } from '../helpers/swe-tasks.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const tasks = await sweTasks();

/** relative path → content of every file under `dir` */
function files(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of readdirSync(d)) {
      const p = join(d, e);
      if (e === '__pycache__') continue;
      if (statSync(p).isDirectory()) walk(p);
      else out.set(relative(dir, p), readFileSync(p, 'utf8'));
    }
  };
  walk(dir);
  return out;
}

test('ten tasks, each base named by the hash of its tarball, in the one environment the images provide', () => {
  assert.equal(tasks.length, 10);
  for (const t of tasks) {
    const tarBytes = gunzipSync(readFileSync(t.source_tarball!));
    assert.equal(t.base_commit, createHash('sha256').update(tarBytes).digest('hex').slice(0, 40), t.instance_id);
    assert.equal(t.environment, 'debian-bookworm-python3-pytest');
    assert.ok(
      t.FAIL_TO_PASS.every((id) => !t.PASS_TO_PASS.includes(id)),
      t.instance_id,
    );
  }
});

test("a library task's base plus its test patch and gold patch is the library as kept in data/swe/repos", () => {
  for (const t of tasks.filter((x) => (x.provenance as { library?: string } | undefined)?.library)) {
    const work = mkdtempSync(join(tmpdir(), 'swerl-task-base-'));
    const dir = join(work, 'base');
    try {
      mkdirSync(dir);
      execFileSync('tar', ['-xzf', t.source_tarball!, '-C', dir]);
      // outside any repository, git apply patches the files of its working directory
      const env = { ...process.env, GIT_CEILING_DIRECTORIES: work };
      for (const [name, patch] of Object.entries({ test_patch: t.test_patch, patch: t.patch })) {
        writeFileSync(join(work, name), patch);
        execFileSync('git', ['apply', join(work, name)], { cwd: dir, env });
      }
      const lib = join(ROOT, (t.provenance as { library: string }).library);
      assert.deepEqual(files(dir), files(lib), t.instance_id);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }
});

test('an sdist in the cache whose sha256 is not the pinned one is refused, naming the file and both hashes', async () => {
  const cache = mkdtempSync(join(tmpdir(), 'swerl-sdists-'));
  try {
    writeFileSync(join(cache, 'toolz-1.1.0.tar.gz'), 'not the release');
    const pin = { file: 'toolz-1.1.0.tar.gz', sha256: '0'.repeat(64), root: 'toolz-1.1.0' };
    await assert.rejects(ensureSdist('toolz==1.1.0', pin, cache), (e: Error) => {
      assert.match(e.message, /toolz-1\.1\.0\.tar\.gz: sha256 [0-9a-f]{64}, but data\/swe\/sdists\.json pins toolz==1\.1\.0 at 0{64}: delete the file/);
      return true;
    });
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
});
