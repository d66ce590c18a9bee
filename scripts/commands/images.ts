// `swerl images build [--tasks FILE]`: the base image and one image per task, reused when cached.
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { buildImages } from '../../activities/images.ts';
import { formatLoadError, loadTasks } from '../../lib/swe/task.ts';

export const DEFAULT_TASKS_FILES = ['../shared/swe-tasks/tasks.jsonl', '/work/shared/swe-tasks/tasks.jsonl'];

export function defaultTasksFile(): string | undefined {
  return DEFAULT_TASKS_FILES.find((f) => existsSync(f));
}

export function register(program: Command): void {
  const images = program.command('images').description('build sandbox images without a registry');
  images
    .command('build')
    .description('build swerl-base (debootstrap) and one swerl-task-<id> image per task; cached by recipe hash')
    .option('--tasks <file>', 'tasks file (.jsonl or .parquet)')
    .option('--concurrency <n>', 'parallel task builds', '2')
    .action(async (o: { tasks?: string; concurrency: string }) => {
      const file = o.tasks ?? defaultTasksFile();
      const t0 = Date.now();
      const log = (s: string) => console.log(`[images] ${s}`);
      let tasks: Awaited<ReturnType<typeof loadTasks>>['tasks'] = [];
      if (file) {
        const r = await loadTasks(file);
        for (const e of r.errors) console.error(`[images] ${file}: ${formatLoadError(e)}`);
        tasks = r.tasks;
      }
      const events = await buildImages(tasks, { concurrency: Number(o.concurrency), log });
      if (!tasks.length) log('no tasks file: built the base image only');
      const built = events.filter((e) => e.status === 'built').length;
      log(`${events.length} images (${built} built, ${events.length - built} cached) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    });
}
