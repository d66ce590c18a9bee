// The native build's two GEMM back ends: OpenBLAS (the default) and the engine's own kernels (-DGL_BLAS=OFF, the
// no-dependency fallback, built here as gl_driver_noblas beside the BLAS build). Both compute the same model; and
// a machine without OpenBLAS is told which package to install.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { writeRandomCheckpoint, type QwenConfig } from '../../gpu-learner/index.ts';

const gl = new URL('../../gpu-learner/', import.meta.url).pathname;
const root = mkdtempSync(join(tmpdir(), 'gl-build-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('without OpenBLAS the build stops naming the package to install', () => {
  // PKG_CONFIG_LIBDIR replaces pkg-config's search path: openblas.pc is not found, as on a machine without it
  const r = spawnSync(process.execPath, [join(gl, 'build.mjs')], { encoding: 'utf8', env: { ...process.env, PKG_CONFIG_LIBDIR: join(root, 'none') } });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /OpenBLAS not found \(pkg-config openblas\): install Debian's libopenblas-dev/);
  assert.match(r.stderr, /GL_BLAS=OFF/);
});

test('the no-BLAS build (GL_BLAS=OFF kernels) computes what the BLAS build does: log-probs and every gradient', () => {
  // built by `scripts/setup.sh --test` (then this is a no-op), kept current here for a direct run
  const b = spawnSync('cmake', ['--build', join(gl, 'build'), '--target', 'gl_driver_noblas'], { encoding: 'utf8' });
  assert.equal(b.status, 0, b.stdout + b.stderr);
  const config: QwenConfig = {
    vocab_size: 300,
    hidden_size: 80,
    intermediate_size: 144,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 20,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    max_position_embeddings: 64,
  };
  const dir = join(root, 'model');
  writeRandomCheckpoint(dir, config, 5, { std: 0.2, normNoise: 0.2 });
  const run = (driver: string, cmd: string) => {
    const r = spawnSync(join(gl, 'build', driver), [cmd, dir, '--threads', '2'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  };
  const logprobs = (out: string) =>
    out
      .trim()
      .split('\n')
      .map((l) => Number(l.split(' ')[2]));
  const analytic = (out: string) => new Map([...out.matchAll(/^(\S+)\s+analytic\s+(\S+)\s+numeric\s+(\S+)/gm)].map((m) => [m[1], [Number(m[2]), Number(m[3])]]));
  const [lpBlas, lpOwn] = [logprobs(run('gl_driver', 'forward')), logprobs(run('gl_driver_noblas', 'forward'))];
  assert.equal(lpOwn.length, 16);
  // fp32 both ways, products summed in another order (OpenBLAS's blocking vs one sequential sum per element):
  // a few ulps of log-probs of magnitude ≈ ln V ≈ 5.7 (ulp 4.8e-7), printed to 1e-7.
  const worstLp = Math.max(...lpOwn.map((v, i) => Math.abs(v - lpBlas[i])));
  assert.ok(worstLp <= 1e-5, `log-probs differ by ${worstLp}`);
  const [gBlas, gOwn] = [analytic(run('gl_driver', 'gradcheck')), analytic(run('gl_driver_noblas', 'gradcheck'))];
  assert.equal(gOwn.size, gBlas.size);
  assert.ok(gOwn.size >= 20);
  for (const [name, [a, fd]] of gOwn) {
    const [ab] = gBlas.get(name)!;
    // ∇L·u over a tensor is a sum of up to I·C = 11,520 products of random sign; each side's order-only rounding is
    // ≈ √n·2^-24 of the terms' magnitude, a few 1e-6 of the sum: 1e-4 relative (plus 1e-9 for sums near 0).
    assert.ok(Math.abs(a - ab) <= 1e-4 * Math.max(Math.abs(a), Math.abs(ab)) + 1e-9, `${name}: ${a} vs ${ab}`);
    // and the fallback's backward is right on its own: the central difference agrees (as gpu-learner-gradcheck)
    assert.ok(Math.abs(a - fd) <= 2e-2 * Math.max(Math.abs(a), Math.abs(fd)) + 3e-4, `${name}: analytic ${a} vs numeric ${fd}`);
  }
});
