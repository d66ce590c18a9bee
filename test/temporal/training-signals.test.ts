// trainingRun's control surface against a real dev server: bad config, pause/resume,
// updateHyperparameters (rejected and accepted), stopAfterIteration, the status query.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { statusQuery, pauseSignal, resumeSignal, stopAfterIterationSignal, updateHyperparametersUpdate } from '../../workflows/signals.ts';
import type { TrainingRunResult, TrainingStatus } from '../../lib/training/shapes.ts';
import { useTemporalWithWorker, tinyConfig, waitFor, type TestTemporal } from '../helpers/temporal.ts';

let t: TestTemporal;

useTemporalWithWorker((x) => (t = x));

test('a bad config fails the run with the field and value named', async () => {
  const h = await t.client.workflow.start('trainingRun', {
    taskQueue: 'learner',
    workflowId: 'bad-config',
    args: [{ ...tinyConfig(t.dir), batch: { tasks: 1000, samples: 2 } }],
  });
  await assert.rejects(h.result(), (err: unknown) => {
    assert.ok(err instanceof WorkflowFailedError);
    const msg = String((err.cause as Error).message);
    assert.match(msg, /config\.batch\.tasks: must be ≤ 512, got 1000/);
    return true;
  });
});

test('pause holds between iterations, updates are validated, resume continues, stopAfterIteration ends cleanly', async () => {
  const h = await t.client.workflow.start('trainingRun', {
    taskQueue: 'learner',
    workflowId: 'signals-run',
    args: [tinyConfig(t.dir, { iterations: 6, batch: { tasks: 2, samples: 2 } })],
  });
  await h.signal(pauseSignal);
  const paused = await waitFor('paused', async () => {
    const s = await h.query(statusQuery);
    return s.paused && !s.running && s.phase === 'paused' ? s : null;
  });
  const k = paused.iteration;
  await new Promise((r) => setTimeout(r, 3000));
  assert.equal((await h.query(statusQuery)).iteration, k, 'no iteration ran while paused');

  await assert.rejects(h.executeUpdate(updateHyperparametersUpdate, { args: [{ lr: -1 }] }), (err: unknown) => {
    assert.ok(err instanceof WorkflowUpdateFailedError);
    assert.match(String((err.cause as Error).message), /hyperparameters\.lr: must be > 0, got -1/);
    return true;
  });
  await assert.rejects(h.executeUpdate(updateHyperparametersUpdate, { args: [{ clipHigh: 'x' } as never] }), (err: unknown) => {
    assert.match(String(((err as Error).cause as Error).message), /hyperparameters\.clipHigh: must be number, got "x"/);
    return true;
  });
  assert.equal((await h.query(statusQuery)).hyperparameters.lr, 1e-3, 'rejected updates changed nothing');
  const hp = await h.executeUpdate(updateHyperparametersUpdate, { args: [{ lr: 0.005, temperature: 0.9 }] });
  assert.equal(hp.lr, 0.005);
  assert.equal((await h.query(statusQuery)).hyperparameters.temperature, 0.9);

  await h.signal(resumeSignal);
  const s: TrainingStatus = await waitFor(
    'an iteration after resume',
    async () => {
      const st = await h.query(statusQuery);
      return st.iteration > k ? st : null;
    },
    150_000,
  );
  assert.equal(s.lastMetrics?.lr, 0.005, 'the accepted learning rate was used');
  await h.signal(stopAfterIterationSignal, {});
  const result: TrainingRunResult = await h.result();
  assert.equal(result.stopped, true);
  assert.ok(result.iterations < 6, `stopped early (${result.iterations} iterations)`);
  assert.equal(result.checkpoint, result.iterations);
});
