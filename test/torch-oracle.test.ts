// test-group: cpu-heavy
// The native engine held to transformers' own Qwen3 in fp32 on the CPU (gpu-learner/fsdp/swerl_fsdp/oracle.py):
// packed log-probs, the GRPO++ loss and every parameter's gradient on tiny random checkpoints (tied and untied
// head, GQA and MQA, head_dim != hidden/heads, attention bias, and one written by transformers 5's
// save_pretrained), within the tolerances of gpu-learner/fsdp/crosscheck.ts.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { formatRows, oracleRows } from '../gpu-learner/fsdp/crosscheck.ts';

const root = mkdtempSync(join(tmpdir(), 'torch-oracle-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('native engine = transformers fp32: log-probs, GRPO++ loss, every gradient, five configs', async () => {
  const rows = await oracleRows(root);
  console.log(formatRows(rows));
  assert.equal(rows.length, 15);
  for (const r of rows) assert.ok(r.ok, `${r.config}: ${r.quantity} differs by ${r.diff} > ${r.tol} (${r.at ?? ''})`);
});
