// Element-wise, normalisation, LM-head, loss and optimizer kernels of the CUDA backend (see kernels.cuh).
// Simple and memory-bound by design: one pass, coalesced, fp32 arithmetic; matmuls go to cuBLAS.
#include <cfloat>

#include "check.cuh"
#include "kernels.cuh"
#include "warp.cuh"

namespace gl::cuda {

namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n, int per = kThreads) {
  int64_t b = (n + per - 1) / per;
  if (b < 1) b = 1;
  if (b > 65535LL * 32) b = 65535LL * 32;  // grid-stride loops cover the rest
  return unsigned(b);
}

// Block-wide reductions (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  return warp_sum(v);
}
__device__ float block_max(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -FLT_MAX;
  return warp_max(v);
}

#define GRID_STRIDE(i, n) for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// ---- element-wise ----

__global__ void to_bf16_kernel(bf16* out, const float* in, int64_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16(in[i]);
}

// x (T,C) = E[ids]
__global__ void embedding_forward_kernel(float* x, const int32_t* ids, const bf16* E, int64_t T, int64_t C) {
  GRID_STRIDE(i, T * C) {
    const int64_t t = i / C, c = i % C;
    x[i] = __bfloat162float(E[int64_t(ids[t]) * C + c]);
  }
}

__global__ void embedding_backward_kernel(float* dE, const int32_t* ids, const float* dx, int64_t T, int64_t C) {
  GRID_STRIDE(i, T * C) {
    const int64_t t = i / C, c = i % C;
    atomicAdd(&dE[int64_t(ids[t]) * C + c], dx[i]);
  }
}

__global__ void swiglu_forward_kernel(bf16* h, const float* g, const float* u, int64_t n) {
  GRID_STRIDE(i, n) {
    const float x = g[i], sg = 1.0f / (1.0f + __expf(-x));
    h[i] = __float2bfloat16(x * sg * u[i]);
  }
}

// d silu(g)/dg = σ(g)·(1 + g·(1 − σ(g)))
__global__ void swiglu_backward_kernel(bf16* dg, bf16* du, const float* dh, const float* g, const float* u, int64_t n) {
  GRID_STRIDE(i, n) {
    const float x = g[i], sg = 1.0f / (1.0f + __expf(-x)), d = dh[i];
    du[i] = __float2bfloat16(d * x * sg);
    dg[i] = __float2bfloat16(d * u[i] * sg * (1.0f + x * (1.0f - sg)));
  }
}

__global__ void add_bias_kernel(float* x, const bf16* b, int64_t N, int64_t OC) {
  GRID_STRIDE(i, N * OC) x[i] += __bfloat162float(b[i % OC]);
}

// one thread per column, rows in order (coalesced across the warp)
template <typename X>
__global__ void colsum_kernel(float* g, const X* x, int64_t N, int64_t OC) {
  const int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  float s = 0;
  for (int64_t n = 0; n < N; n++) s += float(x[n * OC + o]);
  g[o] += s;
}

// ---- RMSNorm over rows of C (block per row) ----

// x (R,C) fp32, w (C) bf16 → y (R,C) bf16, rstd (R)
__global__ void rmsnorm_forward_kernel(bf16* y, float* rstd, const float* x, const bf16* w, int64_t C, float eps) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * C;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
  ss = block_sum(ss);
  const float rs = rsqrtf(ss / float(C) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  bf16* yr = y + r * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = __float2bfloat16((xr[c] * rs) * __bfloat162float(w[c]));
}

// Blocks own rows_per_block consecutive rows; dw partials in shared memory (C floats), one atomic per column per block.
__global__ void rmsnorm_backward_kernel(float* dx, float* dw, const float* dy, const float* x, const bf16* w, const float* rstd, int64_t R,
                                        int64_t C, int64_t rows_per_block) {
  extern __shared__ float dw_sh[];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dw_sh[c] = 0;
  __syncthreads();
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_block, r1 = min(R, r0 + rows_per_block);
  for (int64_t r = r0; r < r1; r++) {
    const float *xr = x + r * C, *dyr = dy + r * C;
    const float rs = rstd[r];
    float dot = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += dyr[c] * __bfloat162float(w[c]) * (xr[c] * rs);
    dot = block_sum(dot);
    const float m = dot / float(C);
    float* dxr = dx + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float xh = xr[c] * rs;
      dxr[c] += rs * (dyr[c] * __bfloat162float(w[c]) - xh * m);
      dw_sh[c] += dyr[c] * xh;  // each thread owns its columns: no race
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&dw[c], dw_sh[c]);
}

// ---- q/k norm + RoPE (warp per (t,h) row of D) ----
// lane owns rotation pairs (i, i + D/2) for i = lane, lane + 32, ...

__global__ void qknorm_rope_forward_kernel(bf16* out, float* rstd, const float* x, const bf16* w, const float* cos_t, const float* sin_t,
                                           const int32_t* pos, int64_t T, int64_t H, int64_t D, float eps) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= T * H) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = row / H, half = D / 2;
  const float* xr = x + row * D;
  float rs = 1.0f;  // no q/k norm (w null): RoPE of x itself
  if (w) {
    float ss = 0;
    for (int64_t d = lane; d < D; d += 32) ss += xr[d] * xr[d];
    ss = warp_sum(ss);
    rs = rsqrtf(ss / float(D) + eps);
    if (lane == 0) rstd[row] = rs;
  }
  const float* cs = cos_t + int64_t(pos[t]) * half;
  const float* sn = sin_t + int64_t(pos[t]) * half;
  bf16* orow = out + row * D;
  for (int64_t i = lane; i < half; i += 32) {
    const float wa = w ? __bfloat162float(w[i]) : 1.0f, wb = w ? __bfloat162float(w[i + half]) : 1.0f;
    const float a = (xr[i] * rs) * wa, b = (xr[i + half] * rs) * wb;
    orow[i] = __float2bfloat16(a * cs[i] - b * sn[i]);
    orow[i + half] = __float2bfloat16(b * cs[i] + a * sn[i]);
  }
}

// Grid-stride over rows; dw partials per block in shared memory (D floats, shared-memory atomics across warps).
__global__ void qknorm_rope_backward_kernel(bf16* dx, float* dw, const float* dout, const float* x, const bf16* w, const float* rstd,
                                            const float* cos_t, const float* sin_t, const int32_t* pos, int64_t T, int64_t H, int64_t D) {
  extern __shared__ float dw_sh[];
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) dw_sh[d] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
  const int64_t half = D / 2;
  for (int64_t row = int64_t(blockIdx.x) * wpb + (threadIdx.x >> 5); row < T * H; row += int64_t(gridDim.x) * wpb) {
    const int64_t t = row / H;
    const float *xr = x + row * D, *dr = dout + row * D;
    const float* cs = cos_t + int64_t(pos[t]) * half;
    const float* sn = sin_t + int64_t(pos[t]) * half;
    bf16* dxr = dx + row * D;
    if (!w) {  // no q/k norm: dx = RoPE^T dout
      for (int64_t i = lane; i < half; i += 32) {
        dxr[i] = __float2bfloat16(dr[i] * cs[i] + dr[i + half] * sn[i]);
        dxr[i + half] = __float2bfloat16(dr[i + half] * cs[i] - dr[i] * sn[i]);
      }
      continue;
    }
    const float rs = rstd[row];
    // RoPE^T (rotation by −angle), then dot = Σ dy·w·x̂
    float dot = 0;
    for (int64_t i = lane; i < half; i += 32) {
      const float ga = dr[i] * cs[i] + dr[i + half] * sn[i];
      const float gb = dr[i + half] * cs[i] - dr[i] * sn[i];
      dot += ga * __bfloat162float(w[i]) * (xr[i] * rs) + gb * __bfloat162float(w[i + half]) * (xr[i + half] * rs);
    }
    dot = warp_sum(dot);
    const float m = dot / float(D);
    for (int64_t i = lane; i < half; i += 32) {
      const float ga = dr[i] * cs[i] + dr[i + half] * sn[i];
      const float gb = dr[i + half] * cs[i] - dr[i] * sn[i];
      const float xa = xr[i] * rs, xb = xr[i + half] * rs;
      dxr[i] = __float2bfloat16(rs * (ga * __bfloat162float(w[i]) - xa * m));
      dxr[i + half] = __float2bfloat16(rs * (gb * __bfloat162float(w[i + half]) - xb * m));
      atomicAdd(&dw_sh[i], ga * xa);
      atomicAdd(&dw_sh[i + half], gb * xb);
    }
  }
  __syncthreads();
  if (w)
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) atomicAdd(&dw[d], dw_sh[d]);
}

// ---- LM head (block per row of V logits) ----

__global__ void lmhead_logprobs_kernel(float* lse, float* logp, const float* logits, const int32_t* ids, const int32_t* pos, int64_t r0, int64_t T,
                                       int64_t V) {
  const int64_t i = blockIdx.x, r = r0 + i;
  const float* lr = logits + i * V;
  float mx = -FLT_MAX;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, lr[v]);
  mx = block_max(mx);
  float se = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) se += __expf(lr[v] - mx);
  se = block_sum(se);
  if (threadIdx.x == 0) {
    const float l = mx + logf(se);
    lse[r] = l;
    if (r + 1 < T && pos[r + 1] != 0) logp[r + 1] = lr[ids[r + 1]] - l;
  }
}

__global__ void lmhead_dlogits_kernel(bf16* dlogits, const float* logits, const float* lse, const float* dlogp, const int32_t* ids,
                                      const int32_t* pos, int64_t r0, int64_t T, int64_t V) {
  const int64_t i = blockIdx.x, r = r0 + i;
  const bool has = r + 1 < T && pos[r + 1] != 0;
  const float c = has ? dlogp[r + 1] : 0.0f, l = lse[r];
  const int64_t target = has ? ids[r + 1] : -1;
  const float* lr = logits + i * V;
  bf16* dr = dlogits + i * V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float d = c == 0.0f ? 0.0f : -c * __expf(lr[v] - l);
    if (v == target) d += c;
    dr[v] = __float2bfloat16(d);
  }
}

// ---- GRPO++ token loss (same formula and branch choice as gl::grpo_token_loss) ----

__global__ void grpo_token_loss_kernel(float* dlogp, double* stats, const float* logp, const float* old, const float* adv, const float* coef,
                                       int64_t T, double clip_low, double clip_high) {
  double loss = 0, ratio = 0, clipped = 0, trained = 0;
  GRID_STRIDE(t, T) {
    const double cf = coef[t];
    float d = 0;
    if (cf != 0) {
      const double lp = logp[t], o = old ? double(old[t]) : lp, A = adv[t];
      const double rho = exp(lp - o);
      const double cr = fmin(fmax(rho, 1.0 - clip_low), 1.0 + clip_high);
      const double un = -A * rho, cl = -A * cr;
      const bool is_clipped = cl > un;
      loss += cf * (is_clipped ? cl : un);
      d = float(cf * (is_clipped ? 0.0 : -A * rho));
      ratio += rho;
      clipped += is_clipped;
      trained += 1;
    }
    dlogp[t] = d;
  }
  // warp-level then one atomic per warp (doubles: exact counts, stable sums)
  for (int o = 16; o > 0; o >>= 1) {
    loss += __shfl_xor_sync(0xffffffffu, loss, o);
    ratio += __shfl_xor_sync(0xffffffffu, ratio, o);
    clipped += __shfl_xor_sync(0xffffffffu, clipped, o);
    trained += __shfl_xor_sync(0xffffffffu, trained, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&stats[0], loss);
    atomicAdd(&stats[1], ratio);
    atomicAdd(&stats[2], clipped);
    atomicAdd(&stats[3], trained);
  }
}

// ---- global grad norm: pass 1 per-block partial sums (double), pass 2 one block sums the partials ----

constexpr int kSumsqBlocks = 1024;

__global__ void sumsq_partial_kernel(double* partial, const float* g, int64_t n) {
  __shared__ double sh[kThreads];
  double s = 0;
  GRID_STRIDE(i, n) s += double(g[i]) * double(g[i]);
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void sumsq_final_kernel(double* out, const double* partial, int n) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = sh[0];
}

// p ← p·(1 − lr·wd) − (lr/bc1)·m/(√v/√bc2 + eps), on g·clip (torch.optim.AdamW, decoupled decay)
__global__ void adamw_kernel(float* w, bf16* w16, float* m, float* v, const float* g, int64_t n, AdamArgs a) {
  GRID_STRIDE(i, n) {
    const float gi = g[i] * a.clip;
    const float mi = a.b1 * m[i] + (1 - a.b1) * gi;
    const float vi = a.b2 * v[i] + (1 - a.b2) * gi * gi;
    const float wi = w[i] * a.decay - a.step_size * mi / (sqrtf(vi) * a.inv_sqrt_bc2 + a.eps);
    m[i] = mi;
    v[i] = vi;
    w[i] = wi;
    w16[i] = __float2bfloat16(wi);
  }
}

}  // namespace

void to_bf16(bf16* out, const float* in, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, in, n);
  cudaCheckLaunch("to_bf16");
}

void embedding_forward(float* x, const int32_t* ids, const bf16* E, int64_t T, int64_t C, cudaStream_t s) {
  embedding_forward_kernel<<<blocks_for(T * C), kThreads, 0, s>>>(x, ids, E, T, C);
  cudaCheckLaunch("embedding_forward");
}

void embedding_backward(float* dE, const int32_t* ids, const float* dx, int64_t T, int64_t C, cudaStream_t s) {
  embedding_backward_kernel<<<blocks_for(T * C), kThreads, 0, s>>>(dE, ids, dx, T, C);
  cudaCheckLaunch("embedding_backward");
}

void rmsnorm_forward(bf16* y, float* rstd, const float* x, const bf16* w, int64_t R, int64_t C, double eps, cudaStream_t s) {
  if (R <= 0) return;
  rmsnorm_forward_kernel<<<unsigned(R), kThreads, 0, s>>>(y, rstd, x, w, C, float(eps));
  cudaCheckLaunch("rmsnorm_forward");
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const bf16* w, const float* rstd, int64_t R, int64_t C,
                      cudaStream_t s) {
  if (R <= 0) return;
  const int64_t rows = 32, blocks = (R + rows - 1) / rows;
  const size_t sh = size_t(C) * sizeof(float);
  if (sh > 48 * 1024) cudaCheck(cudaFuncSetAttribute(rmsnorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sh)));
  rmsnorm_backward_kernel<<<unsigned(blocks), kThreads, sh, s>>>(dx, dw, dy, x, w, rstd, R, C, rows);
  cudaCheckLaunch("rmsnorm_backward");
}

void qknorm_rope_forward(bf16* out, float* rstd, const float* x, const bf16* w, const float* cos_t, const float* sin_t, const int32_t* pos,
                         int64_t T, int64_t H, int64_t D, double eps, cudaStream_t s) {
  const int64_t rows = T * H, wpb = kThreads / 32;
  if (rows <= 0) return;
  qknorm_rope_forward_kernel<<<unsigned((rows + wpb - 1) / wpb), kThreads, 0, s>>>(out, rstd, x, w, cos_t, sin_t, pos, T, H, D, float(eps));
  cudaCheckLaunch("qknorm_rope_forward");
}

void qknorm_rope_backward(bf16* dx, float* dw, const float* dout, const float* x, const bf16* w, const float* rstd, const float* cos_t,
                          const float* sin_t, const int32_t* pos, int64_t T, int64_t H, int64_t D, cudaStream_t s) {
  const int64_t rows = T * H, wpb = kThreads / 32;
  if (rows <= 0) return;
  int64_t blocks = (rows + wpb - 1) / wpb;
  if (blocks > 2048) blocks = 2048;  // each block folds many rows into its shared dw partial
  qknorm_rope_backward_kernel<<<unsigned(blocks), kThreads, size_t(D) * sizeof(float), s>>>(dx, dw, dout, x, w, rstd, cos_t, sin_t, pos, T, H, D);
  cudaCheckLaunch("qknorm_rope_backward");
}

void swiglu_forward(bf16* h, const float* g, const float* u, int64_t n, cudaStream_t s) {
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(h, g, u, n);
  cudaCheckLaunch("swiglu_forward");
}

void swiglu_backward(bf16* dg, bf16* du, const float* dh, const float* g, const float* u, int64_t n, cudaStream_t s) {
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(dg, du, dh, g, u, n);
  cudaCheckLaunch("swiglu_backward");
}

void add_bias(float* x, const bf16* b, int64_t N, int64_t OC, cudaStream_t s) {
  add_bias_kernel<<<blocks_for(N * OC), kThreads, 0, s>>>(x, b, N, OC);
  cudaCheckLaunch("add_bias");
}

void colsum_accumulate(float* g, const float* x, int64_t N, int64_t OC, cudaStream_t s) {
  colsum_kernel<float><<<blocks_for(OC), kThreads, 0, s>>>(g, x, N, OC);
  cudaCheckLaunch("colsum_accumulate");
}

void colsum_accumulate(float* g, const bf16* x, int64_t N, int64_t OC, cudaStream_t s) {
  colsum_kernel<bf16><<<blocks_for(OC), kThreads, 0, s>>>(g, x, N, OC);
  cudaCheckLaunch("colsum_accumulate");
}

void lmhead_logprobs(float* lse, float* logp, const float* logits, const int32_t* ids, const int32_t* pos, int64_t r0, int64_t rn, int64_t T,
                     int64_t V, cudaStream_t s) {
  if (rn <= 0) return;
  lmhead_logprobs_kernel<<<unsigned(rn), 1024, 0, s>>>(lse, logp, logits, ids, pos, r0, T, V);
  cudaCheckLaunch("lmhead_logprobs");
}

void lmhead_dlogits(bf16* dlogits, const float* logits, const float* lse, const float* dlogp, const int32_t* ids, const int32_t* pos, int64_t r0,
                    int64_t rn, int64_t T, int64_t V, cudaStream_t s) {
  if (rn <= 0) return;
  lmhead_dlogits_kernel<<<unsigned(rn), 1024, 0, s>>>(dlogits, logits, lse, dlogp, ids, pos, r0, T, V);
  cudaCheckLaunch("lmhead_dlogits");
}

void grpo_token_loss(float* dlogp, double* stats, const float* logp, const float* old, const float* adv, const float* coef, int64_t T,
                     double clip_low, double clip_high, cudaStream_t s) {
  if (T <= 0) return;
  grpo_token_loss_kernel<<<blocks_for(T), kThreads, 0, s>>>(dlogp, stats, logp, old, adv, coef, T, clip_low, clip_high);
  cudaCheckLaunch("grpo_token_loss");
}

int sumsq_blocks() { return kSumsqBlocks; }

void sumsq(double* out, double* partial, const float* g, int64_t n, cudaStream_t s) {
  sumsq_partial_kernel<<<kSumsqBlocks, kThreads, 0, s>>>(partial, g, n);
  cudaCheckLaunch("sumsq_partial");
  sumsq_final_kernel<<<1, kThreads, 0, s>>>(out, partial, kSumsqBlocks);
  cudaCheckLaunch("sumsq_final");
}

void adamw(float* w, bf16* w16, float* m, float* v, const float* g, int64_t n, const AdamArgs& a, cudaStream_t s) {
  adamw_kernel<<<blocks_for(n), kThreads, 0, s>>>(w, w16, m, v, g, n, a);
  cudaCheckLaunch("adamw");
}

}  // namespace gl::cuda
