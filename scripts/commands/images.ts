// `swerl images build [--tasks FILE]`: the base image and one image per task, reused when cached.
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { buildImages } from '../../activities/images.ts';
import { formatLoadError, loadTasks } from '../../lib/swe/task.ts';
import { buildSweTasks, SWE_TASKS_FILE } from '../build-swe-tasks.ts';

/** The repository's own tasks (data/swe/), when scripts/setup.sh (scripts/build-swe-tasks.ts) has built them. */
export function defaultTasksFile(): string | undefined {
  return existsSync(SWE_TASKS_FILE) ? SWE_TASKS_FILE : undefined;
}

export function register(program: Command): void {
  const images = program.command('images').description('build sandbox images without a registry');
  images
    .command('build')
    .description('build swerl-base (debootstrap) and one swerl-task-<id> image per task; cached by recipe hash')
    .option('--tasks <file>', "tasks file (.jsonl or .parquet); default: the repository's own (data/swe/build/tasks.jsonl)")
    .option('--concurrency <n>', 'parallel task builds', '2')
    .action(async (o: { tasks?: string; concurrency: string }) => {
      // without --tasks: the repository's own tasks, built first when their sources changed
      const file = o.tasks ?? (await buildSweTasks());
      const t0 = Date.now();
      const log = (s: string) => console.log(`[images] ${s}`);
      const { tasks, errors } = await loadTasks(file);
      for (const e of errors) console.error(`[images] ${file}: ${formatLoadError(e)}`);
      const events = await buildImages(tasks, { concurrency: Number(o.concurrency), log });
      const built = events.filter((e) => e.status === 'built').length;
      log(`${events.length} images (${built} built, ${events.length - built} cached) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    });
}
