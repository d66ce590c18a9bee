// Replays the recorded histories (scripts/record-histories.ts) against today's workflow code:
// a non-deterministic change fails here (DESIGN §2). And one history that must NOT replay: a pump run that waited
// forever, which today's code leaves where that run went idle.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { buildWorkflowBundle } from '../../workers/index.ts';

const dir = fileURLToPath(new URL('../histories/', import.meta.url));
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();
let bundle: WorkflowBundleWithSourceMap;

before(async () => {
  bundle = await buildWorkflowBundle();
});

test('recorded histories exist for both workflows', () => {
  assert.ok(
    files.some((f) => f.startsWith('trainingRun-')),
    'a trainingRun history',
  );
  assert.ok(
    files.some((f) => f.startsWith('rlIteration-')),
    'an rlIteration history',
  );
});

for (const f of files) {
  test(`replays ${f}`, async () => {
    const history = historyFromJSON(JSON.parse(readFileSync(join(dir, f), 'utf8')));
    await Worker.runReplayHistory({ workflowBundle: bundle }, history, f.replace(/\.json$/, ''));
  });
}

// bench:async caught a pump run (plain FrozenLake, η = 4, 8 steps) waiting forever after step 4: every group of batches
// 5 to 7 had reported, but step 4 ended while the loop awaited its admissions, and the wait taken after them missed it.
// Its history (activity and child inputs stripped) replays on the code of then; today's loop starts step 5 instead of
// waiting: its next command is collectBatch where that run, idle, only wrote its metrics line.
test("the pump history that lost the end of a step: today's code starts the next step where that run waited forever", async () => {
  const raw = gunzipSync(readFileSync(fileURLToPath(new URL('../fixtures/pump-lost-wakeup-history.json.gz', import.meta.url))));
  const history = historyFromJSON(JSON.parse(raw.toString('utf8')));
  await assert.rejects(Worker.runReplayHistory({ workflowBundle: bundle }, history, 'plain-pump-4-admission-s1'), (err: Error) => {
    assert.equal(err.name, 'DeterminismViolationError');
    assert.match(err.message, /scheduled event 'recordMetrics' does not match activity type of activity command 'collectBatch'/);
    return true;
  });
});
