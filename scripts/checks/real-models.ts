// Checks of an imported real model across engines (issue 27), shared by test/temporal/real-models.test.ts (SmolLM2)
// and `npm run check:real-models` (Qwen2.5-Coder-0.5B too). Each returns rows of measured differences against
// tolerances written down with their reason:
//   oracle:  the native engine vs transformers' causal LM in fp32 (gpu-learner/fsdp/swerl_fsdp/oracle.py) on a packed
//            batch of chat-templated text: log-probs, the GRPO++ loss and every gradient;
//   engines: one AdamW step from the same batch on the native engine and on the FSDP engine (1 rank): loss, grad
//            norm and the weight change;
//   probe:   vLLM synced to a trained checkpoint (DESIGN §9), and llama-server serving the checkpoint exported as a GGUF;
//   eval:    a one-task SWE evaluation, through our policy server or vLLM.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PackedTrainBatch } from '../../lib/grpo.ts';
import { openCheckpointTensors, openSafetensors } from '../../lib/safetensors-file.ts';
import { loadTokenizer } from '../../lib/tokenizer.ts';
import { Learner, type TrainHyper } from '../../gpu-learner/index.ts';
import { FsdpLearner, fsdpPython, writeTrainBatch } from '../../gpu-learner/fsdp/index.ts';
import { fsdpOptions, mutantRow, rel, relL2, row, type Row } from '../../gpu-learner/fsdp/crosscheck.ts';
import { chatCorpus } from './chat-templates.ts';
import type { ProbeResult } from '../../lib/sync-probe.ts';
import type { PolicyClient } from '../../lib/types.ts';
import type { EvalConfigInput } from '../../lib/eval/config.ts';

type EvalModelInput = EvalConfigInput['model'];

export type { Row };
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const FSDP_PKG = join(ROOT, 'gpu-learner', 'fsdp');

/**
 * Tolerances on a real model (fp32 everywhere; the engines differ in accumulation order, GEMM blocking and threads).
 * A real model is deeper (24–30 layers) and wider (vocab 49K–152K, hidden up to 4,864) than the oracle's tiny configs,
 * so fp32 rounding (unit roundoff 6e-8) accumulates over more terms. Measured (2026-11-28, SmolLM2 / Qwen2.5-Coder):
 * log-probs 2.9e-5 / 6.7e-5, loss 6.0e-6 / 2.0e-5, gradients 1.8e-4 / 2.2e-4 (the worst tensor is an RMSNorm weight:
 * its gradient sums products over every token and hidden unit, terms that largely cancel, so its relative error is
 * the largest), FSDP step loss 9.0e-6 / 2.0e-5 and grad norm 1.3e-5 / 1.3e-4 (11-29). The bounds leave 3–5× margin and stay below
 * what a planted bug gives (a wrong bias or RoPE theta: ≥ 7e-4 in log-probs on the tiny configs).
 */
export const REAL_TOLERANCE = {
  /** nats, max |Δ| over tokens */
  logprobs: 2e-4,
  /** relative */
  loss: 1e-4,
  /** relative L2 per tensor (RMSNorm weights are the worst, above) */
  gradient: 1e-3,
  /**
   * relative. The norms of two gradients differ by at most the norm of their difference (the triangle inequality),
   * so the relative difference of the norms is at most the relative L2 difference of the whole gradient, which the
   * per-tensor bound above caps: the same 1e-3. Measured: 1.3e-5 on SmolLM2, 1.27e-4 on Qwen2.5-Coder-0.5B (its
   * gradients' worst tensor 2.2e-4), where an earlier bound of 1e-4, tighter than the gradients' own, failed it.
   */
  gradNorm: 1e-3,
  /**
   * relative L2 of one AdamW step's weight change. Adam's first step is lr·g/(|g|+ε) per weight: ±lr wherever |g| ≫ ε,
   * so where |g| is near ε (1e-8) a rounding-sized change of g moves the update by up to lr (measured 5.1e-3 on
   * SmolLM2, an RMSNorm weight). A sign error or a missing term moves it by 2·lr everywhere it acts (rel-L2 ≫ 0.1).
   */
  weights: 2e-2,
} as const;

/** A row of a real-model check: the oracle's and the FSDP cross-check's, and the probe after a vLLM sync. */
export type RealRow = Omit<Row, 'check'> & { check: Row['check'] | 'probe' };

/** The rows as a table (mutants: caught when their difference is above the tolerance). */
export function formatRealRows(rows: readonly RealRow[]): string {
  const lines = [
    'check   model                        quantity                                          largest diff   tolerance  ok      at',
    '------  ---------------------------  ------------------------------------------------  ------------  ----------  ------  ----',
  ];
  for (const r of rows) {
    const ok = r.check === 'mutant' ? (r.ok ? 'caught' : 'MISSED') : r.ok ? 'ok' : 'OVER';
    lines.push(
      `${r.check.padEnd(6)}  ${r.config.padEnd(27)}  ${r.quantity.padEnd(48)}  ${r.diff.toExponential(2).padStart(12)}  ${(Number(r.tol.toExponential(0)) === r.tol ? r.tol.toExponential(0) : r.tol.toExponential(2)).padStart(10)}  ${ok.padEnd(6)}  ${r.at ?? ''}`,
    );
  }
  return lines.join('\n');
}

export const REAL_HP: TrainHyper = { lr: 1e-5, weightDecay: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, maxGradNorm: 1, mode: 'grpo++', clipLow: 0.2, clipHigh: 0.28, lMax: 512 };

/**
 * A packed batch of real text: the corpus's conversations through the model's own chat template, each cut to at most
 * `maxLen` tokens, mixed advantages, a masked span (the prompt-like first tokens of each sequence).
 */
export async function realTextBatch(dir: string, sequences = 4, maxLen = 96): Promise<PackedTrainBatch> {
  const tok = await loadTokenizer(dir);
  const seqs = chatCorpus()
    .slice(0, sequences)
    .map((c) => tok.encode(tok.applyChatTemplate(c.messages, { addGenerationPrompt: false, ...(c.tools ? { tools: c.tools } : {}) })).slice(0, maxLen));
  const offsets = [0];
  for (const s of seqs) offsets.push(offsets.at(-1)! + s.length);
  const ids = Int32Array.from(seqs.flat());
  const mask = new Float32Array(ids.length);
  seqs.forEach((s, i) => mask.fill(1, offsets[i]! + Math.min(8, s.length), offsets[i + 1]));
  const advantages = Float32Array.from(seqs, (_, i) => [1, -0.5, 0.75, -1][i % 4]!);
  return { ids, offsets: Int32Array.from(offsets), mask, advantages };
}

function runOracle(python: string, cases: string): void {
  const r = spawnSync(python, ['-m', 'swerl_fsdp.oracle', '--cases', cases], { env: { ...process.env, PYTHONPATH: FSDP_PKG, TRANSFORMERS_VERBOSITY: 'error' }, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`swerl_fsdp.oracle failed (exit ${r.status}):\n${r.stderr.slice(-3000)}`);
}

/** The oracle on a real checkpoint: native engine vs transformers, same batch (old log-probs shifted so every clip branch occurs). */
export async function realOracleRows(dir: string, work: string, name: string, o: { threads?: number; python?: string } = {}): Promise<RealRow[]> {
  mkdirSync(work, { recursive: true });
  const batch = await realTextBatch(dir);
  const l = await Learner.load(dir, { threads: o.threads ?? 2 });
  let lp0: Float32Array, g: { loss: number; grads: Map<string, Float32Array> };
  try {
    lp0 = await l.logprobs(batch);
    batch.oldLogprobs = Float32Array.from(lp0, (v, t) => Math.min(0, v - [0.4, -0.4, 0][t % 3]!));
    g = await l.debugGradients(batch, REAL_HP);
  } finally {
    l.close();
  }
  writeTrainBatch(join(work, 'batch.safetensors'), batch);
  writeFileSync(
    join(work, 'cases.json'),
    JSON.stringify([{ model: dir, batch: join(work, 'batch.safetensors'), out: join(work, 'oracle'), lMax: REAL_HP.lMax, clipLow: REAL_HP.clipLow, clipHigh: REAL_HP.clipHigh }]),
  );
  runOracle(o.python ?? fsdpPython('cpu'), join(work, 'cases.json'));
  const t = openSafetensors(join(work, 'oracle', 'oracle.safetensors'));
  try {
    const ref = JSON.parse(readFileSync(join(work, 'oracle', 'oracle.json'), 'utf8')) as { loss: number };
    const tl = t.read('logprobs');
    let lpDiff = 0,
      lpAt = 0;
    for (let i = 0; i < tl.length; i++) if (Math.abs(tl[i]! - lp0[i]!) > lpDiff) [lpDiff, lpAt] = [Math.abs(tl[i]! - lp0[i]!), i];
    const rows: RealRow[] = [
      row('oracle', name, `log-probs max |Δ| (nats, ${tl.length} tokens)`, lpDiff, REAL_TOLERANCE.logprobs, `token ${lpAt}`),
      row('oracle', name, 'GRPO++ loss, relative', rel(g.loss, ref.loss), REAL_TOLERANCE.loss),
    ];
    let worst = 0,
      at = '';
    for (const [p, grad] of g.grads) {
      const e = t.names.includes('grad.' + p) ? relL2(grad, t.read('grad.' + p)) : Infinity;
      if (e > worst) [worst, at] = [e, Number.isFinite(e) ? p : `no torch gradient for ${p}`];
    }
    const missing = t.names.filter((k) => k.startsWith('grad.') && !g.grads.has(k.slice(5)));
    rows.push(
      row('oracle', name, `every gradient (${g.grads.size}), rel-L2`, missing.length ? Infinity : worst, REAL_TOLERANCE.gradient, missing.length ? `torch-only ${missing[0]}` : at),
    );
    return rows;
  } finally {
    t.close();
  }
}

/** One AdamW step from the same real-text batch on the native engine and on the FSDP engine (1 rank). */
export async function realEngineStepRows(dir: string, work: string, name: string, o: { threads?: number; python?: string } = {}): Promise<RealRow[]> {
  mkdirSync(work, { recursive: true });
  const batch = await realTextBatch(dir);
  const l = await Learner.load(dir, { threads: o.threads ?? 2 });
  let native: { loss: number; gradNorm: number };
  try {
    batch.oldLogprobs = await l.logprobs(batch);
    native = await l.trainStep(batch, REAL_HP);
    await l.save(join(work, 'native'));
  } finally {
    l.close();
  }
  const path = join(work, 'batch.safetensors');
  writeTrainBatch(path, batch);
  const trainer = await FsdpLearner.start(
    fsdpOptions(1, {
      threads: o.threads ?? 2,
      maxTokensPerMicroBatch: 4096,
      checkpointShardMB: 2048,
      stallTimeoutSeconds: 1800,
      collectiveTimeoutSeconds: 1800,
      ...(o.python ? { python: o.python } : {}),
    }),
  );
  let fsdp: { loss: number; gradNorm: number };
  try {
    await trainer.load(dir);
    fsdp = await trainer.trainStep(path, REAL_HP);
    await trainer.save(join(work, 'fsdp'), dir);
  } finally {
    await trainer.close();
  }
  // tensor by tensor: three copies of a 0.5B model do not fit comfortably beside the engines
  const [w0, wn, wf] = [openCheckpointTensors(dir), openCheckpointTensors(join(work, 'native')), openCheckpointTensors(join(work, 'fsdp'))];
  let worst = 0,
    at = '';
  try {
    for (const p of wn.names) {
      if (!wf.names.includes(p)) return [row('fsdp', name, 'weight change after 1 step, rel-L2', Infinity, REAL_TOLERANCE.weights, `FSDP checkpoint has no ${p}`)];
      const a = w0.names.includes(p) ? w0.read(p) : w0.read('model.embed_tokens.weight'); // a tied head starts as the embeddings
      const b = wn.read(p),
        c = wf.read(p);
      const e = relL2(
        c.map((v, i) => v - a[i]!),
        b.map((v, i) => v - a[i]!),
      );
      if (e > worst) [worst, at] = [e, p];
    }
  } finally {
    [w0, wn, wf].forEach((r) => r.close());
  }
  return [
    row('fsdp', name, 'loss, relative (FSDP vs native)', rel(fsdp.loss, native.loss), REAL_TOLERANCE.loss),
    row('fsdp', name, 'grad norm, relative', rel(fsdp.gradNorm, native.gradNorm), REAL_TOLERANCE.gradNorm),
    row('fsdp', name, 'weight change after 1 step, rel-L2', worst, REAL_TOLERANCE.weights, at),
  ];
}

export interface VllmProbeResult {
  rows: RealRow[];
  /** seconds vLLM took to serve the model, and to reload checkpoint 1 */
  startSeconds: number;
  syncSeconds: number;
  /** the probe's tolerance and largest difference after the sync */
  probe: ProbeResult;
}

/**
 * vLLM serving an imported model, synced to a trained checkpoint and verified by the probe (DESIGN §9): checkpoint 1 =
 * one native AdamW step on real text; vLLM started on checkpoint 0 reloads checkpoint 1 in place (`/collective_rpc
 * reload_weights`, a tied head served untied); the probe's log-probs must equal the learner's on checkpoint 1 (fp32:
 * to rounding; bf16: the mean within 3× the learner's bf16 emulation) and must not pass against checkpoint 0 (a stale sync is caught).
 */
export async function vllmProbeRows(
  dir: string,
  work: string,
  name: string,
  o: { dtype: 'float32' | 'bfloat16'; threads?: number; maxModelLen?: number },
): Promise<VllmProbeResult> {
  const { startVllm } = await import('../../services/vllm.ts');
  const { createPolicyClient, createInProcessPolicyClient } = await import('../../lib/policy/completions.ts');
  const { probeServedCheckpoint } = await import('../../activities/learner.ts');
  const { untiedHeadFile } = await import('../../lib/checkpoint-layout.ts');
  mkdirSync(work, { recursive: true });
  const ckpt1 = join(work, 'ckpt-1');
  // a private copy of checkpoint 0: vLLM's untied head file is written beside its weights
  const ckpt0 = join(work, 'ckpt-0');
  for (const [from, to] of [
    [dir, ckpt0],
    [dir, ckpt1],
  ] as const) {
    mkdirSync(to, { recursive: true });
    for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(from, f), join(to, f));
  }
  symlinkSync(join(dir, 'model.safetensors'), join(ckpt0, 'model.safetensors'));
  // checkpoint 1 first, by a learner closed before the others load: a 0.5B model's optimizer state is 4× its weights
  const trainer = await Learner.load(dir, { threads: o.threads ?? 2 });
  try {
    const batch = await realTextBatch(dir);
    batch.oldLogprobs = await trainer.logprobs(batch);
    await trainer.trainStep(batch, REAL_HP);
    await trainer.save(ckpt1);
  } finally {
    trainer.close();
  }
  const l0 = await Learner.load(dir, { threads: o.threads ?? 2 });
  const l1 = await Learner.load(ckpt1, { threads: o.threads ?? 2 });
  const vllm = await startVllm({ model: ckpt0, servedModelName: 'policy', dtype: o.dtype, maxModelLen: o.maxModelLen ?? 1024, logFile: join(work, 'vllm.log') }).catch(
    (e: unknown) => {
      l0.close();
      l1.close();
      throw e;
    },
  );
  try {
    const client = createPolicyClient({ baseUrl: vllm.url, model: 'policy', weightSync: 'vllm' });
    const dtype = (await client.vllmInfo()).dtype;
    const before = await probeServedCheckpoint(client, l0, ckpt0, dtype);
    await untiedHeadFile(ckpt1);
    const t0 = Date.now();
    await client.loadWeights(ckpt1, 1);
    const syncSeconds = (Date.now() - t0) / 1000;
    const after = await probeServedCheckpoint(client, l1, ckpt1, dtype);
    const stale = await probeServedCheckpoint(client, l0, ckpt0, dtype);
    // how far the step moved the probe, in fp32 (checkpoint 1 sampling, checkpoint 0 scoring): a stale server must be
    // told apart when that is above the tolerance
    const move = await probeServedCheckpoint(createInProcessPolicyClient(l1), l0, ckpt1, 'float32');
    const tag = `${name}, vLLM ${dtype}`;
    // fp32: the largest |Δ|; half precision: the mean, against 3× the learner's own emulation (lib/sync-probe.ts)
    const stat = (p: ProbeResult) => (p.statistic === 'mean' ? p.meanAbsDelta : p.maxAbsDelta);
    const what = `${after.statistic} |Δ log p|`;
    return {
      rows: [
        row('probe', tag, `checkpoint 0 served at start, ${what}`, stat(before), before.tolerance),
        row('probe', tag, `checkpoint 1 after the sync, ${what}`, stat(after), after.tolerance),
        // caught; or missed though the step moved the probe past the bound; or a step within bf16's own noise
        stat(stale) > stale.tolerance || move.meanAbsDelta > stale.tolerance
          ? mutantRow('mutant', tag, `probe of ckpt 1 against ckpt 0 (stale), ${what}`, stat(stale), stale.tolerance)
          : {
              ...row('probe', tag, `stale (ckpt 0 expected): the step moved the probe by mean ${move.meanAbsDelta.toExponential(1)} in fp32`, stat(stale), stale.tolerance),
              ok: true,
              at: 'below the bound: no probe can tell',
            },
      ],
      startSeconds: vllm.startSeconds,
      syncSeconds,
      probe: after,
    };
  } finally {
    await vllm.close();
    l0.close();
    l1.close();
  }
}

/**
 * llama-server's `/completion` as the probe's completion client: greedy, past an end-of-text token (the probe's prompt
 * is ids spread over the vocabulary, after which a model may well end at once), with the generated ids and their
 * log-probs (of a softmax of the raw logits, whatever the samplers).
 */
export function llamaProbeClient(url: string): Pick<PolicyClient, 'complete'> {
  return {
    async complete(req) {
      const r = await fetch(`${url}/completion`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: req.promptIds, n_predict: req.maxTokens, temperature: 0, ignore_eos: true, n_probs: 1, return_tokens: true, cache_prompt: false }),
        signal: AbortSignal.timeout(120_000),
      });
      if (!r.ok) throw new Error(`llama-server /completion: HTTP ${r.status} ${await r.text()}`);
      const body = (await r.json()) as { tokens: number[]; completion_probabilities: { id: number; logprob: number }[]; stop_type?: string };
      // llama-server leaves out the probability of a token whose text is an incomplete UTF-8 sequence (Qwen's Q4_K_M
      // GGUF: one of 16), so the continuation is cut before the first token without one: a prefix is a continuation too
      const probs = body.completion_probabilities;
      let n = 0;
      while (n < body.tokens.length && probs[n]?.id === body.tokens[n]) n++;
      if (n === 0) throw new Error(`llama-server /completion: no probability for its first token ${body.tokens[0]}`);
      const cut = n < body.tokens.length;
      return { ids: body.tokens.slice(0, n), logprobs: probs.slice(0, n).map((p) => p.logprob), finishReason: cut || body.stop_type === 'limit' ? 'length' : 'stop' };
    },
  };
}

/**
 * The probe's tolerance on llama-server serving an f32 GGUF (no flash attention, f32 KV cache). Its log-probs are
 * log(p) of a softmax whose normalizer is summed in fp32 over the whole vocabulary (49K–152K terms), so every token's
 * log-prob moves alike: SmolLM2 (49K) measured 1.6e-4 max |Δ| against the native
 * engine (1.1e-4 mean; vLLM: 1.7e-5), Qwen2.5-Coder-0.5B (152K) 6.1e-4.
 * 1e-3 stays 100× below a stale or quantized model (≥ 0.1; the Q4 GGUFs served instead: 0.20). With llama.cpp's
 * CPU flash attention (K and V in f16) the same file measured 4.8e-3: it is turned off here.
 */
export const LLAMA_PROBE_TOLERANCE = 1e-3;

export interface LlamaProbeResult {
  rows: RealRow[];
  /** the exported GGUF, and how long the export took */
  gguf: string;
  exportSeconds: number;
  /** the probe of the exported file (its `ok` is against the fp32 tolerance of a vLLM server; the row uses LLAMA_PROBE_TOLERANCE) */
  probe: ProbeResult;
}

/**
 * llama-server serving the checkpoint directory: `swerl model export-gguf` (llama.cpp's converter, f32) writes it
 * as a GGUF, the server loads it with an f32 KV cache and no flash attention, and the probe (DESIGN §9) compares its greedy
 * continuation's log-probs with the native engine's on the directory: the same model within LLAMA_PROBE_TOLERANCE. The GGUF the import
 * started from is served too, as the mutant: its Q4 kernels (activations rounded to 8 bits) are another model.
 */
export async function llamaProbeRows(dir: string, work: string, name: string, o: { quantizedGguf?: string; threads?: number } = {}): Promise<LlamaProbeResult> {
  const { ensureLlama, startLlamaServer } = await import('../../services/llama-server.ts');
  const { exportGguf } = await import('../model-import/export-gguf.ts');
  const { probeServedCheckpoint } = await import('../../activities/learner.ts');
  mkdirSync(work, { recursive: true });
  const install = ensureLlama(ROOT);
  const exported = await exportGguf({ model: dir, out: join(work, 'model-f32.gguf'), outtype: 'f32', converter: install.converter });
  const learner = await Learner.load(dir, { threads: o.threads ?? 2 });
  const serve = async (gguf: string) => {
    const server = await startLlamaServer({
      binary: install.binary,
      model: gguf,
      ctxSize: 256,
      threads: o.threads ?? 2,
      args: ['--cache-type-k', 'f32', '--cache-type-v', 'f32', '--flash-attn', 'off'],
    });
    try {
      return await probeServedCheckpoint(llamaProbeClient(server.url), learner, dir, 'float32');
    } finally {
      await server.stop();
    }
  };
  try {
    const probe = await serve(exported.file);
    const rows: RealRow[] = [row('probe', `${name}, llama-server f32`, 'exported GGUF served, max |Δ log p|', probe.maxAbsDelta, LLAMA_PROBE_TOLERANCE)];
    if (o.quantizedGguf) {
      const q = await serve(o.quantizedGguf);
      rows.push(mutantRow('mutant', `${name}, llama-server`, 'the quantized GGUF served instead', q.maxAbsDelta, LLAMA_PROBE_TOLERANCE));
    }
    return { rows, gguf: exported.file, exportSeconds: exported.seconds, probe };
  } finally {
    learner.close();
  }
}

export interface OneTaskEval {
  /** the episode's end reason, steps, generated tokens and seconds */
  end: string;
  api: string;
  steps: number;
  responseTokens: number;
  seconds: number;
  errors: number;
  completed: number;
  /** summary.txt of the evaluation */
  summary: string;
}

/**
 * A one-task SWE evaluation (`swerl eval` against a Temporal dev server and one `swerl worker` process) of `model`:
 * an imported directory served by the worker's policy server, or a server anywhere (vLLM). maxSteps/tokens kept small.
 */
export async function oneTaskEval(model: EvalModelInput, work: string, o: { taskId?: string; maxSteps?: number; evalId?: string } = {}): Promise<OneTaskEval> {
  const { requireDocker, imagesFor } = await import('../../test/helpers/docker.ts');
  const { sweTask, sweTasksFile, TASK } = await import('../../test/helpers/swe-tasks.ts');
  const { spawnWorker, startTestTemporal } = await import('../../test/helpers/temporal.ts');
  const { evaluate } = await import('../commands/eval.ts');
  const { readEvalEpisodes } = await import('../../activities/evaluation.ts');
  const { removeSandboxContainers } = await import('../../activities/sandbox/docker.ts');
  const { fileStoreUrl, openStore } = await import('../../lib/store.ts');
  await requireDocker();
  const task = await sweTask(o.taskId ?? TASK.rootModule);
  await imagesFor([task]);
  mkdirSync(work, { recursive: true });
  const t = await startTestTemporal();
  const worker = spawnWorker(['--queues', 'rollout,learner', '--address', t.server.address, '--max-rollouts', '1', '--threads', '2'], join(work, 'worker.log'));
  const evalId = o.evalId ?? 'real-one';
  const store = fileStoreUrl(join(work, 'store'));
  try {
    const config = {
      evalId,
      tasksFile: await sweTasksFile(),
      tasks: [task.instance_id],
      model,
      sampling: { temperature: 0.7, topP: 0.95 },
      maxSteps: o.maxSteps ?? 3,
      maxTokensPerTurn: 96,
      responseBudget: 512,
      concurrency: 1,
      heartbeatTimeoutSeconds: 60,
      store: { url: store },
    };
    writeFileSync(join(work, 'eval.json'), JSON.stringify(config));
    const r = await evaluate({ config: join(work, 'eval.json'), out: join(work, 'out'), address: t.server.address, quiet: true });
    const [e] = await readEvalEpisodes(openStore(store), evalId);
    return {
      end: e?.end ?? 'none',
      api: e?.api ?? 'none',
      steps: e?.steps ?? 0,
      responseTokens: e?.responseTokens ?? 0,
      seconds: e?.seconds ?? 0,
      errors: r.result.summary.episodes.errors,
      completed: r.result.summary.episodes.completed,
      summary: readFileSync(join(work, 'out', 'summary.txt'), 'utf8'),
    };
  } finally {
    worker.kill('SIGTERM');
    await new Promise((res) => worker.once('exit', res));
    await removeSandboxContainers({ labels: { 'swerl.pid': String(worker.pid) } });
    await t.close();
  }
}
