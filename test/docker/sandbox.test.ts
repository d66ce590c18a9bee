// Docker sandbox against a real engine: isolation, limits, timeouts, output cap, file transfer.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Docker from 'dockerode';
import { SandboxDeadError, SandboxPathError, type DockerSandbox } from '../../activities/sandbox/docker.ts';
import { filterPatch, pathMatchesAny } from '../../activities/sandbox/common.ts';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { sweTask, TASK } from '../helpers/swe-tasks.ts';

const { backend, cleanup } = testBackend();
let image: string;
let sb: DockerSandbox;

before(async () => {
  await requireDocker();
  [image] = await imagesFor([await sweTask(TASK.srcLayout)]);
  sb = await backend.start(image!, { cpus: 1, memoryBytes: 256 << 20, pids: 128 });
});
after(async () => {
  await sb?.stop();
  await cleanup();
});

describe('docker sandbox', () => {
  test('runs in /testbed with the repository committed; stdout and stderr apart', async () => {
    const r = await sb.exec('pwd; git status --porcelain | wc -l; echo oops >&2; exit 3', 20);
    assert.equal(r.exit, 3);
    assert.equal(r.stdout, '/testbed\n0\n');
    assert.equal(r.stderr, 'oops\n');
    assert.equal(r.timedOut, false);
  });

  test('cwd and env options', async () => {
    const r = await sb.exec('echo "$PWD $FOO"', 10, { cwd: '/tmp', env: { FOO: 'bar baz' } });
    assert.equal(r.stdout, '/tmp bar baz\n');
  });

  test('no network: only lo, and connecting out fails', async () => {
    const ifs = await sb.exec('awk -F: \'NR>2 {gsub(/ /,"",$1); print $1}\' /proc/net/dev', 10);
    assert.deepEqual(ifs.stdout.trim().split('\n'), ['lo']);
    const r = await sb.exec(`python3 -c "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3); print('connected')"`, 20);
    assert.notEqual(r.exit, 0);
    assert.doesNotMatch(r.stdout, /connected/);
    assert.match(r.stderr, /unreachable|OSError|timed out/i);
  });

  test('no capabilities and no privilege escalation', async () => {
    const r = await sb.exec("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status", 10);
    assert.match(r.stdout, /CapEff:\s+0000000000000000/);
    assert.match(r.stdout, /NoNewPrivs:\s+1/);
  });

  test('sleep 1000 with a 2 s limit times out and the sandbox stays usable', async () => {
    const t0 = Date.now();
    const r = await sb.exec('sleep 1000 & sleep 1000; echo never', 2);
    assert.equal(r.timedOut, true);
    assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
    assert.doesNotMatch(r.stdout, /never/);
    const again = await sb.exec('echo alive; ls /proc | grep -c "^[0-9]"', 10);
    assert.equal(again.stdout.split('\n')[0], 'alive');
    // tini, sleep infinity, and this exec's timeout/bash/ls/grep: the background sleep is gone too
    assert.ok(Number(again.stdout.split('\n')[1]) <= 7, again.stdout);
  });

  test('fork bomb is held by the pids limit and cleaned up with its command', async () => {
    const r = await sb.exec('bomb() { bomb | bomb & }; bomb; sleep 3', 5);
    assert.equal(typeof r.exit, 'number');
    const a = await sb.exec('echo alive; ls /proc | grep -c "^[0-9]"', 10);
    assert.equal(a.stdout.split('\n')[0], 'alive');
    assert.ok(Number(a.stdout.split('\n')[1]) <= 8, `processes left: ${a.stdout}`);
  });

  test('memory hog is OOM-killed and reported', async () => {
    const r = await sb.exec(`python3 -c "b = bytearray(1024 * 1024 * 1024); print('allocated')"`, 60);
    assert.notEqual(r.exit, 0);
    assert.doesNotMatch(r.stdout, /allocated/);
    assert.ok(r.oomKilled === true || /MemoryError/.test(r.stderr), JSON.stringify(r));
    if (r.oomKilled) assert.match(r.stderr, /out of memory/);
    assert.equal((await sb.exec('echo alive', 10)).stdout, 'alive\n');
  });

  test('output is capped, keeping the head, and marked truncated', async () => {
    const r = await sb.exec("printf 'HEAD'; head -c 3000000 /dev/zero | tr '\\0' x", 30, { maxOutputBytes: 1000 });
    assert.equal(r.stdout.length, 1000);
    assert.ok(r.stdout.startsWith('HEADxxx'));
    assert.equal(r.truncated, true);
    assert.equal(r.exit, 0);
  });

  test('readFile/writeFile round trip with unicode, new directories created', async () => {
    const text = 'héllo wörld ✓ 日本語 🚀\nline 2\n';
    await sb.writeFile('new/dir/ünï.txt', text);
    assert.equal(await sb.readFile('/testbed/new/dir/ünï.txt'), text);
    assert.equal((await sb.exec('cat new/dir/ünï.txt', 10)).stdout, text);
    await assert.rejects(sb.readFile('/nope/missing.txt'), /no such file/);
  });

  test('paths escaping their directory are refused, not rewritten', async () => {
    await assert.rejects(sb.copyIn([{ path: '../evil.txt', content: 'x' }], '/testbed'), SandboxPathError);
    await assert.rejects(sb.copyIn([{ path: 'a/../../evil.txt', content: 'x' }], '/testbed'), SandboxPathError);
    await assert.rejects(sb.copyIn([{ path: '/etc/evil', content: 'x' }], '/testbed'), SandboxPathError);
    await assert.rejects(sb.writeFile('../etc/passwd', 'x'), SandboxPathError);
    await assert.rejects(sb.readFile('/testbed/../etc/passwd'), SandboxPathError);
    assert.equal((await sb.exec('test -e /evil.txt || test -e /testbed/../evil.txt; echo $?', 10)).stdout, '1\n');
  });

  test('copyIn writes several files with modes', async () => {
    await sb.copyIn(
      [
        { path: 'run.sh', content: '#!/bin/sh\necho ran\n', mode: 0o755 },
        { path: 'sub/data.bin', content: new Uint8Array([0, 1, 2, 255]) },
      ],
      '/tmp/in',
    );
    assert.equal((await sb.exec('/tmp/in/run.sh && od -An -tu1 /tmp/in/sub/data.bin', 10)).stdout.replace(/\s+/g, ' ').trim(), 'ran 0 1 2 255');
  });

  test('diff is git add -A && git diff --cached minus scratch globs', async () => {
    await sb.exec("sed -i '1s/^/# edited\\n/' README.md && echo 'print(1)' > reproduce_issue.py && mkdir -p scratch && echo x > scratch/notes.txt", 10);
    const d = await sb.diff(['reproduce_issue.py', 'scratch/**']);
    assert.match(d, /^diff --git a\/README.md b\/README.md/m);
    assert.match(d, /\+# edited/);
    assert.doesNotMatch(d, /reproduce_issue|scratch/);
    assert.match(await sb.diff(), /reproduce_issue\.py/);
  });

  test('a container that died gives SandboxDeadError', async () => {
    const other = await backend.start(image);
    await new Docker().getContainer(other.id).kill();
    await assert.rejects(other.exec('echo hi', 5), (e: unknown) => e instanceof SandboxDeadError && /dead/.test((e as Error).message));
    await other.stop();
    await assert.rejects(other.exec('echo hi', 5), SandboxDeadError);
  });

  test('a missing image is a clear error', async () => {
    await assert.rejects(backend.start('swerl-no-such-image:nope'), /image "swerl-no-such-image:nope" not found/);
  });
});

describe('patch filtering', () => {
  test('globs match basenames anywhere or whole paths', () => {
    assert.ok(pathMatchesAny('a/b/reproduce_issue.py', ['reproduce_issue.py']));
    assert.ok(pathMatchesAny('scratch/x/y.txt', ['scratch/**']));
    assert.ok(!pathMatchesAny('src/scratch.py', ['scratch/**']));
    assert.ok(pathMatchesAny('tmp_1.py', ['tmp_*.py']));
  });
  test('drops whole file sections', () => {
    const p = 'diff --git a/x.py b/x.py\n+1\ndiff --git a/reproduce_issue.py b/reproduce_issue.py\n+2\ndiff --git a/y.py b/y.py\n+3\n';
    assert.equal(filterPatch(p, ['reproduce_issue.py']), 'diff --git a/x.py b/x.py\n+1\ndiff --git a/y.py b/y.py\n+3\n');
  });
});
