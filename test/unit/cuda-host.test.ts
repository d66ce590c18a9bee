// CUDA backend, host side only (no GPU here or in CI): device selection fails clearly, and the GPU-machine
// scripts are well-formed. The numerical checks run on the GPU machine (scripts/gpu-check.sh, docs/cuda.md).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Learner, cudaBuilt } from '../../gpu-learner/index.ts';

test("Learner.load(dir, {device:'cuda'}) without a GPU rejects with a clear message", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gl-cuda-'));
  writeFileSync(join(dir, 'config.json'), '{}');
  // Built without nvcc: "CUDA backend not built"; built with CUDA on a GPU-less machine: "no GPU is visible".
  await assert.rejects(Learner.load(dir, { device: 'cuda' }), (e: Error) => {
    assert.match(e.message, cudaBuilt() ? /CUDA requested but no GPU is visible \(cudaGetDeviceCount=0\)/ : /CUDA backend not built/);
    return true;
  });
});

test('GPU-machine scripts parse (bash -n, python compile)', () => {
  for (const f of ['scripts/gpu-check.sh', 'scripts/ensure-cuda-toolchain.sh']) {
    const r = spawnSync('bash', ['-n', f], { encoding: 'utf8' });
    assert.equal(r.status, 0, `${f}: ${r.stderr}`);
  }
  const py = spawnSync(
    'python3',
    ['-c', 'import ast,sys\nfor f in sys.argv[1:]: ast.parse(open(f).read(), f)', 'gpu-learner/tools/check_torch.py', 'gpu-learner/tools/bench_torch.py'],
    { encoding: 'utf8' },
  );
  // python3 is part of the set-up (scripts/ensure-python.sh): without it this check has not run, which is a failure
  assert.ifError(py.error);
  assert.equal(py.status, 0, py.stderr);
});
