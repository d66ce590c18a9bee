// `swerl worker --queues rollout,learner [--address HOST:PORT]`: serves the training workflows and activities.
import type { Command } from 'commander';
import { z } from 'zod';
import { startWorkers, type QueueName } from '../../workers/index.ts';
import { startWorkerMetrics } from '../../workers/metrics-server.ts';
import { backendKindFromEnv } from '../../activities/sandbox/index.ts';
import { checkedKubeConfig } from './cluster.ts';

const WorkerOptionsSchema = z.object({
  queues: z
    .string()
    .transform((s) =>
      s
        .split(',')
        .map((q) => q.trim())
        .filter(Boolean),
    )
    .pipe(z.array(z.enum(['rollout', 'learner'])).min(1)),
  address: z.string().min(1),
  namespace: z.string().min(1),
  policyHost: z.string().min(1),
  policyPort: z.coerce.number().int().min(0).max(65535),
  policyUrl: z.string().url().optional(),
  device: z.enum(['cpu', 'cuda']),
  threads: z.coerce.number().int().min(0).max(1024),
  policyModels: z.coerce.number().int().min(1).max(64),
  maxRollouts: z.coerce.number().int().min(1).max(10_000),
  resumeStore: z.string().optional(),
  resumeRun: z.string().optional(),
  metricsPort: z.coerce.number().int().min(0).max(65535).optional(),
  metricsHost: z.string().min(1),
  sandboxSweepSeconds: z.coerce.number().min(0).max(86_400),
  connectWaitSeconds: z.coerce.number().min(0).max(86_400),
});

export function register(program: Command): void {
  program
    .command('worker')
    .description('run a worker for the rollout and/or learner task queues')
    .option('--queues <list>', 'comma-separated task queues: rollout,learner', 'rollout,learner')
    .option('--address <host:port>', 'Temporal frontend', process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233')
    .option('--namespace <ns>', 'Temporal namespace', process.env.TEMPORAL_NAMESPACE ?? 'default')
    .option('--policy-host <host>', 'address the policy server binds (learner queue)', '127.0.0.1')
    .option('--policy-port <port>', 'policy server port (0: a free port)', '0')
    .option('--policy-url <url>', 'URL rollout workers on other hosts use for this policy server (with --policy-host 0.0.0.0 and a fixed --policy-port)')
    .option('--device <device>', 'learner device: cpu or cuda', 'cpu')
    .option('--threads <n>', 'learner CPU threads (0: automatic)', '0')
    .option('--policy-models <n>', 'checkpoints the policy server holds at once (an asynchronous run uses maxStaleness + 1)', '4')
    .option('--max-rollouts <n>', 'rollouts run at once in this process', '16')
    .option('--resume-store <url>', 'at start, serve the newest checkpoint of --resume-run from this store')
    .option('--resume-run <id>', 'run id for --resume-store')
    .option('--metrics-port <port>', "serve Prometheus metrics (ours and the Temporal SDK's) on this port at /metrics (0: a free port)")
    .option('--metrics-host <host>', 'address the metrics endpoint binds', '127.0.0.1')
    .option('--connect-wait-seconds <n>', 'keep trying the first connection to the Temporal frontend this long (0: one try)', '60')
    .option('--sandbox-sweep-seconds <n>', 'remove sandboxes of dead workers on this host at start, expired ones every n seconds (0: never)', '60')
    .action(async (raw: Record<string, unknown>) => {
      const parsed = WorkerOptionsSchema.safeParse(raw);
      if (!parsed.success) {
        const i = parsed.error.issues[0]!;
        console.error(`swerl worker: --${String(i.path[0])}: ${i.message}, got ${JSON.stringify(raw[String(i.path[0])])}`);
        process.exitCode = 2;
        return;
      }
      const o = parsed.data;
      // pods of a cluster that cannot work would fail one rollout at a time: stop here, naming the fix
      if (o.queues.includes('rollout') && backendKindFromEnv() === 'kubernetes') await checkedKubeConfig({});
      // before any connection: the SDK's metrics exporter is part of its runtime
      const metrics = o.metricsPort === undefined ? null : await startWorkerMetrics({ host: o.metricsHost, port: o.metricsPort });
      if (metrics) console.log(`metrics on ${metrics.url}${metrics.sdk ? " (ours and the Temporal SDK's)" : ''}`);
      const running = await startWorkers({
        address: o.address,
        namespace: o.namespace,
        queues: o.queues as QueueName[],
        learner: {
          device: o.device,
          threads: o.threads,
          policyHost: o.policyHost,
          policyPort: o.policyPort,
          policyModels: o.policyModels,
          ...(o.policyUrl ? { advertiseUrl: o.policyUrl } : {}),
        },
        maxConcurrentRollouts: o.maxRollouts,
        sandboxSweepSeconds: o.sandboxSweepSeconds,
        connectWaitSeconds: o.connectWaitSeconds,
        ...(o.resumeStore && o.resumeRun ? { resume: { storeUrl: o.resumeStore, runId: o.resumeRun } } : {}),
      });
      console.log(`worker on ${o.address} serving ${o.queues.join(', ')}${running.ctx.server ? `; policy server ${running.ctx.server.url}` : ''}`);
      const stop = () => void running.shutdown();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      await running.done;
      await metrics?.close();
    });
}
