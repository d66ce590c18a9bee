// The emulated CUDA-vs-CPU checks, shared by test/cpu-heavy/cuda-emu.test.ts and `npm run check:cuda-emu`: tiny configs,
// runs of the gl-emu drivers (gpu-learner/tools/gpu_driver.cpp built against the emulator), the mutants, tables.
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { BUILD_DIR, mutantSpecs, type MutantSpec } from './build.ts';

export type Variant = 'bf16' | 'exact' | 'asan';

export interface EmuConfig {
  name: string;
  /** gpu_driver tiny options (vocab 97, hidden 64, intermediate 96, 2 layers unless given) */
  tiny: string[];
  /** gpu_driver compare options (10 AdamW steps, 8 generated tokens; micro-batches of 32 tokens here) */
  compare: string[];
  covers: string;
}

const V = 97;
const chunkRows = (rows: number) => ['--logits-budget', String(rows * V)];

/** Together: Qwen3, Llama and Qwen2; GQA and MQA, head_dim 8..256 and ≠ hidden/heads, tied and untied, biases, packed
 *  batches with empty and one-token sequences, several micro-batches, small LM-head chunks, GRPO and GRPO++ (DESIGN §5). */
export const CONFIGS: EmuConfig[] = [
  {
    name: 'gqa2-d32',
    tiny: ['--heads', '4', '--kv', '2', '--head-dim', '32'],
    compare: ['--lens', '33,0,1,3,20', ...chunkRows(7)],
    covers: 'GQA 4/2, head_dim 32 (≠ 64/4), untied, GRPO++, LM head in 7-row chunks',
  },
  {
    name: 'mqa-d8-tied-grpo',
    tiny: ['--heads', '4', '--kv', '1', '--head-dim', '8', '--tied', '1'],
    compare: ['--lens', '0,0,40,5,0,1', '--mode', 'grpo', ...chunkRows(5)],
    covers: 'MQA 4/1, head_dim 8, tied, GRPO; first micro-batch only empty sequences on a fresh engine (finding 2)',
  },
  {
    name: 'mha-d64-tied-bias',
    tiny: ['--heads', '2', '--kv', '2', '--head-dim', '64', '--tied', '1', '--bias', '1'],
    compare: ['--lens', '3,0*200,20,33', ...chunkRows(3)],
    covers: 'MHA 2/2, head_dim 64, tied, attention bias; 3 tokens then 200 empty sequences (finding 1)',
  },
  {
    name: 'mqa4-d128-bias-3l',
    tiny: ['--heads', '4', '--kv', '1', '--head-dim', '128', '--bias', '1', '--layers', '3'],
    compare: ['--lens', '33,3,1,12', '--mode', 'grpo'],
    covers: 'GQA group 4 (MQA), head_dim 128, bias, 3 layers, GRPO',
  },
  {
    name: 'mqa-d256',
    tiny: ['--heads', '2', '--kv', '1', '--head-dim', '256'],
    compare: ['--lens', '1,33,0,12'],
    covers: 'head_dim 256 (8 dims per lane), a one-token sequence first',
  },
  {
    name: 'gqa3-d48-tied',
    tiny: ['--heads', '6', '--kv', '2', '--head-dim', '48', '--tied', '1', '--hidden', '96', '--inter', '160'],
    compare: ['--lens', '12,0,33,1,9', ...chunkRows(1)],
    covers: 'GQA 6/2 (group 3), head_dim 48 (lanes 48–63 idle), hidden 96, 1-row chunks',
  },
  {
    name: 'llama-gqa3-d16-tied',
    tiny: ['--arch', 'llama', '--heads', '6', '--kv', '2', '--head-dim', '16', '--tied', '1', '--hidden', '96', '--theta', '100000'],
    compare: ['--lens', '33,0,1,3,20'],
    covers: 'Llama (no q/k norm, RoPE only), GQA 6/2, head_dim 16, tied, theta 1e5 (SmolLM2)',
  },
  {
    name: 'qwen2-qkv-bias-d32',
    // theta 1e4, not Qwen2.5's 1e6: over 33 positions a 1e6 RoPE barely rotates the key bias, whose gradient (a
    // near-cancellation: each query row's score gradients sum to 0) then sits at fp32 rounding, which 10 Adam steps
    // amplify past the exact-mode update tolerance. The oracle covers theta 1e6 (torch-oracle.test.ts).
    tiny: ['--arch', 'qwen2', '--heads', '4', '--kv', '2', '--head-dim', '32'],
    compare: ['--lens', '12,0,33,1,9', '--mode', 'grpo', ...chunkRows(3)],
    covers: 'Qwen2 (q/k/v biases, no o bias, no q/k norm), GQA 4/2, untied, GRPO',
  },
];

/** Finding 4: more than 65,535 sequences in one micro-batch (attention's gridDim.y). */
export const MANY_SEQS: EmuConfig = {
  name: 'many-seqs',
  tiny: ['--heads', '1', '--kv', '1', '--head-dim', '8', '--layers', '1'],
  compare: ['--lens', '2,0*65600,5,0*10,3', '--steps', '0', '--gen', '0'],
  covers: '65,613 sequences (10 tokens) in one micro-batch (finding 4)',
};

export function configByName(name: string): EmuConfig {
  const c = [...CONFIGS, MANY_SEQS].find((x) => x.name === name);
  if (!c) throw new Error(`no gl-emu config ${name}`);
  return c;
}

export interface Proc {
  status: number | null;
  stdout: string;
  stderr: string;
  seconds: number;
}

export function run(bin: string, args: string[], env: Record<string, string> = {}): Promise<Proc> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const p = spawn(join(BUILD_DIR, bin), args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '',
      stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('error', reject);
    p.on('close', (status) => resolve({ status, stdout, stderr, seconds: (Date.now() - t0) / 1000 }));
  });
}

/** Runs the tasks at most n at a time (2 cores: two emulator processes keep both busy). */
export async function inPool<T>(tasks: (() => Promise<T>)[], n = 2): Promise<T[]> {
  const out: T[] = new Array(tasks.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, tasks.length) }, async () => {
      while (next < tasks.length) {
        const i = next++;
        out[i] = await tasks[i]();
      }
    }),
  );
  return out;
}

export interface Check {
  what: string;
  err: number;
  tol: number;
  pass: boolean;
}

export interface CompareRun extends Proc {
  config: string;
  variant: Variant;
  label: string;
  ok: boolean;
  checks: Check[];
  digest?: string;
  logitScale?: number;
  greedySame?: number;
  sampledSame?: number;
  generated?: number;
  stats?: { kernels: Record<string, { launches: number; threads: number; seconds: number }>; gemms: number };
}

/** A scratch directory of tiny checkpoints, one per config (written by gpu_driver tiny, seed 7). */
export class Workdir {
  readonly dir = mkdtempSync(join(tmpdir(), 'gl-emu-'));
  private made = new Map<string, Promise<string>>();
  checkpoint(c: EmuConfig): Promise<string> {
    let p = this.made.get(c.name);
    if (!p) {
      const dir = join(this.dir, c.name);
      p = run('gpu_driver_emu_exact', ['tiny', dir, ...c.tiny, '--seed', '7']).then((r) => {
        if (r.status !== 0) throw new Error(`gpu_driver tiny ${c.name}: ${r.stderr}`);
        return dir;
      });
      this.made.set(c.name, p);
    }
    return p;
  }
  remove() {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export interface CompareOptions {
  binary?: string; // default gpu_driver_emu_<variant>
  extra?: string[]; // appended to the config's compare options
  env?: Record<string, string>;
  label?: string;
}

export async function compare(w: Workdir, c: EmuConfig, variant: Variant, o: CompareOptions = {}): Promise<CompareRun> {
  const dir = await w.checkpoint(c);
  const json = join(w.dir, `${c.name}-${variant}-${Math.random().toString(36).slice(2)}.json`);
  const tol = variant === 'asan' ? ['--tol', 'bf16'] : [];
  // micro-batches of 32 tokens: each config's batch splits in 2–3 (gradient accumulation); one block thread per
  // process by default, as the runs go two at a time on CI's two cores
  const args = ['compare', dir, '--micro', '32', ...c.compare, ...tol, ...(o.extra ?? []), '--json', json];
  const r = await run(o.binary ?? `gpu_driver_emu_${variant}`, args, { GL_EMU_THREADS: '1', ...o.env });
  const res: CompareRun = { ...r, config: c.name, variant, label: o.label ?? variant, ok: false, checks: [] };
  try {
    const j = JSON.parse(readFileSync(json, 'utf8'));
    Object.assign(res, {
      checks: j.checks,
      digest: j.digest,
      logitScale: j.logit_scale,
      greedySame: j.greedy_same,
      sampledSame: j.sampled_same,
      generated: j.generated,
      stats: j.emu?.stats,
    });
    res.ok = r.status === 0 && j.pass === true;
  } catch {
    res.ok = false; // crashed or refused before writing its report
  }
  return res;
}

/** The first thing that failed: a FAIL line, the emulator's diagnosis or the driver's error. */
export function failure(r: Proc): string {
  const lines = (r.stdout + '\n' + r.stderr).split('\n');
  const f =
    lines.find((l) => / FAIL$/.test(l)) ??
    lines.find((l) => l.startsWith('gl-emu:')) ??
    lines.find((l) => l.startsWith('gpu_driver:')) ??
    lines.find((l) => l.includes('AddressSanitizer')) ??
    lines.find((l) => /LEAKS FAIL|REJECT FAIL/.test(l));
  return (f ?? `exit status ${r.status}`).replace(/\s+/g, ' ').trim();
}

const worst = (checks: Check[], prefix: string) =>
  checks.filter((c) => c.what.startsWith(prefix)).reduce<Check | undefined>((a, c) => (!a || c.err / c.tol > a.err / a.tol ? c : a), undefined);

/** One row per run: the largest difference of each kind, against its tolerance. */
export function table(runs: CompareRun[]): string {
  const fmt = (c?: Check) => (c ? `${c.err.toExponential(1)}/${c.tol.toExponential(0)}` : '—');
  const head = ['config', 'mode', 'logp Δ/tol', 'loss', 'grad (worst)', 'update (worst)', 'gen logp', 'greedy', 'sampled', 's', 'ok'];
  const rows = runs.map((r) => [
    r.config,
    r.label,
    fmt(worst(r.checks, 'logprobs')),
    fmt(worst(r.checks, 'loss relative diff')),
    fmt(worst(r.checks, 'grad ')),
    fmt(worst(r.checks, 'update after')),
    fmt(worst(r.checks, 'generate: log-probs')),
    r.generated ? `${r.greedySame}/${r.generated}` : '—',
    r.generated ? `${r.sampledSame}/${r.generated}` : '—',
    r.seconds.toFixed(1),
    r.ok ? 'ok' : `FAIL: ${failure(r)}`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (i === head.length - 1 ? 0 : r[i].length))));
  return [head, ...rows].map((r) => r.map((x, i) => (i === r.length - 1 ? x : x.padEnd(widths[i]))).join('  ')).join('\n');
}

export interface MutantResult {
  name: string;
  why: string;
  caught: boolean;
  by: string;
  seconds: number;
}

/** Runs one mutant's check (exact build with the planted bug); caught = the check fails. */
export async function runMutant(w: Workdir, m: MutantSpec): Promise<MutantResult> {
  const bin = `gpu_driver_mutant_${m.name}`;
  let r: Proc;
  if (m.check === 'leaks') {
    r = await leaks(w, bin);
  } else if (m.check.startsWith('compare:')) {
    // 2 AdamW steps and 4 generated tokens: every check kind runs, in a fraction of the time
    const c = configByName(m.check.slice('compare:'.length));
    const short = c.compare.includes('--steps') ? [] : ['--steps', '2', '--gen', '4'];
    r = await compare(w, c, 'exact', { binary: bin, extra: [...short, '--stop-on-fail', '1'] });
  } else {
    throw new Error(`mutant ${m.name}: unknown check ${m.check}`);
  }
  const caught = r.status !== 0;
  return { name: m.name, why: m.why, caught, by: caught ? failure(r) : 'nothing failed', seconds: r.seconds };
}

export function mutants(): MutantSpec[] {
  return mutantSpecs();
}

/** Finding 5: three constructions that throw while loading, then a good engine, must leave nothing alive. */
export async function leaks(w: Workdir, bin = 'gpu_driver_emu_bf16'): Promise<Proc> {
  const good = await w.checkpoint(CONFIGS[0]);
  const bad = join(w.dir, 'leaks-bad');
  const t = await run('gpu_driver_emu_exact', ['tiny', bad, ...CONFIGS[0].tiny, '--seed', '7']);
  if (t.status !== 0) throw new Error(t.stderr);
  // the config promises an untied head, the weights file lacks it: loading throws after the stream exists
  const g = await run('gpu_driver_emu_exact', ['tiny', join(w.dir, 'leaks-tied'), ...CONFIGS[0].tiny, '--tied', '1', '--seed', '7']);
  if (g.status !== 0) throw new Error(g.stderr);
  copyFileSync(join(w.dir, 'leaks-tied', 'model.safetensors'), join(bad, 'model.safetensors'));
  return run(bin, ['leaks', bad, good]);
}

export interface ShapeRun extends Proc {
  /** gpu_driver shape's report: peak_gib, dry, emu stats (launches, GEMMs, copies; seconds spent computing) */
  report?: { peak_gib: number; dry: boolean; emu: { kernels: Record<string, { launches: number; seconds: number }>; gemms: number; gemm_seconds: number; memcpys: number } };
}

/** The dry run: Qwen3-0.6B's shape, one 32K-token sequence: train step, log-probs, generation; nothing computed. */
export async function shape(w: Workdir): Promise<ShapeRun> {
  const json = join(w.dir, 'shape.json');
  const r: ShapeRun = await run('gpu_driver_emu_bf16', ['shape', '--shape', 'qwen3-0.6b', '--seq', '32768', '--json', json], { GL_EMU_DRY: '1' });
  try {
    r.report = JSON.parse(readFileSync(json, 'utf8'));
  } catch {
    // no report: the run failed, r.status says so
  }
  return r;
}

/** Finding 3: a sequence longer than max_position_embeddings is refused by both engines with the same message. */
export async function rejectTooLong(w: Workdir): Promise<Proc> {
  const dir = join(w.dir, 'maxpos-64');
  const t = await run('gpu_driver_emu_exact', ['tiny', dir, ...CONFIGS[0].tiny, '--max-pos', '64', '--seed', '7']);
  if (t.status !== 0) throw new Error(t.stderr);
  return run('gpu_driver_emu_bf16', ['reject', dir, '--lens', '10,65,3']);
}
