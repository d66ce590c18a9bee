// The fan-out at scale: one iteration of 4,096 FrozenLake rollouts with 4,096 allowed in flight,
// through the real stack (dev server, one worker for both queues, the native policy server). A baseline
// iteration of 512 rollouts that runs them itself (no child workflows) is measured in the same run.
// Prints, for each: wall time, rollouts/s, the largest number of pending activities observed in any one
// workflow and over all of them (sampled by describe() every second), history events and bytes per
// rollout (all workflows of the iteration), and the largest history.
//
//   npm run bench:fanout -- [--rollouts 4096] [--baseline 512] [--samples 8] [--worker-rollouts 32] [--json FILE]

import { parseArgs } from 'node:util';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { startDevServer } from '../services/temporal-server.ts';
import { fileStoreUrl } from '../lib/store.ts';
import { ROLLOUTS_PER_WORKFLOW_DEFAULT, tasksPerChildWorkflow, type TrainingConfigInput } from '../lib/config.ts';
import { startWorkers } from '../workers/index.ts';
import { iterationWorkflowId, rolloutChunkWorkflowId, type TrainingRunResult } from '../lib/training/shapes.ts';

const { values: args } = parseArgs({
  options: {
    rollouts: { type: 'string', default: '4096' },
    baseline: { type: 'string', default: '512' },
    samples: { type: 'string', default: '8' },
    'worker-rollouts': { type: 'string', default: '32' },
    json: { type: 'string' },
  },
});
const samples = Number(args.samples);
const root = fileURLToPath(new URL('..', import.meta.url));
const preset = JSON.parse(readFileSync(join(root, 'configs', 'frozenlake.json'), 'utf8')) as TrainingConfigInput;

Runtime.install({ logger: new DefaultLogger('WARN') });
const dir = mkdtempSync(join(tmpdir(), 'swerl-bench-fanout-'));
const server = await startDevServer({ dir, uiPort: null });
const workers = await startWorkers({
  address: server.address,
  queues: ['learner', 'rollout'],
  learner: { threads: 2 },
  maxConcurrentRollouts: Number(args['worker-rollouts']),
  sandboxSweepSeconds: 0,
});
const connection = await Connection.connect({ address: server.address });
const client = new Client({ connection });

interface Measure {
  rollouts: number;
  childWorkflows: number;
  wallSeconds: number;
  rolloutSeconds: number;
  rolloutsPerSecond: number;
  maxPendingOneWorkflow: number;
  maxPendingAll: number;
  historyEvents: number;
  historyBytes: number;
  eventsPerRollout: number;
  bytesPerRollout: number;
  largestHistoryEvents: number;
  largestHistoryBytes: number;
  episodes: number;
  rolloutErrors: number;
}

async function measure(runId: string, rollouts: number): Promise<Measure> {
  const tasks = Math.ceil(rollouts / samples);
  const config: TrainingConfigInput = {
    ...preset,
    runId,
    iterations: 1,
    batch: { tasks, samples },
    maxInflightRollouts: Math.min(4096, tasks * samples),
    // the scale, not crash recovery, is measured here: heartbeat timeouts that a busy shared host does not trip
    rollout: { ...preset.rollout, heartbeatSeconds: 5, heartbeatTimeoutSeconds: 60 },
    learner: { ...preset.learner, heartbeatTimeoutSeconds: 60 },
    store: { url: fileStoreUrl(join(dir, 'store')) },
  };
  const total = tasks * samples;
  const perWorkflow = config.rolloutsPerWorkflow ?? ROLLOUTS_PER_WORKFLOW_DEFAULT;
  const children = total > perWorkflow ? Math.ceil(tasks / tasksPerChildWorkflow(perWorkflow, samples)) : 0;
  const ids = [iterationWorkflowId(runId, 0), ...Array.from({ length: children }, (_, k) => rolloutChunkWorkflowId(runId, 0, k))];
  let maxOne = 0;
  let maxAll = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const counts = await Promise.all(
        ids.map((id) =>
          client.workflow
            .getHandle(id)
            .describe()
            .then((d) => d.raw.pendingActivities?.length ?? 0)
            .catch(() => 0),
        ),
      );
      maxOne = Math.max(maxOne, ...counts);
      maxAll = Math.max(
        maxAll,
        counts.reduce((a, b) => a + b, 0),
      );
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  const t0 = Date.now();
  const result = (await client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] })) as TrainingRunResult;
  const wallSeconds = (Date.now() - t0) / 1000;
  sampling = false;
  await sampler;
  let events = 0;
  let bytes = 0;
  let largestEvents = 0;
  let largestBytes = 0;
  for (const id of ids) {
    const h = await client.workflow.getHandle(id).fetchHistory();
    const n = h.events?.length ?? 0;
    // as the server counts it: the encoded protobuf (its JSON export is about twice as large)
    const b = proto.temporal.api.history.v1.History.encode(h).finish().length;
    events += n;
    bytes += b;
    largestEvents = Math.max(largestEvents, n);
    largestBytes = Math.max(largestBytes, b);
  }
  const m = result.lastMetrics!;
  return {
    rollouts: total,
    childWorkflows: children,
    wallSeconds,
    rolloutSeconds: m.rolloutSeconds,
    rolloutsPerSecond: total / m.rolloutSeconds,
    maxPendingOneWorkflow: maxOne,
    maxPendingAll: maxAll,
    historyEvents: events,
    historyBytes: bytes,
    eventsPerRollout: events / total,
    bytesPerRollout: bytes / total,
    largestHistoryEvents: largestEvents,
    largestHistoryBytes: largestBytes,
    episodes: m.episodes,
    rolloutErrors: m.rolloutErrors,
  };
}

const show = (name: string, m: Measure) =>
  [
    `${name}: ${m.rollouts} rollouts${m.childWorkflows ? ` through ${m.childWorkflows} child workflows` : ' in the iteration itself'}, ${m.episodes} episodes, ${m.rolloutErrors} rollout errors`,
    `  wall ${m.wallSeconds.toFixed(1)} s (rollouts ${m.rolloutSeconds.toFixed(1)} s, ${m.rolloutsPerSecond.toFixed(1)} rollouts/s)`,
    `  pending activities: at most ${m.maxPendingOneWorkflow} in one workflow, ${m.maxPendingAll} over all (Temporal's limit: 2,000 per workflow)`,
    `  history: ${m.historyEvents} events, ${(m.historyBytes / 2 ** 20).toFixed(2)} MiB; ${m.eventsPerRollout.toFixed(2)} events and ${(m.bytesPerRollout / 1024).toFixed(2)} KiB per rollout; largest history ${m.largestHistoryEvents} events, ${(m.largestHistoryBytes / 2 ** 20).toFixed(2)} MiB (limits 51,200 events / 50 MB, warning at 10,240)`,
  ].join('\n');

try {
  const baseline = await measure('bench-baseline', Number(args.baseline));
  console.log(show('baseline', baseline));
  const big = await measure('bench-fanout', Number(args.rollouts));
  console.log(show('fan-out', big));
  console.log(
    `ratios fan-out/baseline: rollouts ×${(big.rollouts / baseline.rollouts).toFixed(1)}, rollouts/s ×${(big.rolloutsPerSecond / baseline.rolloutsPerSecond).toFixed(2)}, ` +
      `events per rollout ×${(big.eventsPerRollout / baseline.eventsPerRollout).toFixed(2)}, largest history ×${(big.largestHistoryEvents / baseline.largestHistoryEvents).toFixed(2)}`,
  );
  if (args.json) writeFileSync(args.json, JSON.stringify({ baseline, fanout: big }, null, 2));
} finally {
  await connection.close();
  await workers.shutdown();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
