// The task factory's speed (issue 28): `swerl tasks synth` on the 8 repositories of ../shared/swe-repos (a bench
// may read the team's shared data; a user gets the same by listing any repositories in that file's format:
// `repo`, `source_tarball` or `source` (pypi:NAME==VERSION), `test_cmd`, `package_dirs`). Runs the workflow on an
// embedded dev server with an in-process worker and prints validated tasks per minute and per CPU-minute (this
// process, the dev server and the sandboxes' cgroups), candidates tried, the rejection reasons, the strength
// distribution, per-repository figures and the host's load while it ran (the CPU is shared). Last line exactly
// `validated tasks: N in M min`. Goal: 300 from the 8 repositories within 45 minutes on 2 cores.
//   node --import tsx bench/synth.ts [--repos FILE] [--max 300] [--concurrency 2] [--out DIR] [--seed 0] [--strength-k 5] [--minutes M]
import { existsSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { startDevServer } from '../services/temporal-server.ts';
import { startWorkers } from '../workers/index.ts';
import { readReposFile, synthesize } from '../scripts/commands/tasks.ts';
import type { SynthResult } from '../lib/factory/shapes.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({
  options: {
    repos: { type: 'string' },
    max: { type: 'string', default: '300' },
    concurrency: { type: 'string', default: '2' },
    out: { type: 'string' },
    seed: { type: 'string', default: '0' },
    'strength-k': { type: 'string', default: '5' },
    /** a time budget: the run finishes with what it validated after this many minutes (default: none, it runs to --max) */
    minutes: { type: 'string' },
  },
});
const reposFile =
  values.repos ?? process.env.SWERL_SWE_REPOS ?? [resolve(ROOT, '../shared/swe-repos/repos.jsonl'), '/work/shared/swe-repos/repos.jsonl'].find((f) => existsSync(f));
if (!reposFile || !existsSync(reposFile)) throw new Error('no repositories file: give --repos FILE.jsonl (or set SWERL_SWE_REPOS)');
const out = resolve(values.out ?? join(ROOT, 'tmp', `bench-synth-${new Date().toISOString().replace(/[:.]/g, '-')}`));
const repos = readReposFile(reposFile);

/** utime + stime of a process, seconds (Linux /proc). */
function processCpu(pid: number): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}

Runtime.install({ logger: new DefaultLogger('WARN') });
const loads: number[] = [];
const sampler = setInterval(() => loads.push(loadavg()[0]!), 10_000);
const load0 = loadavg()[0]!;
const server = await startDevServer({ dir: join(out, '.work', 'temporal'), uiPort: null });
const workers = await startWorkers({ address: server.address, queues: ['learner', 'rollout'], learner: { threads: 1 } });
const cpu0 = process.cpuUsage();
const t0 = Date.now();
let r: SynthResult;
try {
  r = await synthesize({
    input: { repos, outDir: out, max: Number(values.max), concurrency: Number(values.concurrency), seed: Number(values.seed), strengthK: Number(values['strength-k']) },
    address: server.address,
    id: `bench-synth-${Date.now()}`,
    ...(values.minutes ? { minutes: Number(values.minutes) } : {}),
  });
} finally {
  clearInterval(sampler);
}
const minutes = (Date.now() - t0) / 60_000;
const cpu = process.cpuUsage(cpu0);
const serverCpu = processCpu(server.process.pid!);
await workers.shutdown();
await server.stop();

const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as {
  sandboxCpuSeconds: number;
  runs: number;
  repos: { name: string; error?: string; tests?: number; candidates?: number; tried: number; validated: { single: number; multi: number } }[];
  failedRepos: { repo: string; error: string }[];
};
const tasks = readFileSync(r.tasksFile, 'utf8')
  .trim()
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l) as { repo: string; tier: string; quality: { strength: { score: number | null }; failToPass: number; testSeconds: number } });
const cpuMinutes = (cpu.user / 1e6 + cpu.system / 1e6 + serverCpu + report.sandboxCpuSeconds) / 60;
const pct = (x: number, n: number) => `${n ? ((100 * x) / n).toFixed(1) : '0.0'}%`;

console.log(`\nrepositories: ${reposFile} (${repos.length}); output ${out}`);
console.log(
  `host load (1-min average, 2 cores shared with other work): ${load0.toFixed(1)} at start, mean ${(loads.reduce((a, b) => a + b, 0) / Math.max(1, loads.length)).toFixed(1)}, max ${Math.max(load0, ...loads).toFixed(1)}`,
);
console.log(`validated tasks: ${r.tasks} (${r.train} train, ${r.validation} validation: ${r.validationRepos.join(', ') || 'none'})`);
console.log(
  `per minute: ${(r.tasks / minutes).toFixed(2)}; per CPU-minute: ${(r.tasks / cpuMinutes).toFixed(2)} (CPU ${cpuMinutes.toFixed(1)} min: sandboxes ${(report.sandboxCpuSeconds / 60).toFixed(1)}, worker ${((cpu.user + cpu.system) / 6e7).toFixed(1)}, server ${(serverCpu / 60).toFixed(1)})`,
);
console.log(
  `candidates tried: ${r.tried} (${report.runs} test runs); rejected: ${
    Object.entries(r.rejected)
      .map(([k, n]) => `${k} ${n} (${pct(n ?? 0, r.tried)})`)
      .join(', ') || 'none'
  }`,
);
const buckets = new Map<string, number>();
for (const t of tasks) {
  const s = t.quality.strength.score;
  const b = s === null ? 'unmeasured' : s === 1 ? '1.0' : `${(Math.floor(s * 5) / 5).toFixed(1)}–${(Math.floor(s * 5) / 5 + 0.2).toFixed(1)}`;
  buckets.set(b, (buckets.get(b) ?? 0) + 1);
}
console.log(
  `strength: ${[...buckets.entries()]
    .sort()
    .map(([b, n]) => `${b}: ${n}`)
    .join(', ')}; strong (≥ 0.8) ${tasks.filter((t) => (t.quality.strength.score ?? -1) >= 0.8).length} of ${tasks.length}`,
);
console.log('repository                       tests  candidates  tried  valid 1/multi  tasks  test s');
for (const rep of report.repos) {
  const mine = tasks.filter((t) => t.repo === rep.name);
  console.log(
    `${rep.name.padEnd(32).slice(0, 32)} ${String(rep.tests ?? '-').padStart(5)}  ${String(rep.candidates ?? '-').padStart(10)}  ${String(rep.tried).padStart(5)}  ${`${rep.validated.single}/${rep.validated.multi}`.padStart(13)}  ${String(mine.length).padStart(5)}  ${mine[0] ? mine[0].quality.testSeconds.toFixed(1).padStart(6) : '     -'}${rep.error ? `  left out: ${rep.error.slice(0, 200)}` : ''}`,
  );
}
console.log(`validated tasks: ${r.tasks} in ${minutes.toFixed(1)} min`);
