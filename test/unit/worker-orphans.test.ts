// Which worker identities a restarted worker may treat as dead (workers/orphans.ts): only a swerl worker of
// this host and PID namespace whose process is gone or was replaced; never itself, a live process, another
// host or another PID namespace (a container sharing the hostname).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { identityOfDeadLocalWorker, workerIdentity } from '../../workers/orphans.ts';
import { pidNamespace, processStartTicks } from '../../lib/process-identity.ts';

test('a worker identity is dead only when its process on this host and PID namespace is gone', async () => {
  const ns = pidNamespace();
  assert.match(workerIdentity(), new RegExp(`^${process.pid}@${hostname()} swerl:\\d+:${ns}$`));
  assert.equal(identityOfDeadLocalWorker(workerIdentity()), false, 'itself');

  const child = spawn('sleep', ['30']);
  await new Promise((r) => child.once('spawn', r));
  const pid = child.pid!;
  const start = processStartTicks(pid);
  const live = `${pid}@${hostname()} swerl:${start}:${ns}`;
  assert.equal(identityOfDeadLocalWorker(live), false, 'a live process');
  assert.equal(identityOfDeadLocalWorker(`${pid}@${hostname()} swerl:${Number(start) + 1}:${ns}`), true, 'the pid reused by a later process');
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));
  assert.equal(identityOfDeadLocalWorker(live), true, 'the same process after it died');
  assert.equal(identityOfDeadLocalWorker(`${pid}@another-host swerl:${start}:${ns}`), false, 'another host');
  assert.equal(identityOfDeadLocalWorker(`${pid}@${hostname()} swerl:${start}:${Number(ns) + 1}`), false, 'another PID namespace');
  assert.equal(identityOfDeadLocalWorker(`${pid}@${hostname()}`), false, 'a worker that is not ours (the SDK default identity)');
});
