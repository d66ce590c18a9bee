// `swerl grade --tasks FILE --predictions FILE|gold --out DIR [--concurrency N] [--run-id ID]`: grades a
// SWE-bench predictions file (JSONL, JSON list or dict) on our images through the same path as the
// training reward (activities/grade.ts), each prediction in a fresh container, N at a time, with a
// progress bar. DIR is laid out as the official harness's working directory (as evaluationRun's runs are):
//   DIR/predictions.jsonl                                        what was graded
//   DIR/logs/run_evaluation/<run_id>/<model>/<id>/report.json    {id: {patch_is_None, patch_exists, patch_successfully_applied, resolved, tests_status}}
//   DIR/logs/run_evaluation/<run_id>/<model>/<id>/patch.diff, test_output.txt, grade.json (our GradeResult)
//   DIR/<model>.<run_id>.json                                    the run summary (counts and id lists, schema_version 2)
// A grading that cannot run (GradingError) is tried 3 times, then listed under error_ids. Exit status 1
// when any instance errored.
import type { Command } from 'commander';
import cliProgress from 'cli-progress';
import { mkdir, writeFile, rename } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { formatLoadError, loadTasks, type SweTask } from '../../lib/swe/task.ts';
import { checkPredictionIds, goldPredictions, loadPredictions, type Prediction } from '../../lib/swe/predictions.ts';
import { GRADER_VERSION, GradingError, type GradeResult, type IntegrityFinding } from '../../lib/swe/grading.ts';
import { findingLines, integrityKeys, isHack } from '../../lib/swe/integrity.ts';
import { instanceReport, modelDirName, reportJson, runSummary, type InstanceReport, type RunSummary } from '../../lib/swe/report.ts';
import type { SandboxBackend } from '../../lib/sandbox.ts';
import { defaultTasksFile } from './images.ts';
import { mapInLanes } from '../../lib/pool.ts';
import { parseBackendOptions, sandboxBackendFrom, withBackendOptions } from './cluster.ts';
import { appendLog, logFile, useLogDir } from '../cli-log.ts';

const ATTEMPTS = 3;

async function writeAtomic(path: string, text: string): Promise<void> {
  await writeFile(`${path}.tmp`, text);
  await rename(`${path}.tmp`, path);
}

export interface GradeRunOptions {
  tasksFile: string;
  /** a predictions file, or 'gold' */
  predictions: string;
  outDir: string;
  runId: string;
  concurrency: number;
  timeoutS?: number;
  /** default: the process's shared backend of SWERL_SANDBOX_BACKEND */
  backend?: SandboxBackend;
  /** the static audit: zero (default), flag or off */
  audit?: 'zero' | 'flag' | 'off';
  onProgress?: (done: number, total: number, last: { instanceId: string; outcome: string }) => void;
}

/** Grades every prediction and writes the harness-shaped reports and summary; returns the summary. */
export async function gradePredictions(o: GradeRunOptions): Promise<{ summary: RunSummary; summaryPath: string; loadErrors: string[]; flagged: Map<string, IntegrityFinding[]> }> {
  const { gradePatch } = await import('../../activities/grade.ts');
  const { createSandboxBackend } = await import('../../activities/sandbox/index.ts');
  const { buildImages } = await import('../../activities/images.ts');
  const { tasks, errors } = await loadTasks(o.tasksFile);
  const byId = new Map(tasks.map((t) => [t.instance_id, t]));
  const preds: Prediction[] = o.predictions === 'gold' ? goldPredictions(tasks) : await loadPredictions(o.predictions);
  checkPredictionIds(preds, new Set(byId.keys()), o.tasksFile);
  const toRun = preds.filter((p) => p.model_patch !== null && p.model_patch.trim() !== '');
  await buildImages(
    toRun.map((p) => byId.get(p.instance_id)!),
    { concurrency: 2 },
  );
  const backend = o.backend ?? (await createSandboxBackend());
  const reports = new Map<string, InstanceReport>();
  const failures = new Map<string, string>();
  const flagged = new Map<string, IntegrityFinding[]>();
  let done = 0;

  const instanceDir = (p: Prediction) => join(o.outDir, 'logs', 'run_evaluation', o.runId, modelDirName(p.model_name_or_path), p.instance_id);
  await mkdir(o.outDir, { recursive: true });
  await writeAtomic(join(o.outDir, 'predictions.jsonl'), preds.map((p) => JSON.stringify(p)).join('\n') + '\n');
  const gradeOne = async (p: Prediction, task: SweTask): Promise<void> => {
    const dir = instanceDir(p);
    await mkdir(dir, { recursive: true });
    let outcome: string;
    if (p.model_patch === null || p.model_patch.trim() === '') {
      const r = instanceReport(p);
      await writeAtomic(join(dir, 'report.json'), reportJson(r));
      outcome = 'empty patch';
    } else {
      await writeFile(join(dir, 'patch.diff'), p.model_patch);
      let g: GradeResult | undefined;
      let lastError = '';
      for (let attempt = 1; attempt <= ATTEMPTS && !g; attempt++) {
        try {
          g = await gradePatch({
            task,
            patch: p.model_patch,
            backend,
            ...(o.timeoutS ? { timeoutS: o.timeoutS } : {}),
            ...(o.audit ? { audit: o.audit } : {}),
            onLog: (log) => writeFile(join(dir, 'test_output.txt'), log),
          });
        } catch (e) {
          if (!(e instanceof GradingError)) throw e;
          lastError = e.message;
        }
      }
      if (g) {
        const r = instanceReport(p, g);
        reports.set(p.instance_id, r[p.instance_id]!);
        if (isHack(integrityKeys(g.integrity)))
          flagged.set(
            p.instance_id,
            g.integrity!.filter((f) => f.kind !== 'test_file_edit'),
          );
        await writeFile(join(dir, 'grade.json'), JSON.stringify(g, null, 1) + '\n');
        await writeAtomic(join(dir, 'report.json'), reportJson(r));
        outcome = g.resolved ? 'resolved' : g.reason;
      } else {
        failures.set(p.instance_id, lastError);
        outcome = 'error';
      }
    }
    o.onProgress?.(++done, preds.length, { instanceId: p.instance_id, outcome });
  };

  await mapInLanes(preds, Math.max(1, o.concurrency), (p) => gradeOne(p, byId.get(p.instance_id)!));
  const summary = runSummary({ datasetIds: tasks.map((t) => t.instance_id), predictions: preds, reports, errors: failures, graderVersion: GRADER_VERSION });
  const first = preds[0]?.model_name_or_path ?? 'none';
  const summaryPath = join(o.outDir, `${modelDirName(first)}.${o.runId}.json`);
  await mkdir(o.outDir, { recursive: true });
  await writeAtomic(summaryPath, reportJson(summary));
  return { summary, summaryPath, loadErrors: errors.map(formatLoadError), flagged };
}

export function register(program: Command): void {
  withBackendOptions(program.command('grade').description('grade a SWE-bench predictions file (or the gold patches) in fresh containers (or pods); harness-shaped reports'))
    .option('--tasks <file>', 'tasks file (.jsonl or .parquet)')
    .requiredOption('--predictions <file|gold>', 'predictions: JSONL, JSON list or dict of {instance_id, model_name_or_path, model_patch}; "gold" for the tasks\' own patches')
    .requiredOption('--out <dir>', 'output directory')
    .option('--concurrency <n>', 'predictions graded at once (one container each)', '2')
    .option('--run-id <id>', 'names the summary file <model>.<run-id>.json', 'swerl-grade')
    .option('--timeout <s>', 'test command limit in seconds (default 300)')
    .option('--audit <mode>', 'the static audit of what each patch adds: zero (a flag scores 0, suspicious_patch), flag (recorded only) or off', 'zero')
    .action(
      async (opt: {
        tasks?: string;
        predictions: string;
        out: string;
        concurrency: string;
        runId: string;
        timeout?: string;
        audit: string;
        backend: string;
        kubeconfig?: string;
        namespace?: string;
      }) => {
        useLogDir(opt.out);
        const backend = await sandboxBackendFrom(parseBackendOptions(opt));
        const tasksFile = opt.tasks ?? defaultTasksFile();
        if (!tasksFile) throw new Error('--tasks FILE is required (no default tasks file found)');
        const concurrency = Number(opt.concurrency);
        if (!Number.isInteger(concurrency) || concurrency < 1) throw new Error(`--concurrency must be a positive integer, got ${opt.concurrency}`);
        const timeoutS = opt.timeout === undefined ? undefined : Number(opt.timeout);
        if (timeoutS !== undefined && !(timeoutS > 0)) throw new Error(`--timeout must be a positive number of seconds, got ${opt.timeout}`);
        if (!['zero', 'flag', 'off'].includes(opt.audit)) throw new Error(`--audit must be zero, flag or off, got ${JSON.stringify(opt.audit)}`);
        const bar = process.stderr.isTTY
          ? new cliProgress.SingleBar({ format: 'grading [{bar}] {value}/{total} {last}', stream: process.stderr }, cliProgress.Presets.shades_classic)
          : null;
        let started = false;
        const { summary, summaryPath, loadErrors, flagged } = await gradePredictions({
          tasksFile: resolve(tasksFile),
          predictions: opt.predictions === 'gold' ? 'gold' : resolve(opt.predictions),
          outDir: resolve(opt.out),
          runId: opt.runId,
          concurrency,
          backend,
          audit: opt.audit as 'zero' | 'flag' | 'off',
          ...(timeoutS !== undefined ? { timeoutS } : {}),
          onProgress: (done, total, last) => {
            if (bar) {
              if (!started) bar.start(total, 0, { last: '' });
              started = true;
              bar.update(done, { last: `${last.instanceId}: ${last.outcome}` });
            } else console.error(`[grade] ${done}/${total} ${last.instanceId}: ${last.outcome}`);
          },
        });
        bar?.stop();
        for (const e of loadErrors) console.error(`[grade] ${tasksFile}: ${e}`);
        console.log(`Total instances: ${summary.total_instances}`);
        console.log(`Instances submitted: ${summary.submitted_instances}`);
        console.log(`Instances completed: ${summary.completed_instances}`);
        console.log(`Instances incomplete: ${summary.incomplete_ids.length}`);
        console.log(`Instances resolved: ${summary.resolved_instances}`);
        console.log(`Instances unresolved: ${summary.unresolved_instances}`);
        console.log(`Instances with empty patches: ${summary.empty_patch_instances}`);
        console.log(`Instances with errors: ${summary.error_instances}`);
        for (const [id, why] of Object.entries(summary.error_reasons)) console.log(`  error ${id}: ${why}`);
        // what the grader caught (the reason and the rule), for a reader to judge
        console.log(`Instances flagged by the integrity checks: ${flagged.size}`);
        for (const [id, findings] of [...flagged].sort(([a], [b]) => a.localeCompare(b))) for (const l of findingLines(id, findings)) console.log(l);
        console.log(`Report written to ${summaryPath}`);
        process.exitCode = summary.error_instances ? 1 : 0;
        const reasons = Object.entries(summary.error_reasons);
        if (reasons.length) {
          // the reasons in full in the log; the last line says what went wrong first
          appendLog(`swerl grade ${opt.runId}: ${reasons.length} instance(s) could not be graded\n${reasons.map(([id, why]) => `  ${id}: ${why}`).join('\n')}`);
          const [id, why] = reasons[0]!;
          console.error(`swerl grade: ${opt.runId}: ${reasons.length} of ${summary.total_instances} instances could not be graded, first ${id}: ${why} (all in ${logFile()})`);
        }
      },
    );
}
