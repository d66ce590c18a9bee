// The native learner against PyTorch eager (transformers' Qwen3ForCausalLM, fp32, the torch venv) on the same
// checkpoints and shapes, in one run: forward (log-probs), train (the GRPO++ step: forward, backward, AdamW) and
// generate (KV cache), on the tiny preset and on the Qwen3-0.6B shape with 2 decoder layers; one thread (tokens per
// CPU-second, robust to other load on a shared machine) and two threads (tokens per wall second). Then batched
// decoding on the same shapes: tokens/s of 1, 8 and 16 sequences decoding together (Learner.decoder) against
// single-stream decoding (one generate at a time), and the native engine against its own naive-matmul reference. Then
// the policy server over HTTP: tokens/s of 1, 8 and 16 concurrent completion streams, batching vs the single-stream
// server (`batching: false`).
// Ends with `min ratio vs torch: X` (the worst native/torch ratio over the rows).
// The FSDP engine's rows (--fsdp, or --fsdp-shape qwen3-0.6b [--fsdp-layers N]): training tokens/s, native vs fsdp
// on 1 and 2 ranks, the time to start the process group and to write a checkpoint.
// Usage: npm run bench:learner [-- --shapes tiny,0.6b-2l] [-- --threads 1,2] [-- --no-torch] [-- --fsdp]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Learner, writeRandomCheckpoint, type QwenConfig, type TrainHyper } from '../gpu-learner/index.ts';
import { FsdpLearner, fsdpPython, writeTrainBatch } from '../gpu-learner/fsdp/index.ts';
import { fsdpOptions } from '../gpu-learner/fsdp/crosscheck.ts';
import { startPolicyServer } from '../policy-server/index.ts';

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}
const here = fileURLToPath(new URL('.', import.meta.url));

const tiny: QwenConfig = {
  vocab_size: 512,
  hidden_size: 128,
  intermediate_size: 384,
  num_hidden_layers: 4,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 32,
  rms_norm_eps: 1e-6,
  rope_theta: 1_000_000,
  max_position_embeddings: 4096,
  tie_word_embeddings: true,
};
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
];
const hp: TrainHyper = {
  lr: 1e-6,
  weightDecay: 0.01,
  beta1: 0.9,
  beta2: 0.999,
  eps: 1e-8,
  clipLow: 0.2,
  clipHigh: 0.28,
  maxGradNorm: 1,
  lMax: 32768,
  mode: 'grpo++',
  microBatchTokens: 4096,
};

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

function torchRates(python: string, dir: string, sh: Shape, threads: number): Record<Op, number> {
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
    ],
    { encoding: 'utf8', maxBuffer: 1 << 24 },
  );
  if (r.status !== 0) throw new Error(`bench/learner_torch.py failed (exit ${r.status}):\n${r.stderr.slice(-3000)}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as Record<Op, number>;
}

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
    for (const n of [1, 8, 16]) {
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

const shapes = arg('shapes', SHAPES.map((s) => s.name).join(','))
  .split(',')
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
const decode: { shape: string; single: number; batched: Map<number, number> }[] = [];
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
    decode.push({ shape: sh.name, ...(await batchedDecode(dir, sh, Math.max(...threadList))) });
    served.push({ shape: sh.name, rows: await serverStreams(dir, sh, Math.max(...threadList)) });
  }
  const f = (v: number | undefined, w = 12) => (v === undefined ? '-' : v.toFixed(v < 100 ? 1 : 0)).padStart(w);
  console.log(`gpu-learner vs PyTorch eager ${withTorch ? '' : '(skipped: --no-torch) '}(fp32, CPU): tokens per CPU-second with 1 thread, per wall second with more`);
  for (const sh of shapes)
    console.log(
      `  ${sh.name}: V${sh.config.vocab_size} C${sh.config.hidden_size} L${sh.config.num_hidden_layers} H${sh.config.num_attention_heads}/${sh.config.num_key_value_heads} D${sh.config.head_dim} I${sh.config.intermediate_size}; ${sh.seqs}x${sh.seqLen} tokens per batch; generate ${sh.gen} tokens after a 16-token prompt`,
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
  console.log('shape     single-stream      n=1        n=8       n=16    n=8 / single');
  for (const d of decode)
    console.log(
      `${d.shape.padEnd(8)}  ${f(d.single, 13)}  ${f(d.batched.get(1), 9)}  ${f(d.batched.get(8), 9)}  ${f(d.batched.get(16), 9)}   ${(d.batched.get(8)! / d.single).toFixed(1).padStart(11)}x`,
    );
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
} finally {
  rmSync(root, { recursive: true, force: true });
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
