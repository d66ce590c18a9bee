// Grading time per task with this grader (swerl-grader/4: the audit, the plugin's checks, copy and
// answer-mutant canaries) against a baseline measured in the same run, interleaved, gold patch, fresh
// container each: by default swerl-grader/3 from git (--v3 REV), or this grader with its integrity checks off
// (--baseline off). Reported as wall time and as the CPU time of the grading container (cgroup usage, steadier
// on a shared host); the target is at most 10% over swerl-grader/3. The answer-mutants are verified once per task
// and cached (activities/canary-mutants.ts): that one-time cost is timed apart, before the measured runs.
// With --corpus it grades the adversarial corpus (test/helpers/adversarial.ts) with this grader and with grader v2
// (before the test-integrity checks, from git) and prints each kind's verdicts: the evidence that the corpus aims
// at real holes and that this grader closes them.
//   node --import tsx bench/grade.ts [--reps 3] [--baseline v3|off] [--v3 d47c4af] [--corpus [--kinds runner|integrity]] [--v2 f28da59] [--concurrency 3]
// With --backend kubernetes: sandbox start and graded patches per minute, Kubernetes against Docker [--reps 2].
// Tasks: the repository's (data/swe/), or SWERL_TASKS=FILE for any other SWE-bench-format set (test/helpers/swe-tasks.ts).
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import Docker from 'dockerode';
import { gradePatch } from '../activities/grade.ts';
import type { Sandbox, SandboxBackend } from '../lib/sandbox.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { ADVERSARIAL_KINDS, adversarialPatches, withIdsCmd } from '../test/helpers/adversarial.ts';
import { imagesFor, testBackend } from '../test/helpers/docker.ts';
import { benchTasks } from '../test/helpers/swe-tasks.ts';
import { mapInLanes } from '../lib/pool.ts';
import { mutantVerification } from '../activities/canary-mutants.ts';
import { loadavg } from 'node:os';

const { values } = parseArgs({
  options: {
    /** repetitions per task (default 3; with --backend kubernetes, 2) */
    reps: { type: 'string' },
    corpus: { type: 'boolean', default: false },
    /** with --corpus, only the runner-file kinds or only the test-integrity kinds */
    kinds: { type: 'string' },
    v2: { type: 'string', default: 'f28da59' },
    /** the swerl-grader/3 commit the default baseline is built from */
    v3: { type: 'string', default: 'd47c4af' },
    baseline: { type: 'string', default: 'v3' },
    concurrency: { type: 'string', default: '3' },
    backend: { type: 'string', default: 'docker' },
  },
});
if (values.backend !== 'docker' && values.backend !== 'kubernetes') throw new Error(`--backend must be docker or kubernetes, got ${JSON.stringify(values.backend)}`);
if (values.backend === 'kubernetes') {
  // Kubernetes against Docker in the same run (bench/grade-backends.ts)
  await (await import('./grade-backends.ts')).compareBackends({ reps: Number(values.reps ?? 2) });
  process.exit(0);
}
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TMP = `${ROOT}tmp/bench-grade-${process.pid}/`;
type Grade = (i: { task: SweTask; patch: string; backend: SandboxBackend }) => Promise<{ reward: number; reason: string }>;

/** Imports of grader v2 whose module has moved since: `import { name } from 'old file'` → the file that exports it now. */
const MOVED: Record<string, Record<string, string>> = {
  'activities/sandbox/common.ts': { shq: 'lib/shell.ts' },
  'activities/metrics.ts': { gradingSeconds: 'lib/metrics.ts' },
};

/** A grader from git history (v2, v3): its files copied under tmp/REV/, their relative imports pointed at the copies or the repository. */
async function gitGrader(rev: string): Promise<Grade> {
  const files = [
    'activities/grade.ts',
    'activities/swerl_pytest_results.py',
    'lib/swe/runner-guard.ts',
    'lib/swe/pytest-results.ts',
    'lib/swe/grading.ts',
    'lib/swe/testlog.ts',
    'lib/swe/canaries.ts',
  ];
  const exists = (f: string) => {
    try {
      execFileSync('git', ['cat-file', '-e', `${rev}:${f}`], { cwd: ROOT, stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  const local = (f: string) => `${TMP}${rev}/${f.replaceAll('/', '__')}`;
  mkdirSync(`${TMP}${rev}`, { recursive: true });
  for (const f of files) {
    if (!exists(f)) continue;
    let text = execFileSync('git', ['show', `${rev}:${f}`], { cwd: ROOT, encoding: 'utf8' });
    const dir = f.slice(0, f.lastIndexOf('/') + 1);
    text = text.replace(/import \{ (\w+) \} from '(\.\.?\/[^']+)'/g, (all, name: string, rel: string) => {
      const moved = MOVED[new URL(rel, pathToFileURL(ROOT + dir)).pathname.slice(ROOT.length)]?.[name];
      return moved ? `import { ${name} } from '${pathToFileURL(ROOT + moved).href}'` : all;
    });
    text = text.replace(/(from |new URL\()'(\.\.?\/[^']+)'/g, (_a, pre: string, rel: string) => {
      const target = new URL(rel, pathToFileURL(ROOT + dir)).pathname.slice(ROOT.length);
      return `${pre}'${files.includes(target) && exists(target) ? pathToFileURL(local(target)).href : pathToFileURL(ROOT + target).href}'`;
    });
    writeFileSync(local(f), text);
  }
  return ((await import(pathToFileURL(local('activities/grade.ts')).href)) as { gradePatch: Grade }).gradePatch;
}

/** The backend, with each sandbox's CPU time (ns, from the cgroup) recorded by label just before it stops. */
function cpuMetered(backend: SandboxBackend): { backend: SandboxBackend; cpu: Map<string, number> } {
  const cpu = new Map<string, number>();
  const docker = new Docker();
  return {
    cpu,
    backend: {
      ...backend,
      name: backend.name,
      start: async (image, limits, labels) => {
        const sb = await backend.start(image, limits, labels);
        const wrapped: Sandbox = Object.create(sb) as Sandbox;
        wrapped.stop = async () => {
          const tag = labels?.['swerl.bench'];
          if (tag) {
            const s = (await docker
              .getContainer(sb.id)
              .stats({ stream: false })
              .catch(() => undefined)) as { cpu_stats?: { cpu_usage?: { total_usage?: number } } } | undefined;
            cpu.set(tag, s?.cpu_stats?.cpu_usage?.total_usage ?? NaN);
          }
          return sb.stop();
        };
        return wrapped;
      },
    },
  };
}

/**
 * This grader against the baseline, gold patches, interleaved: median wall and container CPU per task, totals
 * and the ratio (target ≤ 10% over swerl-grader/3).
 */
async function overhead(tasks: SweTask[], reps: number): Promise<void> {
  if (values.baseline !== 'v3' && values.baseline !== 'off') throw new Error(`--baseline: expected v3 or off, got ${JSON.stringify(values.baseline)}`);
  const { backend, cpu } = cpuMetered(plain);
  const base: Grade = values.baseline === 'v3' ? await gitGrader(values.v3!) : (i) => gradePatch({ ...i, integrity: false });
  const label = values.baseline === 'v3' ? `swerl-grader/3 (${values.v3})` : 'this grader, checks off';
  // the answer-mutants of each task verified once (cached): timed apart
  for (const task of tasks) {
    const t = Date.now();
    const v = await mutantVerification(task, plain);
    console.log(
      `answer-mutants of ${task.instance_id}: ${v.mutants.length} of ${v.candidates} candidates verified in ${((Date.now() - t) / 1000).toFixed(1)} s (once per task and host)`,
    );
  }
  const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
  console.log(`\ngrading time, gold patch, ${reps} run(s) each, ${label} (base) and swerl-grader/4 (now) interleaved (median wall s; median container CPU s)`);
  console.log(`${'task'.padEnd(44)} ${'base'.padStart(6)} ${'now'.padStart(6)} ${'ratio'.padStart(6)}   ${'cpu base'.padStart(8)} ${'cpu now'.padStart(7)} ${'ratio'.padStart(6)}`);
  const tot = { off: 0, on: 0, coff: 0, con: 0 };
  let n = 0;
  for (const task of tasks) {
    const wall: Record<'off' | 'on', number[]> = { off: [], on: [] };
    const cpus: Record<'off' | 'on', number[]> = { off: [], on: [] };
    for (let r = 0; r < reps; r++) {
      for (const mode of (r % 2 ? ['on', 'off'] : ['off', 'on']) as ('off' | 'on')[]) {
        const tag = `bench-${n++}`;
        const start = backend.start.bind(backend);
        const tagged: SandboxBackend = { ...backend, start: (i, l, lab) => start(i, l, { ...lab, 'swerl.bench': tag }) };
        const t = Date.now();
        const g = await (mode === 'on' ? gradePatch({ task, patch: task.patch, backend: tagged }) : base({ task, patch: task.patch, backend: tagged }));
        wall[mode].push((Date.now() - t) / 1000);
        cpus[mode].push((cpu.get(tag) ?? NaN) / 1e9);
        if (g.reward !== 1) console.log(`  ! ${task.instance_id} (${mode === 'on' ? 'now' : 'base'}): ${g.reward} ${g.reason}`);
      }
    }
    const w = { off: median(wall.off), on: median(wall.on) };
    const c = { off: median(cpus.off), on: median(cpus.on) };
    tot.off += w.off;
    tot.on += w.on;
    tot.coff += c.off;
    tot.con += c.on;
    console.log(
      `${task.instance_id.padEnd(44)} ${w.off.toFixed(2).padStart(6)} ${w.on.toFixed(2).padStart(6)} ${(w.on / w.off).toFixed(2).padStart(6)}   ${c.off.toFixed(2).padStart(8)} ${c.on.toFixed(2).padStart(7)} ${(c.on / c.off).toFixed(2).padStart(6)}`,
    );
  }
  console.log(
    `${'all tasks'.padEnd(44)} ${tot.off.toFixed(2).padStart(6)} ${tot.on.toFixed(2).padStart(6)} ${(tot.on / tot.off).toFixed(2).padStart(6)}   ${tot.coff.toFixed(2).padStart(8)} ${tot.con.toFixed(2).padStart(7)} ${(tot.con / tot.coff).toFixed(2).padStart(6)}`,
  );
  console.log(
    `swerl-grader/4 costs ${((tot.on / tot.off - 1) * 100).toFixed(1)}% of grading wall time over ${label}, ${((tot.con / tot.coff - 1) * 100).toFixed(1)}% of its CPU time (target: ≤ 10%; load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')})`,
  );
}

/** runs `jobs`, at most `n` at once (lib/pool.ts) */
const pool = <T>(jobs: (() => Promise<T>)[], n: number): Promise<T[]> => mapInLanes(jobs, n, (job) => job());

const { backend: plain, cleanup } = testBackend();
try {
  const { tasks } = await benchTasks();
  await imagesFor(tasks);
  const reps = Number(values.reps ?? 3);
  if (reps > 0) await overhead(tasks, reps);
  if (values.corpus) {
    const v2 = await gitGrader(values.v2!);
    console.log(`\nadversarial corpus: rewards per kind on ${tasks.length} tasks, grader v2 (${values.v2}) and this grader (n/${tasks.length} = fooled on n tasks)`);
    if (values.kinds !== undefined && values.kinds !== 'runner' && values.kinds !== 'integrity')
      throw new Error(`--kinds: expected runner or integrity, got ${JSON.stringify(values.kinds)}`);
    const kinds = ADVERSARIAL_KINDS.filter((k) => !values.kinds || (values.kinds === 'integrity') === !!k.category);
    const rows = new Map<string, { v2: number; now: number; reasons: Map<string, number> }>();
    const jobs: (() => Promise<void>)[] = [];
    for (const task of tasks) {
      const patches = await adversarialPatches(task, plain, kinds);
      for (const k of kinds) {
        const t = k.testCmd === 'ids' ? withIdsCmd(task) : task;
        const row = rows.get(k.name) ?? { v2: 0, now: 0, reasons: new Map() };
        rows.set(k.name, row);
        jobs.push(async () => {
          const [a, b] = await Promise.all([v2({ task: t, patch: patches.get(k.name)!, backend: plain }), gradePatch({ task: t, patch: patches.get(k.name)!, backend: plain })]);
          row.v2 += a.reward;
          row.now += b.reward;
          row.reasons.set(b.reason, (row.reasons.get(b.reason) ?? 0) + 1);
        });
      }
    }
    await pool(jobs, Number(values.concurrency));
    console.log(`${'kind'.padEnd(38)} ${'class'.padEnd(11)} ${'v2'.padStart(5)} ${'now'.padStart(5)}  verdicts now`);
    for (const k of kinds) {
      const r = rows.get(k.name)!;
      const cls = k.category ? `integrity/${k.category === 'variant' ? 'v' : k.category}` : 'runner';
      console.log(
        `${k.name.padEnd(38)} ${cls.padEnd(11)} ${`${r.v2}/${tasks.length}`.padStart(5)} ${`${r.now}/${tasks.length}`.padStart(5)}  ${[...r.reasons].map(([x, c]) => `${x} ×${c}`).join(', ')}`,
      );
    }
  }
} finally {
  rmSync(TMP, { recursive: true, force: true });
  await cleanup();
}
