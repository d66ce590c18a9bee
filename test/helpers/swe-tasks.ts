// The repository's own SWE tasks (data/swe/, built by scripts/build-swe-tasks.ts into data/swe/build/): the file,
// the loaded tasks, one task by id, and the task with a given layout for tests that need one.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildSweTasks } from '../../scripts/build-swe-tasks.ts';
import { loadTasksStrict, type SweTask } from '../../lib/swe/task.ts';

/** The tasks file, built first when its inputs changed (a stamp check when they did not). */
export function sweTasksFile(): Promise<string> {
  return buildSweTasks();
}

let tasksP: Promise<SweTask[]> | undefined;
export function sweTasks(): Promise<SweTask[]> {
  tasksP ??= sweTasksFile().then(loadTasksStrict);
  return tasksP;
}

export async function sweTask(id: string): Promise<SweTask> {
  const t = (await sweTasks()).find((x) => x.instance_id === id);
  if (!t) throw new Error(`no task ${id} in data/swe/tasks/`);
  return t;
}

/**
 * The tasks chosen by layout, so that a test that needs a property names it:
 *   pkgTests   tests inside the package (keyvals/tests/), python3 -m pytest from the root, pytest functions and classes
 *   rootTests  a package at the root, tests under tests/, pytest functions, two FAIL_TO_PASS in two files
 *   rootModule a root-level module with a root-level test file of unittest.TestCase classes
 *   srcLayout  src/ layout run with PYTHONPATH=src, tests/ of unittest.TestCase classes
 *   sdist      a real release from PyPI (toolz 1.1.0: toolz/tests/ inside the package, a module over 150 lines)
 *   sdistSrc   a real release from PyPI with a src/ layout and TestCase tests (cachetools 8.0.1), two FAIL_TO_PASS
 */
export const TASK = {
  pkgTests: 'swerl__keyvals-comments',
  rootTests: 'swerl__durations-sign',
  rootModule: 'swerl__verspec-hash',
  srcLayout: 'swerl__intervals-touching',
  sdist: 'pytoolz__toolz-interpose',
  sdistSrc: 'tkem__cachetools-ttliter',
} as const;

/**
 * The tasks a bench measures: SWERL_TASKS=FILE, any SWE-bench-format tasks file with its images buildable here (a
 * larger set, e.g. the output of the task factory), or else the repository's own tasks.
 */
export async function benchTasks(): Promise<{ file: string; tasks: SweTask[] }> {
  const file = process.env.SWERL_TASKS ?? (await sweTasksFile());
  return { file, tasks: await loadTasksStrict(file) };
}

/**
 * Writes `dir/tasks.jsonl` holding task `id` alone, with its image named directly (`image`) and no source tarball,
 * so a worker uses that image and never builds one (a private engine, a tagged copy); returns the file.
 */
export async function singleTaskFile(dir: string, id: string, image: string): Promise<string> {
  const line = readFileSync(await sweTasksFile(), 'utf8')
    .split('\n')
    .find((l) => l.includes(`"${id}"`));
  if (!line) throw new Error(`no task ${id} in data/swe/tasks/`);
  const record = JSON.parse(line) as Record<string, unknown>;
  delete record.source_tarball;
  const file = join(dir, 'tasks.jsonl');
  writeFileSync(file, `${JSON.stringify({ ...record, image })}\n`);
  return file;
}
