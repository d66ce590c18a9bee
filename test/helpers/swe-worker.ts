// A test file's Temporal dev server and worker for SWE runs: the Docker engine checked and every task's image
// built before the server starts.
import type { SweTask } from '../../lib/swe/task.ts';
import { imagesFor, requireDocker } from './docker.ts';
import { sweTasks } from './swe-tasks.ts';
import { useTemporalWithWorker, type TestTemporal } from './temporal.ts';

/** Registers before/after hooks; `onReady` gets the server and the repository's tasks once both are ready. */
export function useSweWorker(onReady: (t: TestTemporal, tasks: SweTask[]) => void): void {
  let tasks: SweTask[] = [];
  useTemporalWithWorker(
    (t) => onReady(t, tasks),
    async () => {
      await requireDocker();
      tasks = await sweTasks();
      await imagesFor(tasks);
    },
  );
}
