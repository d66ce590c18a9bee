// The native learner against PyTorch eager (transformers' causal LM of the checkpoint, fp32, the torch venv) on the
// same checkpoints and shapes, in one run: forward (log-probs), train (the GRPO++ step: forward, backward, AdamW) and
// generate (KV cache), on the tiny preset, the Qwen3-0.6B shape with 2 decoder layers, and the two real shapes in full
// (random weights): SmolLM2-135M (Llama, 30 layers) and Qwen2.5-Coder-0.5B (Qwen2, 24 layers, untied head, 630M
// parameters); one thread (tokens per CPU-second, robust to other load on a shared machine) and two threads (tokens
// per wall second). Then batched decoding on the same shapes: tokens/s of 1, 8 and 16 sequences decoding together
// (Learner.decoder) against single-stream decoding (one generate at a time), and torch generating the same streams
// as one batch; the native engine against its own naive-matmul reference. Then the policy server over HTTP: tokens/s
// of 1, 8 and 16 concurrent completion streams, batching vs the single-stream server (`batching: false`).
// --grpo: one GRPO iteration of 8 tasks × 4 samples (900-token prompt, 300 sampled tokens) on the Qwen2.5 shape, timed
// by its parts (prefill, batched decoding of 32 streams, training with the prompt shared or not, the step with and
// without a separate log-probs pass for the sampler-learner mismatch) and added up.
// --memory: peak RSS of a 630M-parameter fp32 model with AdamW state training 8 × 1,500 tokens (a child process).
// Ends with `min ratio vs torch: X` (the worst native/torch ratio over the rows).
// The FSDP engine's rows (--fsdp, or --fsdp-shape qwen3-0.6b [--fsdp-layers N]): training tokens/s, native vs fsdp
// on 1 and 2 ranks, the time to start the process group and to write a checkpoint.
// Usage: npm run bench:learner [-- --shapes tiny,0.6b-2l,smollm2,qwen2.5|none] [-- --threads 1,2] [-- --no-torch] [-- --fsdp]
//        [-- --grpo] [-- --memory]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Learner, gemmKernels, writeRandomCheckpoint, type QwenConfig, type TrainBatch } from '../gpu-learner/index.ts';
import { FsdpLearner, fsdpPython, writeTrainBatch } from '../gpu-learner/fsdp/index.ts';
import { fsdpOptions } from '../gpu-learner/fsdp/crosscheck.ts';
import { startPolicyServer } from '../policy-server/index.ts';
import { trainHyper } from '../test/helpers/tiny-model.ts';
import { presetConfig, PRESETS } from '../lib/presets.ts';

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}
const here = fileURLToPath(new URL('.', import.meta.url));

/** the tiny preset's shape (lib/presets.ts) */
const tiny: QwenConfig = { ...presetConfig(PRESETS.tiny) };
const qwen06: QwenConfig = {
  ...tiny,
  vocab_size: 151936,
  hidden_size: 1024,
  intermediate_size: 3072,
  num_hidden_layers: 28,
  num_attention_heads: 16,
  num_key_value_heads: 8,
  head_dim: 128,
  max_position_embeddings: 40960,
};
/** SmolLM2-135M-Instruct's shape (Llama) and Qwen2.5-Coder-0.5B-Instruct's (Qwen2), as their config.json give them. */
const smollm2: QwenConfig = {
  model_type: 'llama',
  vocab_size: 49152,
  hidden_size: 576,
  intermediate_size: 1536,
  num_hidden_layers: 30,
  num_attention_heads: 9,
  num_key_value_heads: 3,
  head_dim: 64,
  rms_norm_eps: 1e-5,
  rope_theta: 100000,
  max_position_embeddings: 8192,
  tie_word_embeddings: true,
};
const qwen25: QwenConfig = {
  model_type: 'qwen2',
  vocab_size: 151936,
  hidden_size: 896,
  intermediate_size: 4864,
  num_hidden_layers: 24,
  num_attention_heads: 14,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  max_position_embeddings: 32768,
  tie_word_embeddings: false,
};
interface Shape {
  name: string;
  config: QwenConfig;
  seqLen: number;
  seqs: number;
  gen: number;
  minSeconds: number;
}
const SHAPES: Shape[] = [
  { name: 'tiny', config: tiny, seqLen: 512, seqs: 4, gen: 128, minSeconds: 2 },
  { name: '0.6b-2l', config: { ...qwen06, num_hidden_layers: 2 }, seqLen: 512, seqs: 2, gen: 32, minSeconds: 4 },
  { name: 'smollm2', config: smollm2, seqLen: 512, seqs: 2, gen: 32, minSeconds: 4 },
  { name: 'qwen2.5', config: qwen25, seqLen: 256, seqs: 2, gen: 16, minSeconds: 4 },
];
const hp = trainHyper({ lr: 1e-6, lMax: 32768, microBatchTokens: 4096 });

function batchOf(config: QwenConfig, n: number, seqLen: number) {
  let s = 12345;
  const ids = Int32Array.from({ length: n * seqLen }, () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % config.vocab_size);
  const offsets = Int32Array.from({ length: n + 1 }, (_, i) => i * seqLen);
  const mask = Float32Array.from(ids, (_, t) => (t % seqLen >= 64 ? 1 : 0));
  const advantages = Float32Array.from({ length: n }, (_, i) => (i % 2 ? -1 : 1));
  return { ids, offsets, mask, advantages };
}

/** tokens per CPU-second of this process with one thread, per wall second otherwise (warm-up call first) */
async function rate(threads: number, minSeconds: number, fn: () => Promise<number>): Promise<number> {
  await fn();
  let tokens = 0;
  const w0 = performance.now(),
    c0 = process.cpuUsage();
  do tokens += await fn();
  while ((performance.now() - w0) / 1000 < minSeconds);
  const wall = (performance.now() - w0) / 1000,
    cu = process.cpuUsage(c0);
  return tokens / (threads === 1 ? (cu.user + cu.system) / 1e6 : wall);
}

type Op = 'forward' | 'train' | 'generate';
const OPS: Op[] = ['forward', 'train', 'generate'];

async function nativeRates(dir: string, sh: Shape, threads: number, naive = false): Promise<Record<Op, number>> {
  const l = await Learner.load(dir, { threads, naiveMatmul: naive });
  try {
    const b = batchOf(sh.config, naive ? 1 : sh.seqs, sh.seqLen);
    const prompt = b.ids.slice(0, 16);
    let seed = 1;
    return {
      forward: await rate(threads, sh.minSeconds, async () => (await l.logprobs(b)).length),
      train: await rate(threads, sh.minSeconds, async () => (await l.trainStep(b, hp)).tokens),
      generate: await rate(threads, sh.minSeconds, async () => (await l.generate(prompt, { maxNewTokens: naive ? 32 : sh.gen, seed: seed++ })).ids.length),
    };
  } finally {
    l.close();
  }
}

/** torch's rates; `extra` adds options (--ops, --streams). OpenMP waits passively: spinning threads starve on a shared machine. */
function torchRates(python: string, dir: string, sh: Shape, threads: number, extra: string[] = []): Record<string, number> {
  const r = spawnSync(
    python,
    [
      join(here, 'learner_torch.py'),
      '--dir',
      dir,
      '--seq',
      String(sh.seqLen),
      '--seqs',
      String(sh.seqs),
      '--gen',
      String(sh.gen),
      '--threads',
      String(threads),
      '--min-seconds',
      String(sh.minSeconds),
      ...extra,
    ],
    { encoding: 'utf8', maxBuffer: 1 << 24, env: { ...process.env, OMP_WAIT_POLICY: 'PASSIVE', TRANSFORMERS_VERBOSITY: 'error' } },
  );
  if (r.status !== 0) throw new Error(`bench/learner_torch.py failed (exit ${r.status}):\n${r.stderr.slice(-3000)}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as Record<string, number>;
}

const STREAMS = [1, 8, 16];

/** Decoding tokens/s (wall) of n sequences together through Learner.decoder, and of single-stream decoding. */
async function batchedDecode(dir: string, sh: Shape, threads: number): Promise<{ single: number; batched: Map<number, number> }> {
  const l = await Learner.load(dir, { threads });
  try {
    const prompt = (i: number) => Int32Array.from({ length: 16 }, (_, k) => (i * 131 + k * 17) % sh.config.vocab_size);
    const opts = (i: number) => ({ maxNewTokens: sh.gen, temperature: 1, seed: 1000 + i });
    await l.generate(prompt(0), opts(0)); // warm-up
    let t0 = performance.now(),
      tokens = 0;
    for (let i = 0; i < 2; i++) tokens += (await l.generate(prompt(i), opts(i))).ids.length;
    const single = tokens / ((performance.now() - t0) / 1000);
    const batched = new Map<number, number>();
    for (const n of STREAMS) {
      t0 = performance.now();
      const rs = await Promise.all(Array.from({ length: n }, (_, i) => l.decoder.generate(prompt(i), [opts(i)])));
      batched.set(n, rs.reduce((a, r) => a + r[0].ids.length, 0) / ((performance.now() - t0) / 1000));
    }
    return { single, batched };
  } finally {
    l.close();
  }
}

/**
 * The policy server's tokens/s (wall) with n concurrent /v1/completions streams (distinct 16-token prompts, seeded),
 * batching (continuous batching, the default) against the single-stream server (`batching: false`), same learner.
 */
async function serverStreams(dir: string, sh: Shape, threads: number): Promise<{ streams: number; single: number; batched: number }[]> {
  const l = await Learner.load(dir, { threads });
  const servers = { single: await startPolicyServer({ learner: l, modelName: 'bench', batching: false }), batched: await startPolicyServer({ learner: l, modelName: 'bench' }) };
  /** one round: n concurrent streams; tokens and seconds */
  const round = async (url: string, n: number) => {
    const ask = async (i: number) => {
      const prompt = Array.from({ length: 16 }, (_, k) => (i * 131 + k * 17) % sh.config.vocab_size);
      const res = await fetch(`${url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt, max_tokens: sh.gen, temperature: 1, seed: 1000 + i, logprobs: 0 }) });
      if (res.status !== 200) throw new Error(`policy server: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens;
    };
    const t0 = performance.now();
    const tokens = (await Promise.all(Array.from({ length: n }, (_, i) => ask(i)))).reduce((a, b) => a + b, 0);
    return { tokens, seconds: (performance.now() - t0) / 1000 };
  };
  try {
    await round(servers.single.url, 1); // warm-up
    await round(servers.batched.url, 1);
    const out = [];
    for (const streams of [1, 8, 16]) {
      // rounds alternate between the two servers until each ran minSeconds, so both see the same load on a shared machine
      const sum = { single: { tokens: 0, seconds: 0 }, batched: { tokens: 0, seconds: 0 } };
      while (sum.single.seconds < sh.minSeconds || sum.batched.seconds < sh.minSeconds) {
        for (const k of ['single', 'batched'] as const) {
          const r = await round(servers[k].url, streams);
          sum[k].tokens += r.tokens;
          sum[k].seconds += r.seconds;
        }
      }
      out.push({ streams, single: sum.single.tokens / sum.single.seconds, batched: sum.batched.tokens / sum.batched.seconds });
    }
    return out;
  } finally {
    await servers.single.close();
    await servers.batched.close();
    l.close();
  }
}

if (process.argv.includes('--memory-child')) {
  await memoryChild(arg('memory-child', ''));
  process.exit(0);
}
const shapes = arg('shapes', SHAPES.map((s) => s.name).join(','))
  .split(',')
  .filter((n) => n !== 'none') // --shapes none: only the --grpo / --memory / --fsdp sections
  .map((n) => {
    const s = SHAPES.find((x) => x.name === n);
    if (!s) throw new Error(`--shapes: unknown shape ${JSON.stringify(n)} (${SHAPES.map((x) => x.name).join(', ')})`);
    return s;
  });
const threadList = arg('threads', '1,2').split(',').map(Number);
const withTorch = !process.argv.includes('--no-torch');
const python = withTorch ? fsdpPython('cpu') : '';
const root = mkdtempSync(join(tmpdir(), 'gl-bench-'));
interface RowOut {
  shape: string;
  op: Op;
  threads: number;
  native: number;
  torch?: number;
}
const rows: RowOut[] = [];
const decode: { shape: string; single: number; batched: Map<number, number>; torch?: Record<string, number> }[] = [];
const served: { shape: string; rows: Awaited<ReturnType<typeof serverStreams>> }[] = [];
let naiveRow: { native: Record<Op, number>; naive: Record<Op, number> } | undefined;
try {
  for (const sh of shapes) {
    const dir = join(root, sh.name);
    writeRandomCheckpoint(dir, sh.config, 1);
    for (const threads of threadList) {
      const nat = await nativeRates(dir, sh, threads);
      const tor = withTorch ? torchRates(python, dir, sh, threads) : undefined;
      for (const op of OPS) rows.push({ shape: sh.name, op, threads, native: nat[op], torch: tor?.[op] });
      if (sh.name === 'tiny' && threads === 1) naiveRow = { native: nat, naive: await nativeRates(dir, { ...sh, minSeconds: 1 }, 1, true) };
      process.stderr.write(`[bench] ${sh.name} ${threads} thread(s) done\n`);
    }
    const torchStreams = withTorch ? torchRates(python, dir, sh, Math.max(...threadList), ['--ops', '', '--streams', STREAMS.join(',')]) : undefined;
    decode.push({ shape: sh.name, ...(await batchedDecode(dir, sh, Math.max(...threadList))), torch: torchStreams });
    served.push({ shape: sh.name, rows: await serverStreams(dir, sh, Math.max(...threadList)) });
  }
  const f = (v: number | undefined, w = 12) => (v === undefined ? '-' : v.toFixed(v < 100 ? 1 : 0)).padStart(w);
  console.log(`gpu-learner vs PyTorch eager ${withTorch ? '' : '(skipped: --no-torch) '}(fp32, CPU): tokens per CPU-second with 1 thread, per wall second with more`);
  console.log(`native GEMM kernels: ${gemmKernels()}`);
  for (const sh of shapes)
    console.log(
      `  ${sh.name}: ${sh.config.model_type ?? 'qwen3'} V${sh.config.vocab_size} C${sh.config.hidden_size} L${sh.config.num_hidden_layers} H${sh.config.num_attention_heads}/${sh.config.num_key_value_heads} D${sh.config.head_dim ?? sh.config.hidden_size / sh.config.num_attention_heads} I${sh.config.intermediate_size}${sh.config.tie_word_embeddings ? ' tied' : ''}; ${sh.seqs}x${sh.seqLen} tokens per batch; generate ${sh.gen} tokens after a 16-token prompt`,
    );
  console.log('shape     operation  threads      native       torch   native/torch');
  console.log('--------  ---------  -------  ----------  ----------   ------------');
  for (const r of rows)
    console.log(
      `${r.shape.padEnd(8)}  ${r.op.padEnd(9)}  ${String(r.threads).padStart(7)}  ${f(r.native, 10)}  ${f(r.torch, 10)}   ${r.torch ? (r.native / r.torch).toFixed(2).padStart(11) + 'x' : '-'.padStart(12)}`,
    );
  if (naiveRow) {
    console.log('\nnative vs its naive-matmul reference (tiny, 1 thread; reference: 1x512-token batch, 32 generated tokens):');
    for (const op of OPS) console.log(`  ${op.padEnd(9)} ${f(naiveRow.native[op])} vs ${f(naiveRow.naive[op])}  ${(naiveRow.native[op] / naiveRow.naive[op]).toFixed(1)}x`);
  }
  console.log(`\nbatched decoding (Learner.decoder, ${Math.max(...threadList)} threads, wall clock): tokens/s of n sequences decoding together vs single-stream generate`);
  console.log('shape     single-stream      n=1        n=8       n=16    n=8 / single   torch n=1    n=8   n=16   native/torch n=1 / 8 / 16');
  for (const d of decode) {
    const t = (n: number) => d.torch?.[`streams${n}`];
    const vs = STREAMS.map((n) => (t(n) ? (d.batched.get(n)! / t(n)!).toFixed(2) : '-')).join(' / ');
    console.log(
      `${d.shape.padEnd(8)}  ${f(d.single, 13)}  ${f(d.batched.get(1), 9)}  ${f(d.batched.get(8), 9)}  ${f(d.batched.get(16), 9)}   ${(d.batched.get(8)! / d.single).toFixed(1).padStart(11)}x  ${f(t(1), 9)} ${f(t(8), 6)} ${f(t(16), 6)}   ${vs}`,
    );
  }
  console.log(
    `\npolicy server (${Math.max(...threadList)} threads, wall clock, HTTP): tokens/s of n concurrent /v1/completions streams, batching vs the single-stream server (batching: false)`,
  );
  console.log('shape     streams   single-stream    batching   batching / single');
  for (const d of served)
    for (const r of d.rows)
      console.log(`${d.shape.padEnd(8)}  ${String(r.streams).padStart(7)}  ${f(r.single, 14)}  ${f(r.batched, 10)}   ${(r.batched / r.single).toFixed(1).padStart(16)}x`);
  console.log(
    `machine: ${cpus().length} CPU threads, load average ${loadavg()
      .map((v) => v.toFixed(1))
      .join(' / ')}`,
  );
  const ratios = rows.filter((r) => r.torch).map((r) => ({ r, x: r.native / r.torch! }));
  if (ratios.length) {
    const worst = ratios.reduce((a, b) => (b.x < a.x ? b : a));
    const behind = ratios.filter((x) => x.x < 1.5).map((x) => `${x.r.shape} ${x.r.op} ${x.r.threads}t ${x.x.toFixed(2)}x`);
    if (behind.length) console.log(`rows below 1.5x: ${behind.join(', ')}`);
    console.log(`min ratio vs torch: ${worst.x.toFixed(2)} (${worst.r.shape} ${worst.r.op}, ${worst.r.threads} thread${worst.r.threads > 1 ? 's' : ''})`);
  }
  if (process.argv.includes('--fsdp') || process.argv.includes('--fsdp-shape')) await fsdpRows();
  if (process.argv.includes('--grpo')) await grpoIteration(Math.max(...threadList));
  if (process.argv.includes('--memory')) memoryPeak();
} finally {
  rmSync(root, { recursive: true, force: true });
}

/** A group's packed sequences: one prompt of p tokens, g responses of r tokens (masks 0 on the prompt). */
function groupBatch(vocab: number, groups: number, g: number, p: number, r: number): TrainBatch {
  let s = 99;
  const tok = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % vocab;
  const ids: number[] = [],
    mask: number[] = [],
    offsets = [0],
    advantages: number[] = [];
  for (let k = 0; k < groups; k++) {
    const prompt = Array.from({ length: p }, tok);
    for (let i = 0; i < g; i++) {
      ids.push(...prompt, ...Array.from({ length: r }, tok));
      mask.push(...prompt.map(() => 0), ...Array.from({ length: r }, () => 1));
      offsets.push(ids.length);
      advantages.push(i % 2 ? -0.5 : 0.5);
    }
  }
  return { ids: Int32Array.from(ids), offsets: Int32Array.from(offsets), mask: Float32Array.from(mask), advantages: Float32Array.from(advantages) };
}

/**
 * One GRPO iteration of TASKS tasks × G samples on the Qwen2.5-Coder-0.5B shape (random weights), timed by its parts
 * on this machine (wall clock, `threads` threads) and added up: each task's prompt prefilled once (its G samples share
 * it), RESP decoding steps of the TASKS·G sequences together, the learner's log-probs of the batch (the sampler-learner
 * mismatch) and its training step, with the group's prompt shared and, for comparison, not.
 */
async function grpoIteration(threads: number): Promise<void> {
  const TASKS = 8,
    G = 4,
    PROMPT = 900,
    RESP = 300,
    STEPS = 4;
  const dir = join(root, 'grpo-qwen2.5');
  writeRandomCheckpoint(dir, qwen25, 3);
  const time = async <T>(fn: () => Promise<T>): Promise<[T, number]> => {
    const t0 = performance.now();
    const r = await fn();
    return [r, (performance.now() - t0) / 1000];
  };
  const shared = await Learner.load(dir, { threads });
  let plain: Learner | undefined;
  try {
    const group = groupBatch(qwen25.vocab_size, 1, G, PROMPT, RESP);
    const prompt = group.ids.slice(0, PROMPT);
    const opts = Array.from({ length: TASKS * G }, (_, i) => ({ maxNewTokens: RESP, temperature: 1, seed: i }));
    // prefill: one prompt for all TASKS·G sequences here (one prefill, the cache copied), timed as one task's
    const [seqs, prefill] = await time(() => shared.decodeAdd(prompt, opts));
    await shared.decodeStep(); // warm-up
    const [, decode] = await time(async () => {
      for (let i = 0; i < STEPS; i++) await shared.decodeStep();
    });
    for (const q of seqs) await shared.decodeRemove(q);
    const hp2 = { ...hp, microBatchTokens: 4096 };
    const [lp, logprobs] = await time(() => shared.logprobs(group));
    void lp; // the baseline's pass (the sampler-learner mismatch before the step measured it so)
    const [st, trainShared] = await time(() => shared.trainStep(group, hp2));
    shared.close(); // one 630M trainer at a time (10 GiB with its AdamW state)
    plain = await Learner.load(dir, { threads, minSharedPrefix: 0 });
    const [stPlain, trainPlain] = await time(() => plain!.trainStep(group, hp2));
    const step = decode / STEPS;
    // the learner step measures π_old on the step's own forward (activities/learner.ts measureMismatch): the separate
    // log-probs pass it made before is no longer run for trained sequences
    const parts = {
      prefill: TASKS * prefill,
      decode: RESP * step,
      train: TASKS * trainShared,
    };
    const total = Object.values(parts).reduce((a, b) => a + b, 0);
    console.log(
      `\nGRPO iteration, Qwen2.5-Coder-0.5B shape (random fp32 weights), ${TASKS} tasks × ${G} samples, ${PROMPT}-token prompt + ${RESP} sampled tokens, ${threads} threads (wall clock, machine load ${loadavg()[0].toFixed(1)}):`,
    );
    console.log(`  prefill      ${prefill.toFixed(1)} s per prompt (${(PROMPT / prefill).toFixed(0)} tokens/s)   × ${TASKS} = ${parts.prefill.toFixed(0)} s`);
    console.log(`  decode       ${step.toFixed(2)} s per step of ${TASKS * G} sequences (${((TASKS * G) / step).toFixed(1)} tokens/s)   × ${RESP} = ${parts.decode.toFixed(0)} s`);
    console.log(
      `  learner step ${trainShared.toFixed(1)} s per group with π_old from the step's own forward (its log-probs: ${st.logprobs.filter((v) => !Number.isNaN(v)).length} tokens); with a log-probs pass first (${logprobs.toFixed(1)} s, ${group.ids.length} tokens) ${(logprobs + trainShared).toFixed(1)} s: ${((logprobs + trainShared) / trainShared).toFixed(2)}x`,
    );
    console.log(
      `  train        ${trainShared.toFixed(1)} s per group, prompt shared: ${st.rows} rows for ${st.tokens} tokens (${(st.tokens / st.rows).toFixed(2)}x fewer); not shared ${trainPlain.toFixed(1)} s (${stPlain.rows} rows): ${(trainPlain / trainShared).toFixed(2)}x   × ${TASKS} = ${parts.train.toFixed(0)} s`,
    );
    console.log(`  one iteration ≈ ${total.toFixed(0)} s (${(total / 60).toFixed(1)} min): ${(3600 / total).toFixed(1)} updates per hour`);
  } finally {
    shared.close();
    plain?.close();
  }
}

/** Peak RSS of a child process that loads the Qwen2.5 shape (630M parameters, fp32) and trains 8 × 1,500 tokens. */
function memoryPeak(): void {
  const dir = join(root, 'memory-qwen2.5');
  writeRandomCheckpoint(dir, qwen25, 4);
  const r = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--memory-child', dir], { encoding: 'utf8', maxBuffer: 1 << 24 });
  if (r.status !== 0) throw new Error(`memory child failed (exit ${r.status}):\n${r.stderr.slice(-3000)}`);
  console.log(r.stdout.trim());
}

async function memoryChild(dir: string): Promise<void> {
  const hwm = () => Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))![1]) / 1024 / 1024;
  const l = await Learner.load(dir, { threads: 2 });
  const loaded = hwm();
  // 2 tasks × 4 samples of 1,200 prompt + 300 response tokens: 8 × 1,500 = 12,000 tokens, micro-batches of 4,096 rows
  const b = groupBatch(qwen25.vocab_size, 2, 4, 1200, 300);
  const st = await l.trainStep(b, { ...hp, microBatchTokens: 4096 });
  const params = (await l.paramInfo()).reduce((a, p) => a + p.shape.reduce((x, y) => x * y, 1), 0);
  console.log(
    `\nmemory: Qwen2.5-Coder-0.5B shape, ${(params / 1e6).toFixed(0)}M fp32 parameters + gradients + AdamW m, v (${((params * 16) / 2 ** 30).toFixed(1)} GiB): peak RSS ${loaded.toFixed(1)} GiB after load, ${hwm().toFixed(1)} GiB after a step on ${st.tokens} tokens (${st.rows} rows, micro-batches of 4,096 rows)`,
  );
  l.close();
}

/** Training tokens/s, native vs fsdp (1 and 2 ranks), process-group start and checkpoint write times. */
async function fsdpRows(): Promise<void> {
  const shape = arg('fsdp-shape', 'tiny');
  const cfg: QwenConfig = shape === 'qwen3-0.6b' ? { ...qwen06 } : { ...tiny };
  // --fsdp-layers N: the shape with N decoder layers (what fits a small machine)
  if (Number(arg('fsdp-layers', '0')) > 0) cfg.num_hidden_layers = Number(arg('fsdp-layers', '0'));
  const nSeqs = 4;
  const mdir = mkdtempSync(join(tmpdir(), 'gl-bench-fsdp-'));
  try {
    writeRandomCheckpoint(join(mdir, 'model'), cfg, 1);
    const b = batchOf(cfg, nSeqs, 512);
    const steps = shape === 'tiny' ? 3 : 1;
    const nat = await Learner.load(join(mdir, 'model'), { threads: cpus().length });
    await nat.trainStep(b, hp);
    let t0 = performance.now();
    for (let i = 0; i < steps; i++) await nat.trainStep(b, hp);
    const native = (steps * b.ids.length) / ((performance.now() - t0) / 1000);
    nat.close();
    writeTrainBatch(join(mdir, 'batch.safetensors'), b);
    console.log(`\nfsdp engine: shape ${shape} (${cfg.num_hidden_layers} layers), ${nSeqs}x512 tokens per step, CPU (gloo, fp32), ${steps} timed step(s) after one warm-up`);
    console.log('engine            train tokens/s   vs native   group start s   load s   checkpoint write s');
    console.log(`native            ${native.toFixed(0).padStart(14)}   ${'1.00x'.padStart(9)}`);
    for (const n of [1, 2]) {
      t0 = performance.now();
      const tr = await FsdpLearner.start(
        fsdpOptions(n, { maxTokensPerMicroBatch: 4096, checkpointShardMB: 4096, threads: Math.max(1, Math.floor(cpus().length / n)), stallTimeoutSeconds: 3600 }),
      );
      try {
        const start = (performance.now() - t0) / 1000;
        t0 = performance.now();
        await tr.load(join(mdir, 'model'));
        const load = (performance.now() - t0) / 1000;
        await tr.trainStep(join(mdir, 'batch.safetensors'), hp);
        t0 = performance.now();
        for (let i = 0; i < steps; i++) await tr.trainStep(join(mdir, 'batch.safetensors'), hp);
        const rate = (steps * b.ids.length) / ((performance.now() - t0) / 1000);
        t0 = performance.now();
        await tr.save(join(mdir, `ckpt-${n}`), join(mdir, 'model'));
        const save = (performance.now() - t0) / 1000;
        console.log(
          `fsdp ${n} rank${n > 1 ? 's' : ' '}      ${rate.toFixed(0).padStart(14)}   ${(rate / native).toFixed(2).padStart(8)}x   ${start.toFixed(1).padStart(13)}   ${load.toFixed(1).padStart(6)}   ${save.toFixed(2).padStart(18)}`,
        );
      } finally {
        await tr.close();
      }
    }
    console.log('group start: torchrun up to every rank joined (imports included); load: model built on meta, sharded, weights read and broadcast');
    console.log(
      `fsdp: activation checkpointing on (one more forward per block), ${cpus().length} CPU threads split over the ranks; machine load average ${loadavg()
        .map((v) => v.toFixed(1))
        .join(' / ')}`,
    );
  } finally {
    rmSync(mdir, { recursive: true, force: true });
  }
}
