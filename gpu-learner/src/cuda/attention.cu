// Causal GQA attention over packed variable-length sequences, flash-style: K/V streamed through shared
// memory in tiles of 32 keys, online softmax, so memory is O(T·D), never O(T²) (FlashAttention-2,
// Dao 2023). fp32 arithmetic on CUDA cores; bf16 in and out.
// Block = 4 warps. Forward and dQ: a block owns 32 query rows of one head (8 rows per warp); for a row,
// lane j scores key j of the tile, then lanes switch to owning head dims d = lane + 32k for P·V.
// dK/dV: a block owns 32 keys of one kv head (8 keys per warp) and walks every query row (of every q
// head of its group) at or after them, so dK, dV are written once with no atomics; dQ is a separate
// pass (recomputes the scores) for the same reason.
#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>

#include "check.cuh"
#include "kernels.cuh"
#include "warp.cuh"

namespace gl::cuda {

namespace {

constexpr int kTile = 32, kWarps = 4, kRowsPerWarp = kTile / kWarps, kBlock = kWarps * 32;

// dst (32, ld) fp32 ← rows [row0, row0+32) of src (bf16, row stride `stride`, column offset col), zero past n.
__device__ void load_tile(float* dst, int ld, const bf16* src, int64_t base, int row0, int n, int64_t stride, int64_t col, int D) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    dst[r * ld + d] = row0 + r < n ? __bfloat162float(src[(base + row0 + r) * stride + col + d]) : 0.0f;
  }
}

__device__ __forceinline__ float dot_rows(const float* a, const float* b, int D) {
  float s = 0;
#pragma unroll 8
  for (int d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

// grid (ceil(max_q_len/32), n_seqs, Hq). smem: Q (32,D) | K (32,D+1) | V (32,D)
template <int DPL>
__global__ void __launch_bounds__(kBlock) attn_fwd_kernel(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, AttnShape a) {
  extern __shared__ float sh[];
  const int D = a.D, s = blockIdx.y, h = blockIdx.z, g = h / (a.Hq / a.Hkv);
  const int64_t qa = a.q_offs[s], ka = a.k_offs[s];
  const int qn = a.q_offs[s + 1] - int(qa), kn = a.k_offs[s + 1] - int(ka), i0 = blockIdx.x * kTile;
  if (i0 >= qn) return;
  float *Qs = sh, *Ks = Qs + kTile * D, *Vs = Ks + kTile * (D + 1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  load_tile(Qs, D, q, qa, i0, qn, a.q_stride, int64_t(h) * D, D);
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][DPL];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    m[rr] = -INFINITY;
    l[rr] = 0;
#pragma unroll
    for (int c = 0; c < DPL; c++) o[rr][c] = 0;
  }
  const int last = min(i0 + kTile, qn) - 1;
  const int k_end = min(kn, a.q_pos0 + last + 1);
  for (int j0 = 0; j0 < k_end; j0 += kTile) {
    __syncthreads();
    load_tile(Ks, D + 1, k, ka, j0, kn, a.kv_stride, int64_t(g) * D, D);
    load_tile(Vs, D, v, ka, j0, kn, a.kv_stride, int64_t(g) * D, D);
    __syncthreads();
    const int j = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; rr++) {
      const int r = warp * kRowsPerWarp + rr, i = i0 + r;
      if (i >= qn) continue;  // warp-uniform
      const bool valid = j < kn && j <= a.q_pos0 + i;
      const float sc = valid ? dot_rows(Qs + r * D, Ks + lane * (D + 1), D) * a.scale : -INFINITY;
      const float tmax = warp_max(sc);
      if (tmax == -INFINITY) continue;
      const float mn = fmaxf(m[rr], tmax);
      const float p = valid ? __expf(sc - mn) : 0.0f;
      const float corr = __expf(m[rr] - mn);
      l[rr] = l[rr] * corr + warp_sum(p);
      m[rr] = mn;
#pragma unroll
      for (int c = 0; c < DPL; c++) o[rr][c] *= corr;
      for (int jj = 0; jj < kTile; jj++) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int c = 0; c < DPL; c++) {
          const int d = lane + 32 * c;
          if (d < D) o[rr][c] += pj * Vs[jj * D + d];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = i0 + warp * kRowsPerWarp + rr;
    if (i >= qn) continue;
    const float inv = l[rr] > 0 ? 1.0f / l[rr] : 0.0f;
#pragma unroll
    for (int c = 0; c < DPL; c++) {
      const int d = lane + 32 * c;
      if (d < D) out[(qa + i) * a.q_stride + int64_t(h) * D + d] = __float2bfloat16(o[rr][c] * inv);
    }
    if (lane == 0) lse[(qa + i) * a.Hq + h] = m[rr] + logf(l[rr]);
  }
}

// delta (T,Hq) = Σ_d dO·O per row (warp per row)
__global__ void attn_delta_kernel(float* delta, const bf16* dout, const bf16* out, int64_t rows, int D, int64_t stride, int Hq) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = row / Hq, h = row % Hq, base = t * stride + h * D;
  float s = 0;
  for (int d = lane; d < D; d += 32) s += __bfloat162float(dout[base + d]) * __bfloat162float(out[base + d]);
  s = warp_sum(s);
  if (lane == 0) delta[row] = s;
}

// dQ pass. grid as forward. smem: Q (32,D) | dO (32,D) | K (32,D+1) | V (32,D+1)
// ds_ij = p_ij·(dp_ij − delta_i)·scale with p_ij = exp(s_ij − lse_i), dp_ij = dO_i·V_j ; dQ_i = Σ_j ds_ij K_j
template <int DPL>
__global__ void __launch_bounds__(kBlock) attn_bwd_dq_kernel(float* dq, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                                              const float* lse, const float* delta, AttnShape a) {
  extern __shared__ float sh[];
  const int D = a.D, s = blockIdx.y, h = blockIdx.z, g = h / (a.Hq / a.Hkv);
  const int64_t qa = a.q_offs[s], ka = a.k_offs[s];
  const int qn = a.q_offs[s + 1] - int(qa), kn = a.k_offs[s + 1] - int(ka), i0 = blockIdx.x * kTile;
  if (i0 >= qn) return;
  float *Qs = sh, *dOs = Qs + kTile * D, *Ks = dOs + kTile * D, *Vs = Ks + kTile * (D + 1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  load_tile(Qs, D, q, qa, i0, qn, a.q_stride, int64_t(h) * D, D);
  load_tile(dOs, D, dout, qa, i0, qn, a.q_stride, int64_t(h) * D, D);
  float acc[kRowsPerWarp][DPL], rl[kRowsPerWarp], rd[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = i0 + warp * kRowsPerWarp + rr;
    rl[rr] = i < qn ? lse[(qa + i) * a.Hq + h] : 0.0f;
    rd[rr] = i < qn ? delta[(qa + i) * a.Hq + h] : 0.0f;
#pragma unroll
    for (int c = 0; c < DPL; c++) acc[rr][c] = 0;
  }
  const int last = min(i0 + kTile, qn) - 1;
  const int k_end = min(kn, a.q_pos0 + last + 1);
  for (int j0 = 0; j0 < k_end; j0 += kTile) {
    __syncthreads();
    load_tile(Ks, D + 1, k, ka, j0, kn, a.kv_stride, int64_t(g) * D, D);
    load_tile(Vs, D + 1, v, ka, j0, kn, a.kv_stride, int64_t(g) * D, D);
    __syncthreads();
    const int j = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; rr++) {
      const int r = warp * kRowsPerWarp + rr, i = i0 + r;
      if (i >= qn) continue;
      const bool valid = j < kn && j <= a.q_pos0 + i;
      float ds = 0;
      if (valid) {
        const float p = __expf(dot_rows(Qs + r * D, Ks + lane * (D + 1), D) * a.scale - rl[rr]);
        const float dp = dot_rows(dOs + r * D, Vs + lane * (D + 1), D);
        ds = p * (dp - rd[rr]) * a.scale;
      }
      if (!__any_sync(0xffffffffu, ds != 0.0f)) continue;
      for (int jj = 0; jj < kTile; jj++) {
        const float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
        for (int c = 0; c < DPL; c++) {
          const int d = lane + 32 * c;
          if (d < D) acc[rr][c] += dsj * Ks[jj * (D + 1) + d];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = i0 + warp * kRowsPerWarp + rr;
    if (i >= qn) continue;
#pragma unroll
    for (int c = 0; c < DPL; c++) {
      const int d = lane + 32 * c;
      if (d < D) dq[(qa + i) * a.q_stride + int64_t(h) * D + d] = acc[rr][c];
    }
  }
}

// dK/dV pass. grid (ceil(max_len/32), n_seqs, Hkv). smem: K (32,D) | V (32,D) | Q (32,D+1) | dO (32,D+1) | lse (32) | delta (32)
// dV_j = Σ_{h∈group} Σ_i p_ij dO_i ; dK_j = Σ_h Σ_i ds_ij Q_i
template <int DPL>
__global__ void __launch_bounds__(kBlock) attn_bwd_dkdv_kernel(float* dk, float* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                                                const float* lse, const float* delta, AttnShape a) {
  extern __shared__ float sh[];
  const int D = a.D, s = blockIdx.y, g = blockIdx.z, group = a.Hq / a.Hkv;
  const int64_t qa = a.q_offs[s], ka = a.k_offs[s];
  const int qn = a.q_offs[s + 1] - int(qa), kn = a.k_offs[s + 1] - int(ka), j0 = blockIdx.x * kTile;
  if (j0 >= kn) return;
  float *Ks = sh, *Vs = Ks + kTile * D, *Qs = Vs + kTile * D, *dOs = Qs + kTile * (D + 1), *Ls = dOs + kTile * (D + 1), *Ds = Ls + kTile;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  load_tile(Ks, D, k, ka, j0, kn, a.kv_stride, int64_t(g) * D, D);
  load_tile(Vs, D, v, ka, j0, kn, a.kv_stride, int64_t(g) * D, D);
  float dka[kRowsPerWarp][DPL], dva[kRowsPerWarp][DPL];
#pragma unroll
  for (int jj = 0; jj < kRowsPerWarp; jj++)
#pragma unroll
    for (int c = 0; c < DPL; c++) dka[jj][c] = dva[jj][c] = 0;
  // first query that can see key j0: position q_pos0 + i ≥ j0
  const int i_start = max(0, j0 - a.q_pos0) / kTile * kTile;
  for (int h = g * group; h < (g + 1) * group; h++) {
    for (int i0 = i_start; i0 < qn; i0 += kTile) {
      __syncthreads();
      load_tile(Qs, D + 1, q, qa, i0, qn, a.q_stride, int64_t(h) * D, D);
      load_tile(dOs, D + 1, dout, qa, i0, qn, a.q_stride, int64_t(h) * D, D);
      if (threadIdx.x < kTile) {
        const int i = i0 + threadIdx.x;
        Ls[threadIdx.x] = i < qn ? lse[(qa + i) * a.Hq + h] : INFINITY;
        Ds[threadIdx.x] = i < qn ? delta[(qa + i) * a.Hq + h] : 0.0f;
      }
      __syncthreads();
      const int i = i0 + lane;
#pragma unroll
      for (int jj = 0; jj < kRowsPerWarp; jj++) {
        const int kr = warp * kRowsPerWarp + jj, j = j0 + kr;
        if (j >= kn) continue;
        const bool valid = i < qn && j <= a.q_pos0 + i;
        float p = 0, ds = 0;
        if (valid) {
          p = __expf(dot_rows(Qs + lane * (D + 1), Ks + kr * D, D) * a.scale - Ls[lane]);
          const float dp = dot_rows(dOs + lane * (D + 1), Vs + kr * D, D);
          ds = p * (dp - Ds[lane]) * a.scale;
        }
        if (!__any_sync(0xffffffffu, p != 0.0f)) continue;
        for (int ii = 0; ii < kTile; ii++) {
          const float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
          for (int c = 0; c < DPL; c++) {
            const int d = lane + 32 * c;
            if (d < D) {
              dva[jj][c] += pi * dOs[ii * (D + 1) + d];
              dka[jj][c] += dsi * Qs[ii * (D + 1) + d];
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int jj = 0; jj < kRowsPerWarp; jj++) {
    const int j = j0 + warp * kRowsPerWarp + jj;
    if (j >= kn) continue;
#pragma unroll
    for (int c = 0; c < DPL; c++) {
      const int d = lane + 32 * c;
      if (d < D) {
        dk[(ka + j) * a.kv_stride + int64_t(g) * D + d] = dka[jj][c];
        dv[(ka + j) * a.kv_stride + int64_t(g) * D + d] = dva[jj][c];
      }
    }
  }
}

// Dynamic shared memory above 48 KB must be opted into per kernel (H100: up to 227 KB per block).
template <typename K>
void allow_smem(K kernel, size_t smem) {
  if (smem > 48 * 1024) cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
}

void check_shape(const AttnShape& a) {
  if (a.D < 2 || a.D > 256 || a.D % 2)
    throw std::invalid_argument("CUDA attention supports an even head_dim in [2, 256], got " + std::to_string(a.D));
  if (a.Hkv < 1 || a.Hq % a.Hkv) throw std::invalid_argument("num_attention_heads must be a multiple of num_key_value_heads");
}

int dpl_of(int D) { return D <= 32 ? 1 : D <= 64 ? 2 : D <= 128 ? 4 : 8; }

}  // namespace

#define GL_DISPATCH_DPL(D, ...)                   \
  switch (dpl_of(D)) {                            \
    case 1: { constexpr int DPL = 1; __VA_ARGS__; } break; \
    case 2: { constexpr int DPL = 2; __VA_ARGS__; } break; \
    case 4: { constexpr int DPL = 4; __VA_ARGS__; } break; \
    default: { constexpr int DPL = 8; __VA_ARGS__; } break; \
  }

// gridDim.y ≤ 65535: sequences go in slices of at most that many per launch; a slice's kernels see its own
// offsets (offsets + s0), so the kernels index sequences relative to the slice.
constexpr int kMaxSeqsPerLaunch = 65535;

AttnShape seq_slice(const AttnShape& a, int s0) {
  AttnShape c = a;
  c.q_offs += s0;
  c.k_offs += s0;
  c.n_seqs = std::min(kMaxSeqsPerLaunch, a.n_seqs - s0);
  return c;
}

void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttnShape& a, cudaStream_t s) {
  check_shape(a);
  if (a.max_q_len <= 0 || a.n_seqs <= 0) return;
  const size_t smem = sizeof(float) * size_t(kTile) * (3 * a.D + 1);
  for (int s0 = 0; s0 < a.n_seqs; s0 += kMaxSeqsPerLaunch) {
    const AttnShape c = seq_slice(a, s0);
    const dim3 grid((a.max_q_len + kTile - 1) / kTile, c.n_seqs, a.Hq);
    GL_DISPATCH_DPL(a.D, {
      allow_smem(attn_fwd_kernel<DPL>, smem);
      attn_fwd_kernel<DPL><<<grid, kBlock, smem, s>>>(out, lse, q, k, v, c);
    });
    cudaCheckLaunch("attention_forward");
  }
}

void attention_backward(float* dq, float* dk, float* dv, float* delta, const bf16* dout, const bf16* out, const bf16* q, const bf16* k,
                        const bf16* v, const float* lse, const AttnShape& a, int64_t T, cudaStream_t s) {
  check_shape(a);
  if (a.max_q_len <= 0 || a.n_seqs <= 0) return;
  const int64_t rows = T * a.Hq;
  attn_delta_kernel<<<unsigned((rows + 7) / 8), 256, 0, s>>>(delta, dout, out, rows, a.D, a.q_stride, a.Hq);
  cudaCheckLaunch("attention_backward delta");
  const size_t smem_q = sizeof(float) * size_t(kTile) * (4 * a.D + 2);
  const size_t smem_k = sizeof(float) * (size_t(kTile) * (4 * a.D + 2) + 2 * kTile);
  for (int s0 = 0; s0 < a.n_seqs; s0 += kMaxSeqsPerLaunch) {
    const AttnShape c = seq_slice(a, s0);
    const dim3 gq((a.max_q_len + kTile - 1) / kTile, c.n_seqs, a.Hq), gk((a.max_q_len + kTile - 1) / kTile, c.n_seqs, a.Hkv);
    GL_DISPATCH_DPL(a.D, {
      allow_smem(attn_bwd_dq_kernel<DPL>, smem_q);
      attn_bwd_dq_kernel<DPL><<<gq, kBlock, smem_q, s>>>(dq, dout, q, k, v, lse, delta, c);
      allow_smem(attn_bwd_dkdv_kernel<DPL>, smem_k);
      attn_bwd_dkdv_kernel<DPL><<<gk, kBlock, smem_k, s>>>(dk, dv, dout, q, k, v, lse, delta, c);
    });
    cudaCheckLaunch("attention_backward");
  }
}

}  // namespace gl::cuda
