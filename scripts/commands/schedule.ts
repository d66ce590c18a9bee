// `swerl schedule create|list|delete|trigger`: retraining on a schedule (DESIGN §1) is a Temporal
// Schedule whose action starts trainingRun. Each run's workflow id is `<id>-<time>` (Temporal appends
// the time) and, with no config.runId, that is its run id. Overlap SKIP: a retraining run never starts
// while the previous one still runs.
import type { Command } from 'commander';
import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { Client, Connection, ScheduleOverlapPolicy, type ScheduleSpec, type ScheduleSummary } from '@temporalio/client';
import { validateConfig, type TrainingConfig } from '../../lib/config.ts';

export interface CreateScheduleOptions {
  id: string;
  /** raw training config (JSON); runId must be absent so that each run gets its own */
  config: unknown;
  /** an interval ("24h", "30m") or a cron expression; exactly one */
  every?: string;
  cron?: string;
  /** sets config.model to {fromRun}; "latest" chains the schedule's own runs (`initialRun` seeds the first) */
  fromRun?: string;
  initialRun?: string;
}

/** The validated config a scheduled run starts with. Errors name the field and the value. */
export function scheduledConfig(o: Pick<CreateScheduleOptions, 'config' | 'fromRun' | 'initialRun'>): TrainingConfig {
  const raw = { ...(o.config as Record<string, unknown>) };
  if (o.fromRun !== undefined) raw.model = { fromRun: o.fromRun, ...(o.initialRun !== undefined ? { initialRun: o.initialRun } : {}) };
  else if (o.initialRun !== undefined) throw new Error('--initial-run: only with --from-run latest');
  const v = validateConfig(raw);
  if (!v.ok) throw new Error(`invalid config:\n  ${v.errors.join('\n  ')}`);
  if (v.config.runId !== undefined) {
    throw new Error(`config.runId: must be absent in a scheduled config (each run's id is its workflow id), got ${JSON.stringify(v.config.runId)}`);
  }
  return v.config;
}

function scheduleSpec(o: Pick<CreateScheduleOptions, 'every' | 'cron'>): { spec: ScheduleSpec; text: string } {
  if ((o.every === undefined) === (o.cron === undefined)) throw new Error('give exactly one of --every and --cron');
  if (o.every !== undefined) {
    if (!/^\d+(\.\d+)?(ms|s|m|h|d)$/.test(o.every)) throw new Error(`--every: must be a duration like 24h, 30m or 90s, got ${JSON.stringify(o.every)}`);
    return { spec: { intervals: [{ every: o.every as `${number}h` }] }, text: `every ${o.every}` };
  }
  return { spec: { cronExpressions: [o.cron!] }, text: `cron ${o.cron}` };
}

export async function createSchedule(client: Client, o: CreateScheduleOptions): Promise<void> {
  const config = scheduledConfig(o);
  const { spec, text } = scheduleSpec(o);
  await client.schedule.create({
    scheduleId: o.id,
    spec,
    action: { type: 'startWorkflow', workflowType: 'trainingRun', taskQueue: 'learner', workflowId: o.id, args: [config] },
    policies: { overlap: ScheduleOverlapPolicy.SKIP },
    // `spec` here is what the user typed: cron expressions come back from the server as calendars
    memo: { spec: text, model: config.model, store: config.store.url },
  });
}

export interface ScheduleListing {
  id: string;
  spec: string;
  paused: boolean;
  nextRun: Date | null;
  recentRuns: string[];
}

function listing(s: ScheduleSummary): ScheduleListing {
  const memoSpec = s.memo?.spec;
  const every = s.spec?.intervals?.map((i) => `every ${i.every / 1000}s`).join(', ');
  return {
    id: s.scheduleId,
    spec: typeof memoSpec === 'string' ? memoSpec : (every ?? 'calendar'),
    paused: s.state.paused,
    nextRun: s.info.nextActionTimes[0] ?? null,
    recentRuns: s.info.recentActions.flatMap((a) => (a.action.type === 'startWorkflow' ? [a.action.workflow.workflowId] : [])),
  };
}

export async function listSchedules(client: Client): Promise<ScheduleListing[]> {
  const out: ScheduleListing[] = [];
  for await (const s of client.schedule.list()) out.push(listing(s));
  return out.sort((a, b) => a.id.localeCompare(b.id));
}

/** Starts a run now; overlap SKIP as for the scheduled ones. */
export async function triggerSchedule(client: Client, id: string): Promise<void> {
  await client.schedule.getHandle(id).trigger(ScheduleOverlapPolicy.SKIP);
}

export async function deleteSchedule(client: Client, id: string): Promise<void> {
  await client.schedule.getHandle(id).delete();
}

async function withClient<T>(address: string | undefined, fn: (c: Client) => Promise<T>): Promise<T> {
  const connection = await Connection.connect({ address: address ?? process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233' });
  try {
    return await fn(new Client({ connection }));
  } finally {
    await connection.close().catch(() => undefined);
  }
}

function fail(e: unknown): void {
  console.error(`swerl schedule: ${(e as Error).message}`);
  process.exitCode = 2;
}

export function register(program: Command): void {
  const cmd = program.command('schedule').description('retraining on a schedule: a Temporal Schedule that starts trainingRun');
  const address = ['--address <host:port>', 'Temporal frontend (default: $TEMPORAL_ADDRESS, else 127.0.0.1:7233)'] as const;
  cmd
    .command('create')
    .description('create a schedule that starts trainingRun with this config (overlap: skip)')
    .requiredOption('--id <id>', 'schedule id (also the prefix of each run id: <id>-<time>)')
    .requiredOption('--config <file>', 'training config JSON without runId')
    .option('--every <duration>', 'interval, e.g. 24h')
    .option('--cron <expr>', 'cron expression, e.g. "0 3 * * *" (UTC)')
    .option('--from-run <runId>', 'start each run from the newest checkpoint of this run ("latest": the schedule\'s previous run)')
    .option('--initial-run <runId>', 'with --from-run latest: the run the first scheduled run starts from')
    .option(...address)
    .action(async (o: { id: string; config: string; every?: string; cron?: string; fromRun?: string; initialRun?: string; address?: string }) => {
      try {
        const raw = JSON.parse(readFileSync(o.config, 'utf8')) as Record<string, unknown>;
        // workers may run elsewhere: a relative tasks file is made absolute, as `swerl train` does
        const env = raw.env as { tasksFile?: unknown } | undefined;
        if (env && typeof env.tasksFile === 'string' && !isAbsolute(env.tasksFile)) env.tasksFile = resolve(env.tasksFile);
        await withClient(o.address, (c) => createSchedule(c, { id: o.id, config: raw, every: o.every, cron: o.cron, fromRun: o.fromRun, initialRun: o.initialRun }));
        console.log(`created schedule ${o.id}`);
      } catch (e) {
        fail(e);
      }
    });
  cmd
    .command('list')
    .description('list schedules: id, spec, next run, recent runs')
    .option(...address)
    .action(async (o: { address?: string }) => {
      try {
        for (const s of await withClient(o.address, listSchedules)) {
          console.log(`${s.id}\t${s.spec}${s.paused ? ' (paused)' : ''}\tnext ${s.nextRun?.toISOString() ?? '-'}\trecent ${s.recentRuns.join(', ') || '-'}`);
        }
      } catch (e) {
        fail(e);
      }
    });
  cmd
    .command('delete')
    .description('delete a schedule (runs it started go on)')
    .requiredOption('--id <id>', 'schedule id')
    .option(...address)
    .action(async (o: { id: string; address?: string }) => {
      try {
        await withClient(o.address, (c) => deleteSchedule(c, o.id));
        console.log(`deleted schedule ${o.id}`);
      } catch (e) {
        fail(e);
      }
    });
  cmd
    .command('trigger')
    .description('start a run of the schedule now (skipped while its previous run is running)')
    .requiredOption('--id <id>', 'schedule id')
    .option(...address)
    .action(async (o: { id: string; address?: string }) => {
      try {
        await withClient(o.address, (c) => triggerSchedule(c, o.id));
        console.log(`triggered schedule ${o.id}`);
      } catch (e) {
        fail(e);
      }
    });
}
