// Infrastructure faults during SWE rollouts, on a Docker engine of this test's own
// (test/helpers/private-dockerd.ts: btrfs data root in a preallocated loop file, so quotas are real and the
// engine may be restarted): a sandbox container killed during a tool command, the worker SIGKILLed, the
// engine restarted. Rollouts are retried, every trajectory is accounted for and says what happened, and no
// sandbox is left. The agent is a scripted policy behind our own policy server: `sleep 6` then `finish`.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { statfsSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { DockerBackend, sweepSandboxes } from '../../activities/sandbox/docker.ts';
import { OWNER_LABELS, SANDBOX_LABEL } from '../../activities/sandbox/common.ts';
import { startPolicyServer, type PolicyServer, type ServableModel } from '../../policy-server/index.ts';
import { defaultLoadModel } from '../../policy-server/models.ts';
import { FINISH, scriptedServable } from '../helpers/scripted-agent.ts';
import type { ToolCall } from '../../lib/toolcall.ts';
import { writeModel } from '../../lib/model-init.ts';
import { loadTokenizer } from '../../lib/tokenizer.ts';
import { keys, openStore } from '../../lib/store.ts';
import { SweTools } from '../../lib/swe/tools.ts';
import type { Trajectory } from '../../lib/types.ts';
import { statusQuery } from '../../workflows/signals.ts';
import type { IterationMetrics, TrainingRunResult } from '../../lib/training/shapes.ts';
import { imagesFor, requireDocker } from '../helpers/docker.ts';
import { singleTaskFile, sweTask, TASK } from '../helpers/swe-tasks.ts';
import { startPrivateDockerd, type PrivateDockerd } from '../helpers/private-dockerd.ts';
import { spawnWorker, startTestTemporal, tinySweConfig, waitFor, type TestTemporal } from '../helpers/temporal.ts';

const TASK_ID: string = TASK.srcLayout;
let d: PrivateDockerd;
let image: string;
let t: TestTemporal;
let policy: PolicyServer;
let tasksFile: string;

const SLEEP: ToolCall = { name: 'execute_bash', args: { cmd: 'sleep 6; echo slept' } };

/** A scripted agent: turn 1 runs `sleep 6` (long enough to break things under it), turn 2 submits; anything else
 * (the probe that verifies every weight sync) the tiny checkpoint answers. */
async function scriptedPolicy(dir: string): Promise<PolicyServer> {
  await writeModel(dir, 'tiny', 1);
  const tok = await loadTokenizer(dir);
  const model = (real: ServableModel) =>
    scriptedServable(real, tok, (prompt) => {
      if (!prompt.includes('<function=')) return null; // not an SWE episode's prompt
      const turns = prompt.split('<|im_start|>assistant').length - 1;
      return turns <= 1 ? SLEEP : FINISH;
    });
  return startPolicyServer({ learner: model(await defaultLoadModel(dir)), loadModel: async (d) => model(await defaultLoadModel(d)), checkpoint: null });
}

before(async () => {
  await requireDocker();
  [image] = await imagesFor([await sweTask(TASK_ID)]);
  d = await startPrivateDockerd();
  await d.loadImages([image!]);
  t = await startTestTemporal('swerl-faults-');
  policy = await scriptedPolicy(join(t.dir, 'policy-model'));
  // one task, its image named directly (so the worker never builds it on the private engine)
  tasksFile = await singleTaskFile(t.dir, TASK_ID, image);
});
after(async () => {
  await policy?.close();
  await t?.close();
  await d?.stop();
});

async function sandboxes(filters: string[] = []): Promise<{ Id: string; State: string; Created: number; Labels: Record<string, string> }[]> {
  return d.docker.listContainers({ all: true, filters: { label: [`${SANDBOX_LABEL}=1`, ...filters] } });
}

test('a real disk quota: an agent writing past diskMiB is told, and the host’s free space does not move', async () => {
  const backend = new DockerBackend({ docker: d.docker });
  const sb = await backend.start(image, { diskMiB: 64 });
  try {
    assert.equal(sb.diskWatchdog, false, 'btrfs: --storage-opt size');
    const free = () => {
      const s = statfsSync('/');
      return s.bavail * s.bsize;
    };
    const before = free();
    const r = await new SweTools(sb).executeBash('dd if=/dev/zero of=/testbed/big bs=1M count=1024 status=none; echo rc=$?');
    const after = free();
    assert.match(r.observation, /^ERROR: The sandbox reached its disk limit/);
    assert.match(r.observation, /Disk quota exceeded|No space left on device/);
    assert.match(r.observation, /the sandbox's disk limit of 64 MiB is reached/);
    const size = Number((await sb.exec('stat -c %s /testbed/big', 10)).stdout);
    assert.ok(size <= 64 * 2 ** 20, `held at the quota: ${size} bytes`);
    // what the sandbox wrote went into the engine's preallocated file system (other engineers' noise aside)
    assert.ok(before - after < 48 * 2 ** 20, `host free space fell by ${((before - after) / 2 ** 20).toFixed(1)} MiB`);
    console.log(`# quota: wrote ${(size / 2 ** 20).toFixed(1)} MiB of 1024 attempted; host free space change ${((before - after) / 2 ** 20).toFixed(1)} MiB`);
  } finally {
    await sb.stop();
  }
});

test('a removal that fails while the engine is down is done by the next sweep', async () => {
  const backend = new DockerBackend({ docker: d.docker });
  const sb = await backend.start(image, {});
  await d.down();
  await sb.stop(); // retries, then leaves it to the sweep
  await d.up();
  assert.equal((await sandboxes()).length, 1, 'still there after the engine came back');
  const r = await sweepSandboxes({ docker: d.docker });
  assert.equal(r.retried.length, 1);
  assert.equal((await sandboxes()).length, 0);
});

test('container killed, worker SIGKILLed, engine restarted during SWE rollouts: retried, accounted for, nothing left', async () => {
  const runId = 'swe-faults';
  const base = tinySweConfig(t.dir, tasksFile);
  const config = tinySweConfig(t.dir, tasksFile, {
    runId,
    iterations: 2,
    batch: { tasks: 1, samples: 4 },
    maxInflightRollouts: 4,
    rollout: { startToCloseMinutes: 5, heartbeatSeconds: 1, heartbeatTimeoutSeconds: 4, maxAttempts: 8 },
    episode: { ...base.episode, timeoutMinutes: 5 },
    policy: { baseUrl: policy.url, model: 'policy' },
    env: { kind: 'swe', tasksFile, maxSteps: 3, limits: { cpus: 0.5, memoryBytes: 256 << 20, pids: 256, diskMiB: 512 } },
    learner: { ...base.learner, heartbeatTimeoutSeconds: 10 },
  });
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--threads', '1', '--sandbox-sweep-seconds', '2', '--max-rollouts', '8'];
  const env = { ...process.env, DOCKER_HOST: d.host };
  const logFile = join(t.dir, 'worker.log');
  let worker: ChildProcess = spawnWorker(args, logFile, env);
  const running = (iteration: number) => sandboxes([`${OWNER_LABELS.run}=${runId}`, `${OWNER_LABELS.iteration}=${iteration}`]).then((l) => l.filter((c) => c.State === 'running'));
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });

    // iteration 0: all four agents inside `sleep 6`; kill one sandbox, then the worker
    await waitFor('four sandboxes of iteration 0', async () => (await running(0)).length === 4, 120_000);
    // the victim: the newest running sandbox of iteration 0 (on a loaded machine the first agents may already
    // be past their `sleep 6`, and a container may stop between the listing and the kill: then the next one)
    await new Promise((r) => setTimeout(r, 1500));
    let victim: Awaited<ReturnType<typeof running>>[number] | undefined;
    await waitFor(
      'a sandbox of iteration 0 killed',
      async () => {
        for (const c of (await running(0)).sort((a, b) => b.Created - a.Created)) {
          try {
            await d.docker.getContainer(c.Id).kill();
          } catch (e) {
            if ((e as { statusCode?: number }).statusCode === 409) continue; // stopped in between
            throw e;
          }
          victim = c;
          return true;
        }
        return false;
      },
      30_000,
    );
    const victimSample = victim!.Labels['swerl.sample'];
    await new Promise((r) => setTimeout(r, 1000));
    const deadPid = String(worker.pid);
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    assert.ok((await sandboxes([`${OWNER_LABELS.pid}=${deadPid}`])).length > 0, 'the dead worker left sandboxes behind');
    // the restarted worker sweeps every 40 s: what goes sooner went in its sweep at start
    const periodS = 40;
    worker = spawnWorker(
      args.map((a, i) => (args[i - 1] === '--sandbox-sweep-seconds' ? String(periodS) : a)),
      logFile,
      env,
    );
    const tSweep = Date.now();
    await waitFor('the restarted worker sweeps the dead one’s sandboxes at its start', async () => (await sandboxes([`${OWNER_LABELS.pid}=${deadPid}`])).length === 0, 60_000);
    const sweptS = (Date.now() - tSweep) / 1000;
    console.log(`# the dead worker's sandboxes were gone ${sweptS.toFixed(1)} s after its restart`);
    assert.ok(sweptS < periodS, `gone after ${sweptS.toFixed(1)} s: by the sweep at start, not a periodic one`);

    // iteration 1: restart the engine under four running agents
    await waitFor('four sandboxes of iteration 1', async () => (await running(1)).length === 4, 180_000);
    await new Promise((r) => setTimeout(r, 1500));
    const tRestart = Date.now();
    await d.restart();
    console.log(`# engine restarted in ${((Date.now() - tRestart) / 1000).toFixed(1)} s`);

    const result: TrainingRunResult = await h.result();
    assert.equal(result.iterations, 2);
    const store = openStore(config.store.url);
    const metrics = (await store.get(keys.metrics(runId)))!
      .toString('utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as IterationMetrics);
    for (const n of [0, 1]) {
      const m = metrics[n]!;
      assert.equal(m.rolloutErrors, 0, `iteration ${n}: no rollout lost`);
      assert.equal(m.episodes, 4);
      assert.equal(m.learnerTrajectories, 4);
      const trajs = await Promise.all((await store.list(keys.trajectories(runId, n))).map((k) => store.getJson<Trajectory>(k)));
      assert.equal(trajs.length, 4, `iteration ${n}: every trajectory accounted for`);
      for (const tr of trajs) {
        const why = `iteration ${n} sample ${tr!.sample}: ${JSON.stringify(tr!.info)}`;
        assert.equal(tr!.end, 'submitted', why);
        assert.equal((tr!.info as { reason?: string }).reason, 'empty_patch', why);
      }
      const retried = trajs.filter((tr) => ((tr!.info as { failedAttempts?: unknown[] }).failedAttempts ?? []).length > 0);
      if (n === 0) {
        const killed = trajs.find((tr) => String(tr!.sample) === victimSample)!;
        const failed = (killed.info as { failedAttempts: { attempt: number; error: string }[] }).failedAttempts;
        assert.match(failed[0]!.error, /SandboxDeadError: sandbox \S+ is dead/, 'the killed container: infrastructure, retried');
        assert.ok((killed.info as { attempt: number }).attempt >= 2);
      } else {
        assert.equal(retried.length, 4, 'every agent under the engine restart was retried');
        for (const tr of retried) assert.match((tr!.info as { failedAttempts: { error: string }[] }).failedAttempts[0]!.error, /Sandbox(Dead|Unavailable)Error/);
      }
    }
    await waitFor('no sandbox left on the engine', async () => (await sandboxes()).length === 0, 60_000);
    const status = await t.client.workflow.getHandle(runId).query(statusQuery);
    assert.equal(status.iteration, 2);
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
  }
});
