// The README's way for ML-infra engineers: a run started, queried and listed with the official
// `temporal` CLI against a running worker (no code of ours on the client side).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { temporalBinary } from '../../services/temporal-server.ts';
import { useTemporalWithWorker, tinyConfig, waitFor, type TestTemporal } from '../helpers/temporal.ts';

let t: TestTemporal;
// async: the worker runs in this process, so the CLI must not block its event loop
const run = promisify(execFile);
const cli = async (...args: string[]): Promise<string> => (await run(temporalBinary(), [...args, '--address', t.server.address], { encoding: 'utf8', timeout: 120_000 })).stdout;

useTemporalWithWorker((x) => (t = x));

test('temporal workflow start / query / result / list drive a training run', async () => {
  const config = tinyConfig(t.dir, { iterations: 1, batch: { tasks: 2, samples: 2 } });
  await cli('workflow', 'start', '--type', 'trainingRun', '--task-queue', 'learner', '--workflow-id', 'cli-run', '--input', JSON.stringify(config));
  const status = JSON.parse(await cli('workflow', 'query', '--workflow-id', 'cli-run', '--type', 'status', '--output', 'json')) as {
    queryResult: { runId: string; iterations: number }[];
  };
  assert.equal(status.queryResult[0].runId, 'cli-run');
  assert.equal(status.queryResult[0].iterations, 1);

  const result = JSON.parse(await cli('workflow', 'result', '--workflow-id', 'cli-run', '--output', 'json')) as {
    status: string;
    result: { iterations: number; checkpoint: number };
  };
  assert.equal(result.status, 'COMPLETED');
  assert.equal(result.result.iterations, 1);
  assert.equal(result.result.checkpoint, 1);

  // the search attributes the web UI filters on are visible to the CLI's list query
  // (visibility is eventually consistent: wait for it rather than read it once)
  const listed = await waitFor(
    'the run in the visibility list',
    async () => {
      const out = await cli('workflow', 'list', '--query', "WorkflowType = 'trainingRun' AND RlIteration >= 1 AND RlPhase = 'finished'", '--output', 'json');
      return out.includes('cli-run') ? out : undefined;
    },
    30_000,
    500,
  );
  assert.match(listed, /cli-run/);

  // a bad config is refused with the field named, as the README says
  await cli(
    'workflow',
    'start',
    '--type',
    'trainingRun',
    '--task-queue',
    'learner',
    '--workflow-id',
    'cli-bad',
    '--input',
    JSON.stringify({ ...config, batch: { tasks: 1000, samples: 2 } }),
  );
  await assert.rejects(cli('workflow', 'result', '--workflow-id', 'cli-bad'), (e: Error & { stdout?: string; stderr?: string }) =>
    /batch\.tasks/.test(`${e.message}${e.stdout ?? ''}${e.stderr ?? ''}`),
  );
});
