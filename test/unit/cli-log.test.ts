// A failed command reads as one line (scripts/cli-log.ts): the chain of a Temporal failure reduced to its workflows,
// activity and innermost cause; a worker warning on one line; a run followed through a server's timeouts; and the
// Kubernetes preflight naming the fix (the CLI end to end: test/temporal/cli-failures.test.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ActivityFailure, ApplicationFailure, ChildWorkflowFailure, RetryState } from '@temporalio/common';
import { ServiceError, WorkflowFailedError } from '@temporalio/client';
import { failureChain, failureLine, followResult, innermostCause, oneLine, RunFailedError, useLogDir, warningLine } from '../../scripts/cli-log.ts';
import { checkKubernetesAccess, kubeconfigSource, loadKubeConfig } from '../../activities/sandbox/k8s-access.ts';

/** What the client reports when an activity of an iteration child fails non-retryably. */
function trainingFailure(): RunFailedError {
  const app = ApplicationFailure.create({ type: 'PolicyMismatch', nonRetryable: true, message: 'the server serves a tied head:\n  start vLLM with --hf-overrides' });
  const activity = new ActivityFailure('Activity task failed', 'syncPolicy', '2', RetryState.NON_RETRYABLE_FAILURE, 'worker-1', app);
  const child = new ChildWorkflowFailure('default', { workflowId: 'run-1-iter-0', runId: 'r' }, 'rlIteration', RetryState.RETRY_POLICY_NOT_SET, activity);
  return new RunFailedError('run-1', new WorkflowFailedError('Workflow execution failed', child, RetryState.RETRY_POLICY_NOT_SET));
}

test('a training failure becomes one line: the workflows and activity it passed through, then the innermost cause', () => {
  const e = trainingFailure();
  assert.deepEqual(
    failureChain(e).map((l) => l.kind),
    ['RunFailedError', 'WorkflowFailedError', 'ChildWorkflowFailure', 'ActivityFailure', 'PolicyMismatch'],
  );
  assert.equal(innermostCause(e), 'PolicyMismatch: the server serves a tied head: start vLLM with --hf-overrides');
  const line = failureLine('train', e, '/tmp/x/swerl.log');
  assert.equal(
    line,
    'swerl train: run-1 > run-1-iter-0 > activity syncPolicy failed: PolicyMismatch: the server serves a tied head: start vLLM with --hf-overrides (full failure chain: /tmp/x/swerl.log)',
  );
  assert.doesNotMatch(line, /\n/);
});

test('a plain error keeps its message alone; multi-line messages and cycles stay bounded and on one line', () => {
  const e = new Error('invalid config c.json:\n  config.batch.tasks: must be ≤ 512, got 1000\n  config.seed: must be ≥ 0, got -1');
  assert.equal(innermostCause(e), 'invalid config c.json: config.batch.tasks: must be ≤ 512, got 1000; config.seed: must be ≥ 0, got -1');
  assert.equal(failureLine('train', e, 'L'), `swerl train: ${innermostCause(e)} (full failure chain: L)`);
  const loop = new Error('outer');
  (loop as { cause?: unknown }).cause = loop;
  assert.equal(failureChain(loop).length, 20);
  assert.equal(oneLine('  a\n\n b   c \n'), 'a; b c');
});

test('a retried activity is one warning line naming the activity, its workflow, the attempt and the cause', () => {
  const err = ApplicationFailure.create({ type: 'PolicyUnavailableError', message: 'policy server http://h:1/v1/models unavailable after 4 attempts' });
  const line = warningLine({ level: 'WARN', message: 'Activity failed', meta: { activityType: 'syncPolicy', workflowId: 'run-1-iter-0', attempt: 2, error: err, taskToken: 'x' } });
  assert.equal(
    line,
    '[warn] activity syncPolicy (workflow run-1-iter-0) attempt 2 failed: PolicyUnavailableError: policy server http://h:1/v1/models unavailable after 4 attempts',
  );
  assert.equal(warningLine({ level: 'WARN', message: 'something\nodd', meta: {} }), '[warn] something; odd');
});

test('a Kubernetes backend with no cluster configured, or one that does not answer, is refused naming KUBECONFIG, --kubeconfig and swerl cluster up', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-k8s-access-'));
  const saved = { HOME: process.env.HOME, KUBECONFIG: process.env.KUBECONFIG, KUBERNETES_SERVICE_HOST: process.env.KUBERNETES_SERVICE_HOST };
  try {
    // nothing configured: no --kubeconfig, KUBECONFIG unset, no ~/.kube/config, not in a pod
    assert.equal(kubeconfigSource(undefined, {}, dir), null);
    process.env.HOME = dir;
    delete process.env.KUBECONFIG;
    delete process.env.KUBERNETES_SERVICE_HOST;
    await assert.rejects(loadKubeConfig(), (e: Error) => {
      assert.match(e.message, /^--backend kubernetes: no Kubernetes cluster is configured \(KUBECONFIG is not set/);
      for (const fix of ['KUBECONFIG', '--kubeconfig', '`swerl cluster up`']) assert.ok(e.message.includes(fix), `${fix} in ${e.message}`);
      return true;
    });
    await assert.rejects(loadKubeConfig(join(dir, 'nope')), /--kubeconfig .*nope: no such file; set KUBECONFIG/);
    // a kubeconfig whose cluster does not answer: one API call, then the same fix, naming the server
    const kc = join(dir, 'kubeconfig');
    writeFileSync(
      kc,
      'apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: "https://127.0.0.1:1"}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {token: t}\n',
    );
    const loaded = await loadKubeConfig(kc);
    assert.equal(loaded.source, `--kubeconfig ${kc}`);
    await assert.rejects(
      checkKubernetesAccess(loaded.kubeConfig, loaded.source, 'swerl'),
      /^Error: --backend kubernetes: the cluster at https:\/\/127\.0\.0\.1:1 \(--kubeconfig .*\) does not answer .*`swerl cluster up`/,
    );
  } finally {
    for (const [k, v] of Object.entries(saved))
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the SDK core's warnings (Rust debug dumps) keep their code and message on the line", () => {
  const dump =
    'Status { code: ResourceExhausted, message: "Workflow is busy.", details: b"\\x08\\x08\\x12", metadata: MetadataMap { headers: {"content-type": "application/grpc"} }, source: None }';
  assert.equal(
    warningLine({ level: 'WARN', message: 'Network error while completing activity', meta: { error: dump } }),
    '[warn] Network error while completing activity: ResourceExhausted: Workflow is busy.',
  );
});

test('following a run: a long poll the server did not answer in time is polled again; a failed run names its workflow', async () => {
  // what the client throws when the history long poll times out on a loaded host (seen at load 27: the demo died of it)
  const deadline = () =>
    new ServiceError('Failed to get Workflow execution history', {
      cause: Object.assign(new Error('4 DEADLINE_EXCEEDED'), { code: 4, details: 'context deadline exceeded', metadata: {} }),
    });
  const logs = mkdtempSync(join(tmpdir(), 'swerl-cli-log-'));
  useLogDir(logs);
  let calls = 0;
  const flaky = {
    result: async () => {
      if (++calls < 3) throw deadline();
      return 'done';
    },
  };
  assert.equal(await followResult<string>(flaky, 'run-1'), 'done');
  assert.equal(calls, 3);
  const failed = {
    result: () => Promise.reject(new WorkflowFailedError('Workflow execution failed', ApplicationFailure.create({ message: 'bad' }), RetryState.NON_RETRYABLE_FAILURE)),
  };
  await assert.rejects(followResult(failed, 'run-2'), (e: unknown) => e instanceof RunFailedError && e.workflowId === 'run-2' && innermostCause(e) === 'bad');
  const other = { result: () => Promise.reject(new Error('permission denied')) };
  await assert.rejects(followResult(other, 'run-3'), /permission denied/);
  assert.match(readFileSync(join(logs, 'swerl.log'), 'utf8'), /following run-1: ServiceError/);
  rmSync(logs, { recursive: true, force: true });
});
