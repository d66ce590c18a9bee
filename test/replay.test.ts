// test-group: unit
// Replays the recorded histories (scripts/record-histories.ts) against today's workflow code:
// a non-deterministic change fails here (DESIGN §2).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { buildWorkflowBundle } from '../workers/index.ts';

const dir = fileURLToPath(new URL('./histories/', import.meta.url));
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
let bundle: WorkflowBundleWithSourceMap;

before(async () => {
  bundle = await buildWorkflowBundle();
});

test('recorded histories exist for both workflows', () => {
  assert.ok(files.some((f) => f.startsWith('trainingRun-')), 'a trainingRun history');
  assert.ok(files.some((f) => f.startsWith('rlIteration-')), 'an rlIteration history');
});

for (const f of files) {
  test(`replays ${f}`, async () => {
    const history = historyFromJSON(JSON.parse(readFileSync(join(dir, f), 'utf8')));
    await Worker.runReplayHistory({ workflowBundle: bundle }, history, f.replace(/\.json$/, ''));
  });
}
