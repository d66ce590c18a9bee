// `swerl tasks synth`: the task factory (issue 28) as the Temporal workflow synthesizeTasks, on TEMPORAL_ADDRESS
// (or --address) with its workers, or on an embedded dev server (SQLite under DIR/.work/temporal) with an
// embedded worker. A progress bar follows the run (its `status` query); Ctrl-C stops the embedded server and
// the same command resumes the run (its workflow id is derived from DIR unless --id is given).
import type { Command } from 'commander';
import cliProgress from 'cli-progress';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { Client, Connection, NamespaceNotFoundError, WorkflowExecutionAlreadyStartedError, WorkflowFailedError } from '@temporalio/client';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { z } from 'zod';
import { startDevServer, type DevServer } from '../../services/temporal-server.ts';
import { startWorkers, type RunningWorkers } from '../../workers/index.ts';
import { validateSynthInput, type SynthInputRaw, type SynthRepo } from '../../lib/factory/config.ts';
import type { SynthResult, SynthStatus } from '../../lib/factory/shapes.ts';
import { synthFinishSignal, synthStatusQuery } from '../../workflows/synthesize-signals.ts';
import { followResult } from '../cli-log.ts';

const RepoLineSchema = z
  .object({
    repo: z.string().min(1),
    source_tarball: z.string().min(1).optional(),
    source: z.string().min(1).optional(),
    test_cmd: z.string().min(1),
    commit: z.string().optional(),
    package_dirs: z.array(z.string().min(1)).min(1).optional(),
    package_dirs_exclude: z.array(z.string().min(1)).optional(),
  })
  .loose()
  .refine((r) => r.source !== undefined || r.source_tarball !== undefined, { message: 'needs `source` or `source_tarball`', path: ['source'] });

/** Repositories from a JSONL file (the swe-repos format: repo, source_tarball relative to the file, test_cmd, package_dirs). */
export function readReposFile(file: string): SynthRepo[] {
  const dir = dirname(resolve(file));
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((l, i) => ({ l, i }))
    .filter(({ l }) => l.trim() !== '')
    .map(({ l, i }) => {
      let raw: unknown;
      try {
        raw = JSON.parse(l);
      } catch (e) {
        throw new Error(`${file} line ${i + 1}: malformed JSON: ${(e as Error).message}`);
      }
      const r = RepoLineSchema.safeParse(raw);
      if (!r.success) throw new Error(`${file} line ${i + 1}: field ${r.error.issues[0]!.path.join('.') || '(record)'}: ${r.error.issues[0]!.message}`);
      const x = r.data;
      const source = x.source ?? resolve(dir, x.source_tarball!);
      return {
        source: source.startsWith('pypi:') ? source : resolve(dir, source),
        testCmd: x.test_cmd,
        name: x.repo,
        ...(x.commit && /^[0-9a-f]{7,40}$/.test(x.commit) ? { commit: x.commit } : {}),
        ...(x.package_dirs ? { packageDirs: x.package_dirs } : {}),
        packageDirsExclude: x.package_dirs_exclude ?? [],
      };
    });
}

export interface SynthCliOptions {
  input: SynthInputRaw;
  address?: string;
  id?: string;
  quiet?: boolean;
  /** a time budget: this many minutes after the call, the run is sent the finish signal (it writes what is validated) */
  minutes?: number;
}

/** The workflow id of a task set: derived from its directory, so the same command resumes the same run. */
export function synthWorkflowId(outDir: string): string {
  const base =
    outDir
      .split('/')
      .filter(Boolean)
      .at(-1)
      ?.replace(/[^A-Za-z0-9._-]/g, '-') ?? 'tasks';
  return `synth-${base}-${createHash('sha256').update(outDir).digest('hex').slice(0, 8)}`;
}

/** Runs (or follows) synthesizeTasks; embedded server and worker unless an address is given. */
export async function synthesize(o: SynthCliOptions): Promise<SynthResult> {
  const v = validateSynthInput(o.input);
  if (!v.ok) throw new Error(`invalid input:\n  ${v.errors.join('\n  ')}`);
  const outDir = v.input.outDir;
  mkdirSync(outDir, { recursive: true });
  const workflowId = o.id ?? synthWorkflowId(outDir);
  const log = (s: string) => {
    if (!o.quiet) console.log(s);
  };
  let server: DevServer | null = null;
  let workers: RunningWorkers | null = null;
  let address = o.address ?? process.env.TEMPORAL_ADDRESS;
  if (!address) {
    server = await startDevServer({ dir: join(outDir, '.work', 'temporal'), uiPort: 0 });
    address = server.address;
    log(`embedded Temporal dev server at ${address}${server.uiUrl ? ` (web UI ${server.uiUrl})` : ''}`);
    try {
      Runtime.install({ logger: new DefaultLogger(process.env.SWERL_LOG_LEVEL === 'INFO' ? 'INFO' : 'WARN') });
    } catch {
      // a runtime exists already (tests, a host process): keep its logger
    }
    workers = await startWorkers({ address, queues: ['learner', 'rollout'], learner: { threads: 1 } });
    const embedded = { server, workers };
    const onSignal = (sig: NodeJS.Signals) => {
      console.error(`\n${sig}: stopping the embedded worker and server (the same command resumes the run ${workflowId})`);
      void Promise.allSettled([embedded.workers.shutdown()])
        .then(() => embedded.server.stop())
        .then(() => process.exit(130));
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  }
  const connection = await Connection.connect({ address });
  const client = new Client({ connection });
  try {
    try {
      await whenNamespaceReady(() =>
        client.workflow.start('synthesizeTasks', {
          taskQueue: 'learner',
          workflowId,
          args: [v.input],
          // the worker's event loop also makes the candidates (CPU-bound): on a busy host a workflow task can pass the default 10 s
          workflowTaskTimeout: '1 minute',
          staticSummary: `task factory: ${v.input.max} tasks from ${v.input.repos.length} repositor${v.input.repos.length === 1 ? 'y' : 'ies'}`,
          staticDetails: `output \`${outDir}\``,
        }),
      );
      log(`started synthesizeTasks ${workflowId} (output ${outDir})`);
    } catch (e) {
      if (!(e instanceof WorkflowExecutionAlreadyStartedError)) throw e;
      log(`synthesizeTasks ${workflowId} is already running: following it`);
    }
    const budget =
      o.minutes === undefined
        ? null
        : setTimeout(() => {
            log(`time budget of ${o.minutes} min spent: synthesizeTasks ${workflowId} finishes with the tasks validated so far`);
            void client.workflow
              .getHandle(workflowId)
              .signal(synthFinishSignal)
              .catch((e: Error) => console.error(`swerl tasks synth: the finish signal failed: ${e.message}`));
          }, o.minutes * 60_000);
    try {
      return await follow(client, workflowId, o.quiet ?? false);
    } finally {
      if (budget) clearTimeout(budget);
    }
  } finally {
    await connection.close().catch(() => undefined);
    await workers?.shutdown();
    await server?.stop();
  }
}

/** A server just started may not know its namespace for some seconds yet (seen on a loaded host): try again for a minute. */
export async function whenNamespaceReady<T>(fn: () => Promise<T>): Promise<T> {
  for (const deadline = Date.now() + 60_000; ;) {
    try {
      return await fn();
    } catch (e) {
      if (!(e instanceof NamespaceNotFoundError) || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/** Waits for the run, with a progress bar of validated tasks fed by its `status` query. */
async function follow(client: Client, workflowId: string, quiet: boolean): Promise<SynthResult> {
  const handle = client.workflow.getHandle(workflowId);
  let finished = false;
  const resultP = followResult<SynthResult>(handle, workflowId).finally(() => (finished = true));
  let bar: cliProgress.SingleBar | null = null;
  while (!finished && !quiet) {
    await Promise.race([resultP.catch(() => undefined), new Promise((r) => setTimeout(r, 1000))]);
    if (finished) break;
    try {
      const st: SynthStatus = await handle.query(synthStatusQuery);
      const rejected = Object.values(st.rejected).reduce((a, b) => a + (b ?? 0), 0);
      const payload = { phase: st.phase, tried: st.tried, candidates: st.candidates, rejected };
      if (!bar) {
        bar = new cliProgress.SingleBar(
          {
            format: 'tasks |{bar}| {value}/{total} validated | {phase} | tried {tried}/{candidates}, rejected {rejected}',
            hideCursor: false,
            noTTYOutput: !process.stdout.isTTY,
            notTTYSchedule: 10_000,
          },
          cliProgress.Presets.shades_classic,
        );
        bar.start(st.target, 0, payload);
      }
      bar.update(Math.min(st.validated, st.target), payload);
    } catch {
      // the server may be restarting, or the run just ended
    }
  }
  bar?.stop();
  try {
    return await resultP;
  } catch (e) {
    if (e instanceof WorkflowFailedError) throw new Error(`synthesizeTasks ${workflowId} failed: ${e.cause?.message ?? e.message}`);
    throw e;
  }
}

const list = (s: string, prev: string[] = []) => [...prev, s];
const int = (name: string) => (s: string) => {
  const n = Number(s);
  if (!Number.isInteger(n)) throw new Error(`${name}: must be an integer, got ${JSON.stringify(s)}`);
  return n;
};
const num = (name: string) => (s: string) => {
  const n = Number(s);
  if (!Number.isFinite(n)) throw new Error(`${name}: must be a number, got ${JSON.stringify(s)}`);
  return n;
};

interface RawOptions {
  repo: string[];
  repos?: string;
  testCmd?: string;
  packageDir: string[];
  name?: string;
  out: string;
  max?: number;
  seed?: number;
  strategies?: string;
  backend?: string;
  concurrency?: number;
  multiFraction?: number;
  strengthK?: number;
  maxFailToPass?: number;
  perFunction?: number;
  timeout?: number;
  validationRepos?: string;
  validationFraction?: number;
  issueWriter?: string;
  issueWriterModel?: string;
  address?: string;
  id?: string;
  minutes?: number;
}

/** The workflow input of the command line's options; a missing or bad option is an error naming it. */
export function inputFromOptions(o: RawOptions): SynthInputRaw {
  const repos: SynthRepo[] = o.repos ? readReposFile(o.repos) : [];
  if (o.repo.length && !o.testCmd) throw new Error('--test-cmd is required with --repo (the command that runs the repository’s tests from its root)');
  if (o.repo.length > 1 && o.name) throw new Error('--name names one repository; with several --repo, use a --repos file');
  for (const spec of o.repo) {
    const source = spec.startsWith('pypi:') ? spec : resolve(spec);
    repos.push({ source, testCmd: o.testCmd!, ...(o.name ? { name: o.name } : {}), ...(o.packageDir.length ? { packageDirs: o.packageDir } : {}), packageDirsExclude: [] });
  }
  if (repos.length === 0) throw new Error('give --repo DIR|TARBALL|pypi:NAME==VERSION (with --test-cmd) or --repos FILE.jsonl');
  const input: SynthInputRaw = { repos, outDir: resolve(o.out) };
  if (o.max !== undefined) input.max = o.max;
  if (o.seed !== undefined) input.seed = o.seed;
  if (o.strategies) input.strategies = o.strategies.split(',').map((s) => s.trim()) as never;
  if (o.backend) input.backend = o.backend as never;
  if (o.concurrency !== undefined) input.concurrency = o.concurrency;
  if (o.multiFraction !== undefined) input.multiFraction = o.multiFraction;
  if (o.strengthK !== undefined) input.strengthK = o.strengthK;
  if (o.maxFailToPass !== undefined) input.maxFailToPass = o.maxFailToPass;
  if (o.perFunction !== undefined) input.perFunction = o.perFunction;
  if (o.timeout !== undefined) input.timeoutS = o.timeout;
  if (o.validationRepos !== undefined || o.validationFraction !== undefined) {
    input.validation = {
      ...(o.validationFraction !== undefined ? { fraction: o.validationFraction } : {}),
      ...(o.validationRepos !== undefined ? { repos: o.validationRepos.split(',').filter(Boolean) } : {}),
    };
  }
  if (o.issueWriter) input.issueWriter = { url: o.issueWriter, ...(o.issueWriterModel ? { model: o.issueWriterModel } : {}) };
  return input;
}

export function register(program: Command): void {
  const tasks = program.command('tasks').description('task sets: make them from repositories with tests');
  tasks
    .command('synth')
    .description('make SWE tasks by injecting bugs the repository’s own tests catch, validated in sandboxes (workflow synthesizeTasks)')
    .option('--repo <source>', 'a directory, a tarball or pypi:NAME==VERSION (its sdist must ship tests); repeatable', list, [])
    .option('--repos <file>', 'repositories as JSONL: repo, source_tarball (relative to the file) or source, test_cmd, package_dirs')
    .option('--test-cmd <cmd>', 'the command that runs the tests from the repository root (pytest, with -rA); with --repo')
    .option('--name <owner/name>', 'the repository’s name (default: from the source); with one --repo')
    .option('--package-dir <dir>', 'where bugs may go (default: the Python source outside tests); repeatable', list, [])
    .requiredOption('--out <dir>', 'the task set’s directory (tasks.jsonl, train.jsonl, validation.jsonl, tarballs/, report.json)')
    .option('--max <n>', 'validated tasks to write over all repositories (default 100)', int('--max'))
    .option('--seed <s>', 'seed of the candidates’ order and the wrong fixes (default 0)', int('--seed'))
    .option('--strategies <list>', 'comma-separated: swap-operator, off-by-one, negate-condition, remove-statement, swap-arguments, wrong-return, change-default (default all)')
    .option('--backend <kind>', 'sandboxes: docker or kubernetes (default docker)')
    .option('--concurrency <k>', 'sandboxes validating at once (default 2)', int('--concurrency'))
    .option('--multi-fraction <f>', 'share of tasks with 2–3 bugs in different functions (default 0.2)', num('--multi-fraction'))
    .option('--strength-k <k>', 'wrong fixes tried per task for its test strength (default 5)', int('--strength-k'))
    .option('--max-fail-to-pass <n>', 'reject a bug that fails more tests than this (default 50)', int('--max-fail-to-pass'))
    .option('--per-function <n>', 'candidates per function (default 3)', int('--per-function'))
    .option('--timeout <s>', 'limit of one full test run, seconds (default 300)', int('--timeout'))
    .option('--validation-repos <list>', 'repositories of the validation split, comma-separated (default: a seeded quarter by name)')
    .option('--validation-fraction <f>', 'share of repositories in the validation split (default 0.25)', num('--validation-fraction'))
    .option('--issue-writer <url>', 'an OpenAI-compatible server that rewrites each problem statement as a user’s bug report')
    .option('--issue-writer-model <name>', 'its model (default: the first it lists)')
    .option('--address <host:port>', 'Temporal frontend (default: $TEMPORAL_ADDRESS, else an embedded server)')
    .option('--id <workflow-id>', 'the run’s workflow id (default: derived from --out; the same id resumes it)')
    .option(
      '--minutes <m>',
      'a time budget: after M minutes, stop taking candidates and write the tasks validated so far (also: temporal workflow signal --name finish)',
      num('--minutes'),
    )
    .action(async (o: RawOptions) => {
      let input: SynthInputRaw;
      try {
        input = inputFromOptions(o);
      } catch (e) {
        console.error(`swerl tasks synth: ${(e as Error).message}`);
        process.exitCode = 2;
        return;
      }
      if (o.minutes !== undefined && !(o.minutes > 0)) {
        console.error(`swerl tasks synth: --minutes: must be a positive number, got ${o.minutes}`);
        process.exitCode = 2;
        return;
      }
      const r = await synthesize({
        input,
        ...(o.address ? { address: o.address } : {}),
        ...(o.id ? { id: o.id } : {}),
        ...(o.minutes !== undefined ? { minutes: o.minutes } : {}),
      });
      const rejected = Object.entries(r.rejected)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ');
      console.log(`${r.tasks} tasks in ${r.tasksFile} (train ${r.train}, validation ${r.validation}${r.validationRepos.length ? `: ${r.validationRepos.join(', ')}` : ''})`);
      console.log(`candidates tried ${r.tried}${rejected ? `; rejected: ${rejected}` : ''}; report: ${join(r.outDir, 'report.json')}`);
    });
}
