// Training and evaluation with `env.backend: "kubernetes"` against swerl's local cluster (started like
// `swerl cluster up`), a real dev server and real workers: an SWE iteration whose episodes and gradings run in
// pods; an evaluation whose gold patches are graded in pods, with a task whose image is missing (an
// infrastructure error naming it, retried, never scored); `swerl grade` and `validate-tasks` with --backend
// kubernetes; a worker SIGKILLed mid-rollout (its pods swept at the restart, nothing lost, nothing run twice);
// the API server restarted mid-iteration (the run completes). The training runs' agent is scripted behind our
// own policy server: one command that sleeps and makes the task's gold edits, so every episode is graded
// (reward 1).
import { before, after, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFile, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import type * as k8s from '@kubernetes/client-node';
import { train } from '../../scripts/commands/train.ts';
import { evaluate } from '../../scripts/commands/eval.ts';
import { startWorkers, type RunningWorkers } from '../../workers/index.ts';
import { keys, listCheckpoints, openStore, fileStoreUrl } from '../../lib/store.ts';
import type { Trajectory } from '../../lib/types.ts';
import type { TrainingConfigInput } from '../../lib/config.ts';
import type { EvalConfigInput } from '../../lib/eval/config.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { statusQuery } from '../../workflows/signals.ts';
import type { IterationMetrics, TrainingRunResult } from '../../lib/training/shapes.ts';
import { kubeConfigOf, startComponent, stopComponent } from '../../services/k8s-cluster.ts';
import { imagesFor, requireDocker } from '../helpers/docker.ts';
import { sweTasks, sweTasksFile } from '../helpers/swe-tasks.ts';
import { useK8sCluster, type TestCluster } from '../helpers/k8s.ts';
import { metricValue } from '../helpers/metrics.ts';
import { editCallsFromPatch, FINISH, scriptedServable, startScriptedModel, type ScriptTurn } from '../helpers/scripted-agent.ts';
import { startPolicyServer, type PolicyServer, type ServableModel } from '../../policy-server/index.ts';
import { defaultLoadModel } from '../../policy-server/models.ts';
import { writeModel } from '../../lib/model-init.ts';
import { loadTokenizer } from '../../lib/tokenizer.ts';
import { seedTable } from '../helpers/eval.ts';
import { ROOT, spawnWorker, startTestTemporal, waitFor, type TestTemporal } from '../helpers/temporal.ts';

const TASKS_FILE = await sweTasksFile();

const exec = promisify(execFile);
/** The swerl CLI as a child process. */
const swerl = (...args: string[]) =>
  exec(process.execPath, [join(ROOT, 'scripts/swerl.mjs'), ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 16 << 20,
    // what the options say, not this process's environment
    env: { ...process.env, KUBECONFIG: '/nonexistent', SWERL_K8S_NAMESPACE: 'nowhere' },
  });

let cluster: TestCluster;
let tasks: SweTask[];
let t: TestTemporal;
let core: k8s.CoreV1Api;

// 1 CPU per pod would fit two on this node's 2 CPUs; an episode holds its pod while its patch is graded in another
process.env.SWERL_K8S_CPU_REQUEST = '100m';
process.env.SWERL_K8S_MEMORY_REQUEST = '128Mi';

useK8sCluster((c) => (cluster = c), {
  images: async () => {
    await requireDocker();
    tasks = await sweTasks();
    return imagesFor(tasks);
  },
});
before(async () => {
  t = await startTestTemporal('swerl-k8s-');
  const lib = await import('@kubernetes/client-node');
  core = (await kubeConfigOf()).makeApiClient(lib.CoreV1Api);
});
after(async () => {
  await t?.close();
});

/**
 * One shell command that makes the gold patch's file_editor edits (test/helpers/scripted-agent.ts) with
 * file_editor's rules (create adds the final newline, str_replace needs one occurrence, insert goes after a line):
 * the tiny policy's 4,096 positions hold the SWE prompt and one such turn, not an observation per edit.
 */
function applyEditsCommand(patch: string): string {
  const edits = JSON.stringify(editCallsFromPatch(patch).map((c) => c.args));
  const py = [
    'import json, os',
    "for a in json.load(open('/tmp/edits.json')):",
    "    p, c = a['path'], a['command']",
    "    if c == 'create':",
    "        os.makedirs(os.path.dirname(p), exist_ok=True); t = a['file_text']",
    "        open(p, 'w').write(t if t == '' or t.endswith('\\n') else t + '\\n'); continue",
    '    s = open(p).read()',
    "    if c == 'str_replace':",
    "        assert s.count(a['old_str']) == 1, p; s = s.replace(a['old_str'], a.get('new_str', ''), 1)",
    '    else:',
    "        nl = s.endswith('\\n'); ls = s.split('\\n')[:-1] if nl else s.split('\\n'); n = a['new_str']",
    "        ls[a['insert_line']:a['insert_line']] = (n[:-1] if n.endswith('\\n') else n).split('\\n'); s = '\\n'.join(ls) + ('\\n' if nl or not ls else '')",
    "    open(p, 'w').write(s)",
    "print('applied')",
  ].join('\n');
  return `cat > /tmp/edits.json <<'SWERL_EDITS'\n${edits}\nSWERL_EDITS\npython3 - <<'SWERL_PY'\n${py}\nSWERL_PY`;
}

/**
 * A scripted agent behind our policy server: in each episode (its task found in the prompt) one command, `sleep S`
 * and the gold patch's edits. `sleep` keeps the rollouts in their pods long enough to break things. Anything else
 * it is asked (the probe that verifies every weight sync) the checkpoint it loaded answers.
 */
async function scriptedPolicy(dir: string, sleepS: number): Promise<PolicyServer> {
  await writeModel(dir, 'tiny', 1);
  const tok = await loadTokenizer(dir);
  const scripts = new Map(tasks.map((x) => [x.problem_statement.slice(0, 200), [{ name: 'execute_bash', args: { cmd: `sleep ${sleepS}\n${applyEditsCommand(x.patch)}` } }]]));
  const scripted = (real: ServableModel): ServableModel =>
    scriptedServable(real, tok, (prompt) => {
      const calls = [...scripts].find(([statement]) => prompt.includes(statement))?.[1];
      if (!calls) return null;
      const turn = prompt.split('<|im_start|>assistant').length - 2;
      return calls[Math.min(Math.max(turn, 0), calls.length - 1)]!;
    });
  return startPolicyServer({ learner: scripted(await defaultLoadModel(dir)), loadModel: async (d) => scripted(await defaultLoadModel(d)), checkpoint: null });
}

/** configs/swe.json on the cluster with the scripted agent: one iteration, 2 tasks × 2 samples, one step. */
function sweConfig(runId: string, policy: PolicyServer): TrainingConfigInput & { store: { url: string } } {
  const config = JSON.parse(readFileSync(join(ROOT, 'configs/swe.json'), 'utf8')) as TrainingConfigInput & {
    env: Record<string, unknown>;
    episode: Record<string, unknown>;
    algorithm: Record<string, unknown>;
  };
  config.env = { ...config.env, tasksFile: TASKS_FILE, backend: 'kubernetes', maxSteps: 1 };
  // the prompt (about 2,900 tokens) and the one turn fill the tiny policy's 4,096 positions: the episode ends at
  // max_steps after it and is graded all the same (gradeUnsubmitted)
  config.episode = { ...config.episode, maxSteps: 1, responseBudget: 1024, maxTokensPerTurn: 1024 };
  config.algorithm = { ...config.algorithm, lMax: 1024 };
  return { ...config, runId, policy: { baseUrl: policy.url, model: 'policy' }, store: { url: fileStoreUrl(join(t.dir, `store-${runId}`)) } };
}

/** Sandbox pods of a run (label swerl.run), with their owner pid. */
async function podsOf(runId: string): Promise<{ name: string; pid: string; phase: string }[]> {
  const r = await core.listNamespacedPod({ namespace: cluster.testNamespace, labelSelector: `swerl.run=${runId}` });
  return r.items.filter((p) => !p.metadata?.deletionTimestamp).map((p) => ({ name: p.metadata!.name!, pid: p.metadata!.labels!['swerl.pid']!, phase: p.status?.phase ?? '' }));
}

/** One trajectory per (task, sample), each from checkpoint 0; one metrics line; the learner took every trajectory once; no rollout error. */
async function checkSweRun(runId: string, storeUrl: string): Promise<{ trajectories: Trajectory[]; metrics: IterationMetrics }> {
  const store = openStore(storeUrl);
  assert.deepEqual(await listCheckpoints(store, runId), [0, 1]);
  const trajKeys = await store.list(keys.trajectories(runId, 0));
  assert.equal(trajKeys.length, 4, 'one trajectory per (task, sample)');
  const trajectories = await Promise.all(trajKeys.map(async (k) => (await store.getJson<Trajectory>(k))!));
  assert.equal(new Set(trajectories.map((x) => `${x.taskId}#${x.sample}`)).size, 4);
  const known = new Set(tasks.map((x) => x.instance_id));
  for (const tr of trajectories) {
    assert.ok(known.has(tr.taskId));
    assert.equal(tr.checkpoint, 0);
    // the gold patch, graded in a pod
    assert.equal(tr.end, 'max_steps', `${tr.taskId}#${tr.sample}`);
    assert.equal((tr.info as { reason?: string }).reason, 'passed', `${tr.taskId}#${tr.sample}: ${JSON.stringify(tr.info).slice(0, 300)}`);
    assert.equal(tr.reward, 1);
  }
  const lines = ((await store.get(keys.metrics(runId)))?.toString('utf8') ?? '')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as IterationMetrics);
  assert.equal(lines.length, 1);
  const m = lines[0]!;
  assert.equal(m.episodes, 4);
  assert.equal(m.learnerTrajectories, 4, 'the learner consumed every trajectory once');
  assert.equal(m.rolloutErrors, 0);
  return { trajectories, metrics: m };
}

test('an SWE training iteration with env.backend "kubernetes": episodes and gradings in pods, none left behind', async () => {
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  const policy = await scriptedPolicy(join(t.dir, 'policy-swe'), 0);
  try {
    const config = sweConfig('k8s-swe', policy);
    const configPath = join(t.dir, 'k8s-swe.json');
    writeFileSync(configPath, JSON.stringify(config));
    const before = { starts: await metricValue('swerl_sandbox_starts_total', { backend: 'kubernetes' }), graded: await metricValue('swerl_grading_seconds_count') };
    const t0 = Date.now();
    const o = await train({ config: configPath, out: join(t.dir, 'out-k8s-swe'), address: t.server.address, runId: 'k8s-swe', quiet: true });
    assert.equal(o.result.iterations, 1);
    await checkSweRun('k8s-swe', config.store.url);
    const starts = (await metricValue('swerl_sandbox_starts_total', { backend: 'kubernetes' })) - before.starts;
    assert.equal(starts, 4 + 4, `${starts} pod starts: one per episode and one per grading`);
    assert.equal((await metricValue('swerl_grading_seconds_count')) - before.graded, 4);
    assert.equal(await metricValue('swerl_sandbox_start_failures_total', { backend: 'kubernetes' }), 0);
    assert.equal(await metricValue('swerl_sandbox_starts_total', { backend: 'docker' }), 0, 'no Docker sandbox');
    assert.deepEqual(await podsOf('k8s-swe'), [], 'every pod deleted');
    console.log(`# SWE iteration on Kubernetes: ${((Date.now() - t0) / 1000).toFixed(1)} s, ${starts} pods (4 episodes, 4 gradings)`);
  } finally {
    await policy.close();
    await workers.shutdown();
  }
});

test('an evaluation through swerl eval --backend kubernetes: gold patches graded in pods resolve; a missing image is an infrastructure error naming it, retried, never scored', async () => {
  const workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1 } });
  const [a, b] = [tasks[0]!, tasks[1]!];
  const ghost: SweTask = { ...a, instance_id: 'ghost__image-1', image: 'swerl-ghost-image:none' };
  const tasksFile = join(t.dir, 'tasks-k8s-eval.jsonl');
  writeFileSync(tasksFile, [a, b, ghost].map((x) => JSON.stringify(x)).join('\n') + '\n');
  const ids = [a.instance_id, b.instance_id, ghost.instance_id];
  const byId = new Map([a, b, ghost].map((x) => [x.instance_id, x]));
  const model = await startScriptedModel({ identify: seedTable(1, ids, 1), script: ({ taskId }): ScriptTurn[] => [...editCallsFromPatch(byId.get(taskId)!.patch), FINISH] });
  try {
    // no env.backend in the file: `swerl eval --backend kubernetes` sets it (the CLI's path, on this test's server)
    const config: EvalConfigInput = {
      tasksFile,
      tasks: ids,
      seed: 1,
      model: { baseUrl: model.url, model: 'scripted', api: 'chat', toolFormat: 'text' },
      maxSteps: 20,
      concurrency: 3,
      maxAttempts: 2,
      heartbeatTimeoutSeconds: 60,
      store: { url: fileStoreUrl(join(t.dir, 'store-k8s-eval')) },
    };
    const configPath = join(t.dir, 'k8s-eval.json');
    writeFileSync(configPath, JSON.stringify(config));
    const before = await metricValue('swerl_grading_seconds_count');
    const dockerStarts = await metricValue('swerl_sandbox_starts_total', { backend: 'docker' });
    const { result: r } = await evaluate({
      config: configPath,
      out: join(t.dir, 'out-k8s-eval'),
      address: t.server.address,
      evalId: 'k8s-eval',
      quiet: true,
      sandboxes: { backend: 'kubernetes' },
    });
    assert.equal(await metricValue('swerl_sandbox_starts_total', { backend: 'docker' }), dockerStarts, 'no Docker sandbox');
    assert.deepEqual(r.summary.episodes, { planned: 3, completed: 2, resolved: 2, errors: 1 });
    assert.equal(r.summary.pass1Completed, 1, 'the missing image is not scored: both completed episodes resolved');
    assert.equal(r.summary.errors.length, 1);
    assert.equal(r.summary.errors[0]!.taskId, 'ghost__image-1');
    assert.match(r.summary.errors[0]!.reason, /image "swerl-ghost-image:none" is not on the node and could not be pulled/);
    assert.ok((await metricValue('swerl_grading_seconds_count')) - before >= 2, 'both gold patches graded');
    // the ghost's episode never reached the model: its sandbox never started, in every attempt (a pod each)
    assert.equal(model.requests.get('ghost__image-1#0#0'), undefined);
    const events = await core.listNamespacedEvent({ namespace: cluster.testNamespace });
    const ghostPods = new Set(events.items.filter((e) => e.reason === 'Failed' && /swerl-ghost-image:none/.test(e.message ?? '')).map((e) => e.involvedObject.name));
    assert.equal(ghostPods.size, 2, 'tried once per attempt (maxAttempts 2)');
    for (const id of [a.instance_id, b.instance_id]) assert.equal(model.requests.get(`${id}#0#0`), 1, `${id}: one episode`);
  } finally {
    await model.close();
    await workers.shutdown();
  }
});

test('swerl grade and swerl validate-tasks take --backend kubernetes --kubeconfig --namespace: predictions graded and tasks validated in pods', async () => {
  const [a, b] = [tasks[2]!, tasks[3]!];
  const tasksFile = join(t.dir, 'tasks-k8s-cli.jsonl');
  writeFileSync(tasksFile, [a, b].map((x) => JSON.stringify(x)).join('\n') + '\n');
  const scheduled = async () =>
    (await core.listNamespacedEvent({ namespace: cluster.testNamespace })).items.filter((e) => e.reason === 'Scheduled').map((e) => e.involvedObject.name!);
  const before = new Set(await scheduled());
  const k8sArgs = ['--backend', 'kubernetes', '--kubeconfig', cluster.kubeconfig, '--namespace', cluster.testNamespace];
  const out = join(t.dir, 'grade-k8s-cli');
  const g = await swerl('grade', '--tasks', tasksFile, '--predictions', 'gold', '--out', out, '--run-id', 'k8s', ...k8sArgs);
  assert.match(g.stdout, /Instances resolved: 2\n/, g.stdout + g.stderr);
  const v = await swerl('validate-tasks', '--tasks', tasksFile, '--concurrency', '1', ...k8sArgs);
  assert.equal(v.stdout.trim().split('\n').at(-1), '2 valid, 0 invalid', v.stdout + v.stderr);
  const pods = (await scheduled()).filter((n) => !before.has(n));
  // one pod per grading, two per validated task (test_patch alone, then with the gold patch)
  assert.ok(pods.length >= 2 + 2 * 2, `${pods.length} pods scheduled in ${cluster.testNamespace}: ${pods.join(', ')}`);
  assert.ok(pods.every((n) => n.startsWith('swerl-sbx-')));
  await assert.rejects(swerl('grade', '--tasks', tasksFile, '--predictions', 'gold', '--out', out, '--backend', 'pods'), /--backend: must be docker or kubernetes, got "pods"/);
  // a worker of a server reads its own environment: refused rather than ignored
  await assert.rejects(swerl('validate-tasks', '--tasks', tasksFile, '--address', t.server.address, ...k8sArgs), /with --address, set SWERL_SANDBOX_BACKEND/);
});

test('a worker SIGKILLed mid-rollout: the restarted worker sweeps its pods; nothing lost, nothing run twice', async () => {
  const runId = 'k8s-kill';
  const policy = await scriptedPolicy(join(t.dir, 'policy-kill'), 15);
  // heartbeat timeouts of 10 minutes: the interrupted rollouts can only come back through the restarted worker
  // (a loaded host may take over a minute to start it, past the default 60 s timeout)
  const config = { ...sweConfig(runId, policy), rollout: { heartbeatTimeoutSeconds: 600 } };
  const env = { ...process.env, SWERL_SANDBOX_BACKEND: 'kubernetes' };
  const args = ['--queues', 'rollout,learner', '--address', t.server.address, '--policy-port', '0', '--threads', '1'];
  const logFile = join(t.dir, 'worker-k8s-kill.log');
  let worker: ChildProcess = spawnWorker(args, logFile, env);
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    const running = await waitFor(
      'pods of the run running',
      async () => {
        const pods = await podsOf(runId);
        return pods.filter((p) => p.phase === 'Running').length >= 2 ? pods : null;
      },
      300_000,
      200,
    );
    const deadPid = String(worker.pid);
    assert.ok(
      running.every((p) => p.pid === deadPid),
      'the pods are the worker’s',
    );
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    assert.ok(
      (await podsOf(runId)).some((p) => p.pid === deadPid),
      'its pods outlive it',
    );
    const restarted = Date.now();
    worker = spawnWorker(args, logFile, env);
    await waitFor('the dead worker’s pods removed', async () => !(await podsOf(runId)).some((p) => p.pid === deadPid), 120_000, 200);
    console.log(`# the dead worker's ${running.length} pods were removed ${((Date.now() - restarted) / 1000).toFixed(1)} s after the restart`);
    // the worker log's lines that say what happened to the rollouts, for a failure's message
    const logLines = () =>
      readFileSync(logFile, 'utf8')
        .split('\n')
        .filter((l) => /\[worker\]|\[sandbox\]|rollout|attempt|retry/i.test(l))
        .slice(-20)
        .join('\n');
    // the sweep logs once all its deletions returned, which may be after the pods are gone from the list
    await waitFor('the sweep logged', async () => /\[sandbox\] sweep \(kubernetes\): removed \d+ leftover sandbox/.test(readFileSync(logFile, 'utf8')) || null, 60_000, 200).catch(
      (e: Error) => assert.fail(`${e.message}\n${logLines()}`),
    );
    const result = (await h.result()) as TrainingRunResult;
    assert.equal(result.iterations, 1);
    const { trajectories } = await checkSweRun(runId, config.store.url);
    // the interrupted rollouts were failed by the restarted worker (WorkerDied) and ran again: their trajectory
    // is their second attempt's, which lists the first
    const interrupted = readFileSync(logFile, 'utf8').match(new RegExp(`rollout \\d+ of ${runId}-iter-0 was running on dead worker ${deadPid}@`, 'g')) ?? [];
    assert.ok(interrupted.length >= 2, `${interrupted.length} rollouts failed as WorkerDied (${running.length} pods were running at the kill)\n${logLines()}`);
    const again = trajectories.filter((tr) => Number((tr.info as { attempt?: number }).attempt) > 1);
    const attempts = trajectories.map((tr) => {
      const info = tr.info as { attempt?: number; failedAttempts?: { error: string }[] };
      return `attempt ${String(info.attempt)}${info.failedAttempts ? ` after ${info.failedAttempts.map((f) => f.error.slice(0, 120)).join(' | ')}` : ''}`;
    });
    assert.equal(again.length, interrupted.length, `each interrupted rollout ran once more, the others once: ${attempts.join(', ')}\n${logLines()}`);
    assert.deepEqual(await podsOf(runId), []);
  } finally {
    await policy.close();
    if (worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
  }
});

test('the API server restarted mid-iteration: the run completes; pods it could not delete meanwhile are swept', async () => {
  const runId = 'k8s-api-restart';
  const policy = await scriptedPolicy(join(t.dir, 'policy-api'), 15);
  const config = sweConfig(runId, policy);
  // pods whose deletion failed while the API was down are deleted by the next sweep: every 5 s here (default 60)
  const workers: RunningWorkers = await startWorkers({
    address: t.server.address,
    queues: ['learner', 'rollout'],
    workflowBundle: t.bundle,
    learner: { threads: 1 },
    sandboxSweepSeconds: 5,
  });
  try {
    const h = await t.client.workflow.start('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] });
    await waitFor('rollouts in pods', async () => (await podsOf(runId)).some((p) => p.phase === 'Running'), 300_000, 200);
    const s = await t.client.workflow.getHandle(runId).query(statusQuery);
    assert.equal(s.phase, 'rollouts');
    const t0 = Date.now();
    await stopComponent('kube-apiserver');
    await new Promise((r) => setTimeout(r, 3000));
    await startComponent('kube-apiserver');
    console.log(`# API server down for ${((Date.now() - t0) / 1000).toFixed(1)} s during the rollouts`);
    const result = (await h.result()) as TrainingRunResult;
    assert.equal(result.iterations, 1);
    await checkSweRun(runId, config.store.url);
    const done = Date.now();
    await waitFor('the pods of the failed attempts deleted by the sweep', async () => (await podsOf(runId)).length === 0, 60_000, 500);
    console.log(`# the pods left while the API was down were gone ${((Date.now() - done) / 1000).toFixed(1)} s after the run`);
  } finally {
    await policy.close();
    await workers.shutdown();
  }
});
