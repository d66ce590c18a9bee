// npm run check:cuda-emu — the CUDA engine's own sources run on the CPU by gl-emu (gpu-learner/emu) and held to the
// CPU engine: every config in exact and bf16 mode, reverse order, AddressSanitizer, the dry run at Qwen3-0.6B with
// one 32K-token sequence, the review findings' regression checks, the mutants and (with nvcc) the kernels'
// registers and spills. Prints a table per part; exits
// non-zero when anything is off. The same checks run in `npm test` (test/cpu-heavy/cuda-emu.test.ts).
import { readFileSync } from 'node:fs';

import { buildEmu } from '../gpu-learner/emu/build.ts';
import { CONFIGS, MANY_SEQS, Workdir, compare, failure, inPool, leaks, mutants, rejectTooLong, run, runMutant, shape, table, type CompareRun } from '../gpu-learner/emu/harness.ts';
import { BASELINE, currentReport, newSpills, table as kernelTable } from './cuda-kernel-report.ts';

const t0 = Date.now();
let bad = 0;
const note = (ok: boolean, what: string) => {
  if (!ok) bad++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
};

const b = buildEmu({ mutants: true });
console.log(`gl-emu build: ${b.built ? `built in ${b.seconds.toFixed(1)} s` : 'cached (inputs unchanged)'}`);
const w = new Workdir();
try {
  const self = await run('gl_emu_selftest', []);
  note(self.status === 0, `emulator self-test: ${self.stdout.trim().split('\n').slice(-2, -1)[0] ?? ''}`);

  const runs = await inPool(CONFIGS.flatMap((c) => (['exact', 'bf16'] as const).map((v) => () => compare(w, c, v))));
  const gqa2 = runs.find((r) => r.config === CONFIGS[0].name && r.variant === 'bf16')!;
  const extra: CompareRun[] = await inPool([
    () => compare(w, CONFIGS[0], 'bf16', { env: { GL_EMU_ORDER: 'reverse', GL_EMU_THREADS: '2' }, label: 'bf16 reverse' }),
    () => compare(w, CONFIGS[2], 'asan', { extra: ['--steps', '2'], label: 'bf16 ASan' }),
    () => compare(w, MANY_SEQS, 'exact'),
  ]);
  console.log('\nCUDA engine (gl-emu) vs CPU engine: largest difference / tolerance per kind\n');
  console.log(table([...runs, ...extra]));
  for (const r of [...runs, ...extra]) note(r.ok, `${r.config} ${r.label}`);
  note(extra[0].digest === gqa2.digest && !!gqa2.digest, `reverse order, 2 threads gives the same bytes as forward order, 1 thread (${extra[0].digest} vs ${gqa2.digest})`);

  const [lk, rj, dry] = await Promise.all([leaks(w), rejectTooLong(w), shape(w)]);
  note(lk.status === 0, `finding 5, constructor failures leak nothing: ${lk.stdout.trim().split('\n').slice(1, 2)[0] ?? failure(lk)}`);
  note(rj.status === 0, `finding 3, too-long sequence refused alike: ${rj.stdout.split('\n')[0]}`);
  note(dry.status === 0, `dry run: ${dry.stdout.trim().split('\n')[0] ?? failure(dry)}`);

  console.log('\nmutants (each must make a check fail)\n');
  const ms = await inPool(mutants().map((m) => () => runMutant(w, m)));
  for (const m of ms) note(m.caught, `${m.name.padEnd(30)} ${m.caught ? 'caught by' : 'NOT caught:'} ${m.by}`);
  console.log(`\n${ms.filter((m) => m.caught).length} of ${ms.length} mutants caught; ${((Date.now() - t0) / 1000).toFixed(0)} s in all`);
  const cur = currentReport();
  if (cur) {
    const report = cur.report;
    console.log(`\ncompile-time facts, ${report.arch} (${report.nvcc}; ${cur.how})\n${kernelTable(report)}\n`);
    const worse = newSpills(report, JSON.parse(readFileSync(BASELINE, 'utf8')));
    note(!worse.length, `no kernel spills more than gpu-learner/src/cuda/kernel-resources.json records${worse.length ? `: ${worse.join('; ')}` : ''}`);
  } else {
    console.log('\n(kernel sources changed and no nvcc: register/spill report skipped; bash scripts/ensure-cuda-toolchain.sh --compiler)');
  }
} finally {
  w.remove();
}
console.log(bad ? `\ncheck:cuda-emu FAILED (${bad})` : '\ncheck:cuda-emu passed');
process.exit(bad ? 1 : 0);
