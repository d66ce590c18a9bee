// Docker test helpers: task images (built once, cached by recipe hash), a backend whose containers carry a
// per-process label so a test file cleans up after itself. The tasks themselves: test/helpers/swe-tasks.ts.
import Docker from 'dockerode';
import { DockerBackend, removeSandboxContainers } from '../../activities/sandbox/docker.ts';
import { buildImages, ensureTaskImage } from '../../activities/images.ts';
import type { SweTask } from '../../lib/swe/task.ts';

/** Fails with what to do when no engine answers (scripts/setup.sh --test starts one). */
export async function requireDocker(): Promise<void> {
  try {
    await new Docker().ping();
  } catch (e) {
    throw new Error(`no Docker engine (${(e as Error).message}): run \`bash scripts/setup.sh --test\` (scripts/ensure-docker.sh) first`);
  }
}

/** Builds what is missing (the base image takes about a minute and a half the first time). */
export async function imagesFor(tasks: SweTask[]): Promise<string[]> {
  await buildImages(tasks);
  return Promise.all(tasks.map(async (t) => (await ensureTaskImage(t)).image));
}

/** A backend labelled with this test process; `cleanup()` removes whatever it left. */
export function testBackend(): { backend: DockerBackend; cleanup: () => Promise<number> } {
  const labels = { 'swerl.test': String(process.pid) };
  return { backend: new DockerBackend({ labels }), cleanup: () => removeSandboxContainers({ labels }) };
}
