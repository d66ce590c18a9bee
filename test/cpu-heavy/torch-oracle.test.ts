// The native engine held to transformers' own Qwen3 in fp32 on the CPU (gpu-learner/fsdp/swerl_fsdp/oracle.py):
// packed log-probs, the GRPO++ loss and every parameter's gradient on tiny random checkpoints (tied and untied
// head, GQA and MQA, head_dim != hidden/heads, attention bias, and one written by transformers 5's
// save_pretrained), within the tolerances of gpu-learner/fsdp/crosscheck.ts. Both sides are fp32 and differ only
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

import { formatRows, oracleRows } from '../../gpu-learner/fsdp/crosscheck.ts';

const root = mkdtempSync(join(tmpdir(), 'torch-oracle-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('native engine = transformers fp32: log-probs, GRPO++ loss, every gradient, five configs', async () => {
  const rows = await oracleRows(root);
  console.log(formatRows(rows));
  assert.equal(rows.length, 15);
  for (const r of rows) assert.ok(r.ok, `${r.config}: ${r.quantity} differs by ${r.diff} > ${r.tol} (${r.at ?? ''})`);
});
