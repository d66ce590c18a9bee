// `swerl server`: SIGKILLed, it leaves no Temporal process behind; started over a port or a
// database another server holds, it refuses and names the pid instead of claiming a server it did not start.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, listenerPid, startDevServer } from '../../services/temporal-server.ts';
import { ROOT, spawnWorker, waitFor } from '../helpers/temporal.ts';

function swerlServer(args: string[]): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts', 'cli.ts'), 'server', '--headless', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, output: () => out, exited };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('a SIGKILLed swerl server takes its Temporal process with it; a second one on a held port or database refuses with the pid', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-server-'));
  try {
    const port = await freePort();
    const a = swerlServer(['--dir', join(dir, 'a'), '--port', String(port)]);
    await waitFor('swerl server ready', async () => /dev server at/.test(a.output()), 60_000, 100);
    const temporalPid = listenerPid(port);
    assert.ok(temporalPid && temporalPid !== a.child.pid, `the Temporal process listens on ${port}`);

    // the port is taken: refused, naming the holder, not a false "dev server at"
    const samePort = swerlServer(['--dir', join(dir, 'b'), '--port', String(port)]);
    assert.equal(await samePort.exited, 1);
    assert.match(samePort.output(), new RegExp(`frontend port ${port} is in use by pid ${temporalPid} \\(.*temporal.*\\); stop it with \`kill ${temporalPid}\``));
    assert.doesNotMatch(samePort.output(), /dev server at/);
    // the database is held: refused too
    await assert.rejects(
      startDevServer({ dir: join(dir, 'a'), port: await freePort(), uiPort: null }),
      new RegExp(`temporal\\.sqlite is in use by pid ${temporalPid} .*kill ${temporalPid}`),
    );

    a.child.kill('SIGKILL');
    await a.exited;
    await waitFor('the Temporal process gone with its parent', async () => !alive(temporalPid), 15_000, 100);

    // and the port is usable again at once
    const again = await startDevServer({ dir: join(dir, 'a'), port, uiPort: null });
    await again.stop();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a worker started before its Temporal server waits for it (--connect-wait-seconds) and then serves; with 0 it fails at once naming the address', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-worker-wait-'));
  try {
    const port = await freePort();
    const address = `127.0.0.1:${port}`;
    const impatient = spawn(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'scripts', 'cli.ts'), 'worker', '--queues', 'learner', '--address', address, '--connect-wait-seconds', '0'],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let err = '';
    impatient.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((r) => impatient.once('exit', (c) => r(c)));
    assert.notEqual(code, 0);
    assert.match(err, new RegExp(`Temporal frontend ${address} unreachable`));

    const logFile = join(dir, 'worker.log');
    const worker = spawnWorker(['--queues', 'learner', '--address', address, '--connect-wait-seconds', '120'], logFile);
    try {
      await waitFor('the worker says it waits', async () => /waiting for the Temporal frontend/.test(readFileSync(logFile, 'utf8')), 60_000, 200);
      const server = await startDevServer({ dir: join(dir, 'server'), port, uiPort: null });
      try {
        await waitFor('the worker serves', async () => new RegExp(`worker on ${address} serving learner`).test(readFileSync(logFile, 'utf8')), 90_000, 200);
        assert.equal(worker.exitCode, null);
      } finally {
        worker.kill('SIGTERM');
        await new Promise((r) => worker.once('exit', r));
        await server.stop();
      }
    } finally {
      if (worker.exitCode === null) worker.kill('SIGKILL');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
