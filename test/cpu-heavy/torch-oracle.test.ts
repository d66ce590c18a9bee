// The native engine held to transformers' own Qwen3, Llama and Qwen2 in fp32 on the CPU (gpu-learner/fsdp/swerl_fsdp/
// oracle.py): packed log-probs, the GRPO++ loss and every parameter's gradient on tiny random checkpoints (tied and
// untied head, GQA and MQA, head_dim != hidden/heads, attention bias; a Llama and a Qwen2 with random biases, RoPE
// theta 1e5 and 1e6, written by transformers 5's save_pretrained), within the tolerances of
// gpu-learner/fsdp/crosscheck.ts; and two planted bugs (a wrong bias, a wrong theta) the oracle must catch. Both sides are fp32 and differ only
// in the order of their sums (OpenBLAS and attention blocks here, MKL/oneDNN and SDPA there), so:
//   log-probs 1e-5 nats: a log-prob below 8 in magnitude has an fp32 ulp of 4.8e-7, and the order differences on
//     its path add ≈ 2^-24/√6 · S · √(2 + 10L) with the logit scale S < 1 (≈ 1e-7): 1e-5 is 20 ulps;
//   loss 1e-5 relative: Σ coef·A·ρ with ρ = exp(Δ log p), so the log-prob bound, relative;
//   every gradient 2e-5 relative L2: √(12L + 6) order-dependent roundings of 2^-24 on the longest path, amplified
//     by cancellation in sums over ≤ 200 tokens (≈ √200): √30 · √200 · 2^-24 = 4.6e-6 for L = 2.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { formatRows, oracleMutantRows, oracleRows } from '../../gpu-learner/fsdp/crosscheck.ts';

const root = mkdtempSync(join(tmpdir(), 'torch-oracle-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('native engine = transformers fp32: log-probs, GRPO++ loss, every gradient, seven configs of three architectures; mutants caught', async () => {
  const rows = await oracleRows(root);
  const mutants = await oracleMutantRows(root);
  console.log(formatRows([...rows, ...mutants]));
  assert.equal(rows.length, 21);
  for (const r of rows) assert.ok(r.ok, `${r.config}: ${r.quantity} differs by ${r.diff} > ${r.tol} (${r.at ?? ''})`);
  assert.equal(mutants.length, 2);
  for (const m of mutants) assert.ok(m.ok, `mutant not caught: ${m.config}: ${m.quantity} = ${m.diff} <= ${m.tol}`);
});
