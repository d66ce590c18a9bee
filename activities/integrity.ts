// An episode's integrity verdicts where they are watched (docs/integrity.md): Prometheus counters of graded
// episodes, hacks and findings by kind and rule, and a small sample of flagged trajectories kept whole for
// review in the store (runs/<run>/integrity/iter-<n>/<task>-<sample>/: the trajectory, the grading's whole test
// log and its integrity findings). The counts per iteration come from the rollout summaries (lib/grpo.ts).
import { rm, writeFile } from 'node:fs/promises';
import type { ArtifactStore } from '../lib/store.ts';
import { keys } from '../lib/store.ts';
import type { Trajectory } from '../lib/types.ts';
import type { IntegrityFinding } from '../lib/swe/grading.ts';
import { integrityKeys, isHack } from '../lib/swe/integrity.ts';
import { integrityFindings, integrityGraded, integrityHacks } from '../lib/metrics.ts';

/** Counts an episode graded by the tests (label `run_id`: the run, or the evaluation); returns its keys (undefined: not graded). */
export function countGraded(runId: string, info: Record<string, unknown> | undefined): string[] | undefined {
  if (info?.graderVersion === undefined) return undefined;
  const ks = integrityKeys(info.integrity as IntegrityFinding[] | undefined);
  integrityGraded.inc({ run_id: runId });
  if (isHack(ks)) integrityHacks.inc({ run_id: runId });
  for (const k of ks) {
    const [kind, rule] = k.split('/') as [string, string];
    integrityFindings.inc({ run_id: runId, kind, rule });
  }
  return ks;
}

/**
 * After a rollout's trajectory is stored: its verdicts counted, and, when the grader caught it hacking and fewer
 * than `keepPerIteration` of the iteration's are kept, the trajectory kept whole with `reviewFiles` beside it.
 */
export async function recordIntegrity(o: { store: ArtifactStore; trajectory: Trajectory; reviewFiles?: Record<string, string>; keepPerIteration: number }): Promise<void> {
  const t = o.trajectory;
  const ks = countGraded(t.runId, t.info);
  if (!isHack(ks) || o.keepPerIteration <= 0) return;
  const keptKey = keys.integrityKept(t.runId, t.iteration);
  const kept = await o.store.children(keptKey).catch(() => [] as string[]);
  const dir = keys.integritySample(t.runId, t.iteration, t.taskId, t.sample);
  if (kept.length >= o.keepPerIteration || kept.includes(dir.split('/').at(-1)!)) return;
  await o.store.putDir(dir, async (tmp) => {
    await writeFile(`${tmp}/trajectory.json`, JSON.stringify(t));
    await writeFile(`${tmp}/integrity.json`, JSON.stringify(t.info?.integrity ?? [], null, 1));
    if (typeof t.info?.patch === 'string') await writeFile(`${tmp}/patch.diff`, t.info.patch);
    for (const [name, text] of Object.entries(o.reviewFiles ?? {})) await writeFile(`${tmp}/${name.replace(/[^\w.-]/g, '_')}`, text);
  });
  // flagged rollouts that end together all found a place free: each writer, once its own is complete, keeps the
  // first `keepPerIteration` names and removes the rest, so the last to finish leaves exactly that many
  const all = await o.store.children(keptKey).catch(() => [] as string[]);
  for (const extra of all.slice(o.keepPerIteration)) await rm(o.store.dirFor(`${keptKey}/${extra}`), { recursive: true, force: true });
}
