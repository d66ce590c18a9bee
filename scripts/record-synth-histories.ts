// Records a history of the task factory's workflow into test/histories/ for test/unit/replay.test.ts (needs
// Docker): synthesizeTasks on a copy of test/fixtures/factory-repo, 2 tasks (one with two bugs), 1 wrong fix each.
// Re-record only after an intended change of the workflow: `node --import tsx scripts/record-synth-histories.ts`.
import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { saveHistory, startTemporalWithWorker } from '../test/helpers/temporal.ts';
import { whenNamespaceReady } from './commands/tasks.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const t = await startTemporalWithWorker('swerl-record-synth-');
const { dir, client } = t;
// a copy: the history holds the source's path, and the repository's own path must not enter it
const repo = join(dir, 'shelf');
cpSync(join(root, 'test/fixtures/factory-repo'), repo, { recursive: true });
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
  const events = await saveHistory(client, join(root, 'test/histories/synthesizeTasks-0.json'), 'synth-record');
  console.log(`recorded synthesizeTasks-0.json (${events} events)`);
} finally {
  await t.close();
}
