// The CUDA backend's own sources (gpu-learner/src/cuda) run on the CPU by gl-emu, the test-only CUDA emulator
// (gpu-learner/emu), and held to the CPU engine: exact mode (bf16 storage as fp32: differences are maths only),
// bf16 mode (rounded as the GPU stores bf16), reverse order, AddressSanitizer, a dry run at full scale, the
// review findings' regression checks and the mutants (planted bugs that must make a check fail).
// Tolerances and their derivation: gpu-learner/tools/gpu_driver.cpp (tolerances()) and docs/cuda.md.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';

import { buildEmu } from '../../gpu-learner/emu/build.ts';
import {
  CONFIGS,
  MANY_SEQS,
  Workdir,
  compare,
  failure,
  inPool,
  leaks,
  mutants,
  rejectTooLong,
  run,
  runMutant,
  shape,
  table,
  type CompareRun,
} from '../../gpu-learner/emu/harness.ts';
import { BASELINE, currentReport, newSpills, table as kernelTable } from '../../scripts/cuda-kernel-report.ts';

let w: Workdir;
// each mode's comparisons run once, by whichever test asks first: every test runs alone by name too
const modes = new Map<'exact' | 'bf16', Promise<CompareRun[]>>();
const modeRuns = (mode: 'exact' | 'bf16'): Promise<CompareRun[]> => {
  if (!modes.has(mode)) modes.set(mode, inPool(CONFIGS.map((c) => () => compare(w, c, mode))));
  return modes.get(mode)!;
};
const get = async (config: string, mode: 'exact' | 'bf16') => (await modeRuns(mode)).find((r) => r.config === config && r.label === mode)!;
const explain = (r: CompareRun) => `${r.config} ${r.label}: ${failure(r)}\n${r.stdout.slice(-3000)}${r.stderr.slice(-3000)}`;

before(() => {
  buildEmu({ mutants: true }); // content-hash cached: nothing runs when the inputs are unchanged
  w = new Workdir();
});
after(() => w?.remove());

test('gl-emu self-test: launch limits, divergence, deadlock, canaries, NaN fill, copy and GEMM bounds, cuBLAS rules, bf16 rounding', async () => {
  const r = await run('gl_emu_selftest', []);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /SELFTEST PASS/);
});

test('exact mode: the CUDA engine equals the CPU engine within 1e-5 on eight configs (Qwen3, Llama, Qwen2) (log-probs, loss, every gradient, 10 AdamW steps, generation)', async () => {
  const rs = await modeRuns('exact');
  console.log(table(rs));
  for (const r of rs) assert.ok(r.ok, explain(r));
  for (const r of rs) assert.equal(r.greedySame, r.generated, `${r.config}: greedy tokens identical in exact arithmetic`);
});

test('bf16 mode: within tolerances derived from bf16 rounding (docs/cuda.md)', async () => {
  const rs = await modeRuns('bf16');
  console.log(table(rs));
  for (const r of rs) assert.ok(r.ok, explain(r));
  // bf16 differs from fp32, exact does not: the modes are what they claim
  for (const c of CONFIGS) assert.ok((await get(c.name, 'bf16')).digest !== (await get(c.name, 'exact')).digest, c.name);
});

test('reverse order on two threads gives the same bytes as forward order on one (atomics applied in a fixed order)', async () => {
  const fwd = await get(CONFIGS[0].name, 'bf16');
  const rev = await compare(w, CONFIGS[0], 'bf16', { env: { GL_EMU_ORDER: 'reverse', GL_EMU_THREADS: '2' }, label: 'bf16 reverse' });
  assert.ok(rev.ok, explain(rev));
  assert.ok(fwd.digest && rev.digest === fwd.digest, `digests ${rev.digest} vs ${fwd.digest}`);
});

test('AddressSanitizer build: a packed batch with 200 empty sequences, bias and a tied head runs clean', async () => {
  const r = await compare(w, CONFIGS[2], 'asan', { extra: ['--steps', '2'], label: 'bf16 ASan' });
  assert.ok(r.ok, explain(r));
  assert.doesNotMatch(r.stderr, /AddressSanitizer/);
});

test('finding 1: 3 tokens and 200 empty sequences (offsets sized by sequences, not tokens)', async () => {
  for (const v of ['exact', 'bf16'] as const) assert.ok((await get('mha-d64-tied-bias', v)).ok);
  assert.match(CONFIGS[2].compare.join(' '), /3,0\*200/);
});

test('finding 2: a micro-batch of only empty sequences on a fresh engine is skipped like the CPU engine', async () => {
  // mqa-d8-tied-grpo trains first (micro-batches of 32 tokens: [0,0] then [40] then [5,0,1]), then computes log-probs
  for (const v of ['exact', 'bf16'] as const) assert.ok((await get('mqa-d8-tied-grpo', v)).ok);
});

test('finding 3: a sequence longer than max_position_embeddings is refused by both engines with the same message', async () => {
  const r = await rejectTooLong(w);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /sequence 1 has 65 tokens, more than max_position_embeddings=64/);
});

test('finding 4: 65,613 sequences in one micro-batch (attention launched in slices of 65,535)', async () => {
  const r = await compare(w, MANY_SEQS, 'exact');
  assert.ok(r.ok, explain(r));
  assert.equal(r.stats!.kernels['attn_fwd_kernel<DPL>'].launches % 2, 0, 'two slices per attention pass');
});

test('finding 5: constructors that throw while loading release the stream, the cuBLAS handle and all memory', async () => {
  const r = await leaks(w);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /after 3 failed loads: 0 streams, 0 cuBLAS handles, 0 allocations/);
});

test('finding 6: tied heads at a real embedding scale pass bf16 with tolerances scaled by the logit scale', async () => {
  for (const c of CONFIGS.filter((x) => x.tiny.includes('--tied'))) {
    const r = await get(c.name, 'bf16');
    assert.ok(r.ok && r.logitScale! < 0.5, `${c.name}: logit scale ${r.logitScale}`);
  }
});

test('finding 7: backward recomputes every layer but the last ((2L−1) attention-forward launches per pass)', async () => {
  for (const r of [...(await modeRuns('exact')), ...(await modeRuns('bf16'))]) {
    const c = r.checks.find((x) => x.what.startsWith('attention-forward launches'));
    assert.ok(c?.pass, `${r.config} ${r.label}`);
  }
});

test('dry run at Qwen3-0.6B with one 32K-token sequence: every launch, copy and GEMM validated, nothing computed', async () => {
  const r = await shape(w);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const rep = r.report!;
  assert.ok(rep.dry && rep.peak_gib > 10 && rep.peak_gib < 80, `peak ${rep.peak_gib} GiB`);
  const kernels = Object.values(rep.emu.kernels);
  assert.ok(kernels.length >= 15 && rep.emu.gemms > 500 && rep.emu.memcpys > 0, 'launches, GEMMs and copies validated');
  assert.ok(kernels.every((k) => k.seconds === 0) && rep.emu.gemm_seconds === 0, 'no kernel or GEMM computed');
});

test('mutants: each planted bug (GEMM transpose / leading dimension, causal mask, GQA map, barrier, LM-head chunk, Qwen2 bias, RoPE-only backward, undone fixes) fails a check', async () => {
  const ms = await inPool(mutants().map((m) => () => runMutant(w, m)));
  for (const m of ms) console.log(`${m.name.padEnd(30)} ${m.caught ? 'caught by' : 'NOT CAUGHT:'} ${m.by}`);
  for (const m of ms) assert.ok(m.caught, `mutant ${m.name} (${m.why}) was not caught`);
});

test('compile-time facts for sm_90 (ptxas -v): registers and spills per kernel, no kernel spilling more than recorded', (t) => {
  // the record when it is for these kernel sources, else ptxas (cached by sources and nvcc version)
  const cur = currentReport();
  if (!cur) return t.skip('kernel sources changed and no nvcc (bash scripts/ensure-cuda-toolchain.sh --compiler installs one)');
  const report = cur.report;
  console.log(`${report.nvcc} (${cur.how})\n${kernelTable(report)}`);
  assert.ok(report.kernels.length >= 30 && report.kernels.every((k) => k.registers > 0), 'every kernel reported');
  assert.deepEqual(
    newSpills(report, JSON.parse(readFileSync(BASELINE, 'utf8'))),
    [],
    'a kernel spills more than gpu-learner/src/cuda/kernel-resources.json records (intended? node --import tsx scripts/cuda-kernel-report.ts --update)',
  );
});
