// What an agent does to its sandbox is a result, never an infrastructure failure: the disk
// watchdog stops a command that writes past limits.diskMiB and says so; a 100 MiB file is `patch_too_large`
// in one attempt; a removed .git is `diff_failed`; truncated output reports its true size; and sandboxes
// carry owner labels so a sweep removes those of dead owners and expired ones. Real Docker (the shared engine,
// whose overlay2 on ext4 has no quota: the watchdog path).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { sweepSandboxes, type DockerSandbox } from '../../activities/sandbox/docker.ts';
import { OWNER_LABELS } from '../../activities/sandbox/common.ts';
import { SweEnvironment } from '../../activities/swe-env.ts';
import { SweEnvConfigSchema } from '../../lib/swe/env-config.ts';
import { SweTools } from '../../lib/swe/tools.ts';
import { formatToolCall, type ToolCall } from '../../lib/toolcall.ts';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { sweTask, sweTasksFile, TASK } from '../helpers/swe-tasks.ts';
import Docker from 'dockerode';

const { backend, cleanup } = testBackend();
const docker = new Docker();
let image: string;
let sb: DockerSandbox;
let tools: SweTools;

before(async () => {
  await requireDocker();
  [image] = await imagesFor([await sweTask(TASK.srcLayout)]);
  sb = await backend.start(image!, { diskMiB: 64 });
  tools = new SweTools(sb);
});
after(async () => {
  await sb?.stop();
  await cleanup();
});

test('a command writing past diskMiB is stopped and the agent told; the sandbox goes on', async () => {
  assert.equal(sb.diskWatchdog, true, 'the shared engine (overlay2 on ext4) has no quota: the watchdog holds the limit');
  // 4 GiB attempted: the soft watchdog lets through up to about a second of page-cache writes (docs/limits.md)
  const r = await tools.executeBash('dd if=/dev/zero of=/testbed/big bs=1M count=4096 status=none; echo wrote');
  assert.match(r.observation, /^ERROR: The sandbox reached its disk limit/);
  assert.match(r.observation, /past its disk limit of 64 MiB/);
  assert.doesNotMatch(r.observation, /\nwrote/);
  assert.equal(r.end, undefined);
  const size = Number((await sb.exec('stat -c %s /testbed/big', 10)).stdout);
  assert.ok(size < 2048 * 2 ** 20, `stopped well before 4 GiB, at ${size} bytes`);
  // over its limit, the sandbox still runs commands that do not write (reading, removing)
  assert.equal((await tools.executeBash('sleep 1.2; ls -s /testbed/big | wc -l')).observation, '[STDOUT]\n1\n[STDERR]\n');
  assert.equal((await tools.executeBash('rm /testbed/big && echo freed')).observation, '[STDOUT]\nfreed\n[STDERR]\n');
  assert.equal((await tools.executeBash('head -c 1000000 /dev/zero > /testbed/small && echo ok')).observation, '[STDOUT]\nok\n[STDERR]\n');
});

test('a writer that left its command (setsid, a daemon) does not outlive it, so it cannot fill the disk between commands', async () => {
  const r = await tools.executeBash(
    "setsid sh -c 'sleep 3; for i in $(seq 60); do head -c 10000000 /dev/zero >> /testbed/detached; sleep 0.1; done' >/dev/null 2>&1 </dev/null & sleep 0.5; echo started",
  );
  assert.equal(r.observation, '[STDOUT]\nstarted\n[STDERR]\n');
  // the policy thinking: nothing is watched now. The writer starts 2.5 s after its command ended (room for the
  // kill on a loaded host) and, alive, would have written 10 MB every 0.1 s for 2 s by the check
  await new Promise((res) => setTimeout(res, 5000));
  const left = await sb.exec(`ls -l /testbed/detached 2>&1; for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $c; echo; done | grep -c '[s]eq 60'`, 10);
  assert.match(left.stdout, /No such file or directory\n0\n$/, `no file, no writer: ${left.stdout}`);
  assert.equal((await sb.exec('echo alive', 10)).stdout, 'alive\n', 'the sandbox itself goes on');
});

test('execute_bash reports the true size of output it did not show', async () => {
  const r = await tools.executeBash('yes | head -n 5000000');
  const m = /<\.\.\. (\d+) lines \((\d+) characters\) omitted \.\.\.>/.exec(r.observation);
  assert.ok(m, r.observation.slice(0, 400));
  assert.equal(Number(m[1]), 5_000_000 - 80);
  assert.ok(Math.abs(Number(m[2]) - (10_000_000 - 160)) <= 2, m[2]);
  assert.match(r.observation, /^\[STDOUT\]\n(y\n){40}<\.\.\./);
  assert.match(r.observation, /\.\.\.>\n(y\n){39}y\n\[STDERR\]\n$/);
  const wide = await tools.executeBash(`head -c 3000000 /dev/zero | tr '\\0' 'z'`);
  assert.match(wide.observation, /<response clipped: (\d+) more characters not shown>/);
  assert.ok(Number(/not shown>/.test(wide.observation) && /clipped: (\d+)/.exec(wide.observation)![1]) > 2_990_000, 'counts what the capture left out too');
});

test('file_editor refuses a file too large for it with an observation', async () => {
  await sb.exec('head -c 9000000 /dev/zero | tr "\\0" "a" > /testbed/huge.txt', 30);
  const obs = await tools.fileEditor({ command: 'view', path: '/testbed/huge.txt' });
  assert.match(obs, /holds 9000000 bytes; file_editor works on files up to/);
  await sb.exec('rm -f /testbed/huge.txt /testbed/small', 10);
});

const call = (c: ToolCall) => `Calling.\n${formatToolCall(c)}`;

async function episode(steps: string[]): Promise<{ reward: number; info: Record<string, unknown> }> {
  const task = await sweTask(TASK.srcLayout);
  const env = new SweEnvironment(task, SweEnvConfigSchema.parse({ tasksFile: await sweTasksFile() }), { backend, image });
  await env.reset();
  try {
    for (const s of steps) {
      const r = await env.step(s);
      assert.doesNotMatch(r.observation, /^ERROR/, r.observation);
    }
    const r = await env.reward('submitted');
    return { reward: r.reward, info: r.info ?? {} };
  } finally {
    await env.close();
  }
}

test('a 100 MiB file is patch_too_large and a removed .git diff_failed: results, in one attempt', async () => {
  const big = await episode([call({ name: 'execute_bash', args: { cmd: 'head -c 104857600 /dev/urandom > /testbed/data.bin' } })]);
  assert.equal(big.reward, 0);
  assert.equal(big.info.reason, 'patch_too_large');
  assert.match(String(big.info.error), /new file\(s\) in \/testbed hold 104857600 bytes/);
  const noGit = await episode([call({ name: 'execute_bash', args: { cmd: 'rm -rf /testbed/.git' } })]);
  assert.equal(noGit.reward, 0);
  assert.equal(noGit.info.reason, 'diff_failed');
  assert.match(String(noGit.info.error), /not a git repository/);
});

test('owner labels: a sweep removes the sandboxes of a dead owner on this host and expired ones, not live ones', async () => {
  // a child process starts a sandbox and is SIGKILLed: its container is left running `sleep infinity`
  const script = `
    import { DockerBackend } from ${JSON.stringify(fileURLToPath(new URL('../../activities/sandbox/docker.ts', import.meta.url)))};
    const sb = await new DockerBackend({ labels: { 'swerl.test': '${process.pid}' } }).start(${JSON.stringify(image)}, {}, { 'swerl.run': 'r1', 'swerl.iteration': '3' });
    console.log(sb.id);
    setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const name = await new Promise<string>((resolve, reject) => {
    child.stdout!.once('data', (d: Buffer) => resolve(d.toString().trim()));
    child.once('exit', (c) => reject(new Error(`child exited ${c}`)));
  });
  const labels = (await docker.getContainer(name).inspect()).Config.Labels;
  assert.equal(labels[OWNER_LABELS.pid], String(child.pid));
  assert.match(labels[OWNER_LABELS.pidStart]!, /^\d+$/);
  assert.equal(labels[OWNER_LABELS.run], 'r1');
  assert.equal(labels[OWNER_LABELS.iteration], '3');
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));

  const expired = await backend.start(image, {}, { [OWNER_LABELS.expires]: String(Math.floor(Date.now() / 1000) - 1) });
  const r = await sweepSandboxes();
  assert.ok(
    r.deadOwner.some((id) => id.length > 0),
    'the dead owner’s sandbox',
  );
  assert.equal((await docker.listContainers({ all: true, filters: { name: [name] } })).length, 0, 'dead owner: removed');
  assert.equal(await expired.isRunning(), false, 'expired: removed');
  assert.equal(await sb.isRunning(), true, 'ours: alive');
});
