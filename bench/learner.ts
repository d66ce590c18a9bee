// Learner throughput on the tiny preset shape (vocab 512, hidden 128, 4 layers, 4 q / 2 kv heads,
// head_dim 32, intermediate 384; 512-token sequences): forward (logprobs), training (trainStep,
// forward + backward + AdamW) and generation (KV cache), against a straightforward single-threaded
// reference (same engine, threads=1, naive matmul loop) in the same run.
// The FSDP engine's rows (--fsdp, or --fsdp-shape qwen3-0.6b for the Qwen3-0.6B shape): training tokens/s of the
// same step, native vs fsdp on 1 and 2 ranks (CPU, gloo, fp32) in the same run, the time to start the process
// group and to write a checkpoint.
// Usage: npm run bench:learner [-- --device cuda] [-- --threads N] [-- --seq 512] [-- --seqs 4] [-- --fsdp]
//        [-- --fsdp-shape qwen3-0.6b [--fsdp-layers N]]
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';

import { Learner, writeRandomCheckpoint, type Device, type QwenConfig, type TrainHyper } from '../gpu-learner/index.ts';
import { FsdpLearner, writeTrainBatch } from '../gpu-learner/fsdp/index.ts';
import { fsdpOptions } from '../gpu-learner/fsdp/crosscheck.ts';

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}
const device = arg('device', 'cpu') as Device;
const threads = Number(arg('threads', '0'));
const seqLen = Number(arg('seq', '512'));
const nSeqs = Number(arg('seqs', '4'));
const genTokens = Number(arg('gen', '128'));

const config: QwenConfig = {
  vocab_size: 512, hidden_size: 128, intermediate_size: 384, num_hidden_layers: 4, num_attention_heads: 4,
  num_key_value_heads: 2, head_dim: 32, rms_norm_eps: 1e-6, rope_theta: 1_000_000, max_position_embeddings: 4096,
  tie_word_embeddings: true,
};
const hp: TrainHyper = {
  lr: 1e-6, weightDecay: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, clipLow: 0.2, clipHigh: 0.28,
  maxGradNorm: 1, lMax: 32768, mode: 'grpo++', microBatchTokens: 4096,
};

function batchOf(n: number) {
  let s = 12345;
  const ids = Int32Array.from({ length: n * seqLen }, () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % config.vocab_size);
  const offsets = Int32Array.from({ length: n + 1 }, (_, i) => i * seqLen);
  const mask = Float32Array.from(ids, (_, t) => (t % seqLen >= 64 ? 1 : 0));
  const advantages = Float32Array.from({ length: n }, (_, i) => (i % 2 ? -1 : 1));
  return { ids, offsets, mask, advantages };
}

async function timeIt(minSeconds: number, fn: () => Promise<number>): Promise<number> {
  await fn(); // warm-up (allocations, page faults)
  let tokens = 0;
  const t0 = performance.now();
  do tokens += await fn();
  while ((performance.now() - t0) / 1000 < minSeconds);
  return tokens / ((performance.now() - t0) / 1000);
}

interface Row { forward: number; train: number; generate: number }

async function measure(l: Learner, nSeq: number, gen: number, minSeconds: number): Promise<Row> {
  const b = batchOf(nSeq);
  const forward = await timeIt(minSeconds, async () => (await l.logprobs(b)).length);
  const train = await timeIt(minSeconds, async () => (await l.trainStep(b, hp)).tokens);
  const prompt = b.ids.slice(0, 16);
  let seed = 1;
  const generate = await timeIt(minSeconds, async () => (await l.generate(prompt, { maxNewTokens: gen, temperature: 1, seed: seed++ })).ids.length);
  return { forward, train, generate };
}

const dir = mkdtempSync(join(tmpdir(), 'gl-bench-'));
try {
  writeRandomCheckpoint(dir, config, 1);
  const fast = await Learner.load(dir, { device, threads });
  const opt = await measure(fast, nSeqs, genTokens, 2);
  fast.close();
  const ref = await Learner.load(dir, { device: 'cpu', threads: 1, naiveMatmul: true });
  const base = await measure(ref, 1, 32, 1);
  ref.close();
  const fmt = (v: number) => v.toFixed(0).padStart(10);
  console.log(`gpu-learner bench: device=${device} threads=${threads || 'all'} shape=tiny (V512 C128 L4 H4/2 D32 I384), ${nSeqs}x${seqLen} tokens per batch, generate ${genTokens} tokens`);
  console.log('operation            tokens/s    reference tokens/s   speed-up');
  console.log('-------------------  ----------  ------------------   --------');
  for (const k of ['forward', 'train', 'generate'] as const) {
    const name = { forward: 'forward (logprobs)', train: 'train (trainStep)', generate: 'generate (KV cache)' }[k];
    console.log(`${name.padEnd(19)}  ${fmt(opt[k])}  ${fmt(base[k]).padStart(18)}   ${(opt[k] / base[k]).toFixed(1).padStart(7)}x`);
  }
  console.log('reference: same CPU engine, threads=1, naive triple-loop matmul (1x512-token batch, 32 generated tokens)');
  console.log(`machine: ${cpus().length} CPU threads, load average ${loadavg().map((v) => v.toFixed(1)).join(' / ')} (wall-clock rates; a loaded machine lowers them)`);
  if (process.argv.includes('--fsdp') || process.argv.includes('--fsdp-shape')) await fsdpRows();
} finally {
  rmSync(dir, { recursive: true, force: true });
}

/** Training tokens/s, native vs fsdp (1 and 2 ranks), process-group start and checkpoint write times. */
async function fsdpRows(): Promise<void> {
  const shape = arg('fsdp-shape', 'tiny');
  const cfg: QwenConfig =
    shape === 'qwen3-0.6b'
      ? { ...config, vocab_size: 151936, hidden_size: 1024, intermediate_size: 3072, num_hidden_layers: 28, num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128, max_position_embeddings: 40960 }
      : { ...config };
  // --fsdp-layers N: the shape with N decoder layers (what fits a small machine)
  if (Number(arg('fsdp-layers', '0')) > 0) cfg.num_hidden_layers = Number(arg('fsdp-layers', '0'));
  const mdir = mkdtempSync(join(tmpdir(), 'gl-bench-fsdp-'));
  try {
    writeRandomCheckpoint(join(mdir, 'model'), cfg, 1);
    const b = batchOf(nSeqs);
    const steps = shape === 'tiny' ? 3 : 1;
    const nat = await Learner.load(join(mdir, 'model'), { threads: cpus().length });
    await nat.trainStep(b, hp);
    let t0 = performance.now();
    for (let i = 0; i < steps; i++) await nat.trainStep(b, hp);
    const native = (steps * b.ids.length) / ((performance.now() - t0) / 1000);
    nat.close();
    writeTrainBatch(join(mdir, 'batch.safetensors'), b);
    console.log(`\nfsdp engine: shape ${shape} (${cfg.num_hidden_layers} layers), ${nSeqs}x${seqLen} tokens per step, CPU (gloo, fp32), ${steps} timed step(s) after one warm-up`);
    console.log('engine            train tokens/s   vs native   group start s   load s   checkpoint write s');
    console.log(`native            ${native.toFixed(0).padStart(14)}   ${'1.00x'.padStart(9)}`);
    for (const n of [1, 2]) {
      t0 = performance.now();
      const tr = await FsdpLearner.start(fsdpOptions(n, { maxTokensPerMicroBatch: 4096, checkpointShardMB: 4096, threads: Math.max(1, Math.floor(cpus().length / n)), stallTimeoutSeconds: 3600 }));
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
        console.log(`fsdp ${n} rank${n > 1 ? 's' : ' '}      ${rate.toFixed(0).padStart(14)}   ${(rate / native).toFixed(2).padStart(8)}x   ${start.toFixed(1).padStart(13)}   ${load.toFixed(1).padStart(6)}   ${save.toFixed(2).padStart(18)}`);
      } finally {
        await tr.close();
      }
    }
    console.log('group start: torchrun up to every rank joined (imports included); load: model built on meta, sharded, weights read and broadcast');
    console.log(`fsdp: activation checkpointing on (one more forward per block), ${cpus().length} CPU threads split over the ranks; machine load average ${loadavg().map((v) => v.toFixed(1)).join(' / ')}`);
  } finally {
    rmSync(mdir, { recursive: true, force: true });
  }
}
