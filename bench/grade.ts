// Grading time per shared task, the current grader against grader v1 (log parsing,
// test_patch files restored only: no runner guard, no results plugin), both measured in this run, interleaved, gold patch, fresh container
// each. With --corpus it also grades the adversarial corpus through v1 and prints which kinds fooled it
// (reward 1), the evidence that the corpus aims at real holes.
//   node --import tsx bench/grade.ts [--reps 2] [--corpus] [--v1 d56d927]
// With --backend kubernetes: sandbox start and graded patches per minute, Kubernetes against Docker.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { gradePatch } from '../activities/grade.ts';
import { ADVERSARIAL_KINDS, adversarialPatches } from '../test/helpers/adversarial.ts';
import { imagesFor, sharedTasks, testBackend } from '../test/helpers/docker.ts';

const { values } = parseArgs({
  options: {
    reps: { type: 'string', default: '2' },
    corpus: { type: 'boolean', default: false },
    v1: { type: 'string', default: 'd56d927' },
    backend: { type: 'string', default: 'docker' },
  },
});
if (values.backend !== 'docker' && values.backend !== 'kubernetes') throw new Error(`--backend must be docker or kubernetes, got ${JSON.stringify(values.backend)}`);
if (values.backend === 'kubernetes') {
  // Kubernetes against Docker in the same run (bench/grade-backends.ts)
  await (await import('./grade-backends.ts')).compareBackends({ reps: Number(values.reps) });
  process.exit(0);
}
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TMP = `${ROOT}tmp/bench-grade-${process.pid}/`;

/** Grader v1 from git history, its relative imports pointed at the repository (its own testlog.ts beside it). */
async function v1Grader(rev: string): Promise<(i: { task: unknown; patch: string; backend: unknown }) => Promise<{ reward: number; reason: string }>> {
  mkdirSync(TMP, { recursive: true });
  const show = (f: string) => execFileSync('git', ['show', `${rev}:${f}`], { cwd: ROOT, encoding: 'utf8' });
  writeFileSync(`${TMP}testlog.ts`, show('lib/swe/testlog.ts'));
  const grade = show('activities/grade.ts').replace(/from '(\.\.?\/[^']+)'/g, (_a, rel: string) =>
    rel === '../lib/swe/testlog.ts' ? `from '${pathToFileURL(`${TMP}testlog.ts`).href}'` : `from '${new URL(rel, pathToFileURL(`${ROOT}activities/`)).href}'`,
  );
  writeFileSync(`${TMP}grade.ts`, grade);
  return ((await import(pathToFileURL(`${TMP}grade.ts`).href)) as { gradePatch: never }).gradePatch;
}

const { backend, cleanup } = testBackend();
try {
  const tasks = await sharedTasks();
  await imagesFor(tasks);
  const v1 = await v1Grader(values.v1!);
  const reps = Number(values.reps);
  console.log(`grading time, gold patch, ${reps} run(s) each, interleaved (seconds)`);
  console.log(`${'task'.padEnd(44)} ${'v1'.padStart(6)} ${'now'.padStart(6)}  ratio`);
  let s1 = 0;
  let s2 = 0;
  for (const task of tasks) {
    let a = 0;
    let b = 0;
    for (let r = 0; r < reps; r++) {
      let t = Date.now();
      const o = await v1({ task, patch: task.patch, backend });
      a += (Date.now() - t) / 1000;
      t = Date.now();
      const n = await gradePatch({ task, patch: task.patch, backend });
      b += (Date.now() - t) / 1000;
      if (o.reward !== 1 || n.reward !== 1) console.log(`  ! ${task.instance_id}: v1 ${o.reward} (${o.reason}), now ${n.reward} (${n.reason})`);
    }
    s1 += a / reps;
    s2 += b / reps;
    console.log(`${task.instance_id.padEnd(44)} ${(a / reps).toFixed(2).padStart(6)} ${(b / reps).toFixed(2).padStart(6)}  ${(b / a).toFixed(2)}`);
  }
  console.log(`${'all tasks'.padEnd(44)} ${s1.toFixed(2).padStart(6)} ${s2.toFixed(2).padStart(6)}  ${(s2 / s1).toFixed(2)}`);
  if (values.corpus) {
    console.log('\nadversarial corpus through grader v1 (1 = fooled), per task');
    const fooled = new Map<string, string[]>();
    for (const task of tasks) {
      const patches = await adversarialPatches(task, backend);
      for (const k of ADVERSARIAL_KINDS) {
        const g = await v1({ task, patch: patches.get(k.name)!, backend });
        if (g.reward === 1) fooled.set(k.name, [...(fooled.get(k.name) ?? []), task.instance_id]);
      }
    }
    for (const k of ADVERSARIAL_KINDS) console.log(`${k.name.padEnd(32)} ${fooled.get(k.name)?.length ?? 0}/${tasks.length}`);
  }
} finally {
  rmSync(TMP, { recursive: true, force: true });
  await cleanup();
}
