// Records a history of the task factory's workflow into test/histories/ for test/unit/replay.test.ts (needs
// Docker): synthesizeTasks on a copy of test/fixtures/factory-repo, 2 tasks (one with two bugs), 1 wrong fix each.
// Re-record only after an intended change of the workflow: `node --import tsx scripts/record-synth-histories.ts`.
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { startDevServer } from '../services/temporal-server.ts';
import { startWorkers } from '../workers/index.ts';
import { whenNamespaceReady } from './commands/tasks.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'swerl-record-synth-'));
// a copy: the history holds the source's path, and the repository's own path must not enter it
const repo = join(dir, 'shelf');
cpSync(join(root, 'test/fixtures/factory-repo'), repo, { recursive: true });
const server = await startDevServer({ dir, uiPort: null });
const workers = await startWorkers({ address: server.address, queues: ['learner', 'rollout'], learner: { threads: 1 } });
const connection = await Connection.connect({ address: server.address });
const client = new Client({ connection });
try {
  const h = await whenNamespaceReady(() =>
    client.workflow.start('synthesizeTasks', {
      taskQueue: 'learner',
      workflowId: 'synth-record',
      args: [
        {
          repos: [{ source: repo, testCmd: 'python3 -m pytest -rA -p no:cacheprovider tests', name: 'swerl/shelf' }],
          outDir: join(dir, 'out'),
          max: 2,
          multiFraction: 0.5,
          strengthK: 1,
          seed: 3,
        },
      ],
    }),
  );
  console.log(await h.result());
  const history = await h.fetchHistory();
  writeFileSync(join(root, 'test/histories/synthesizeTasks-0.json'), historyToJSON(history));
  console.log(`recorded synthesizeTasks-0.json (${history.events?.length} events)`);
} finally {
  await connection.close();
  await workers.shutdown();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
