// The CPU engine's hot loops, compiled once per vector width (src/simd_kernels.cpp built three times: AVX-512,
// AVX2+FMA, baseline SSE2) and chosen at run time by the CPU's features, so one build runs anywhere and uses the
// widest vectors the machine has. GL_SIMD=avx512|avx2|baseline in the environment forces a variant (tests).
// Every reduction has a fixed order for a given variant: results never depend on the thread count, nor, for
// skinny_nt, on how many rows are computed together (batched decoding relies on it).
#pragma once
#include <cstdint>

namespace gl::cpu {

struct SimdKernels {
  const char* name;  // "avx512" | "avx2" | "baseline"
  int lanes;         // floats per vector

  // max over x[0, n); -inf when n == 0
  float (*max)(const float* x, int64_t n);
  // y[i] = mul·exp((x[i] − shift)·scale) (y may be x or null), returns Σ_i exp((x[i] − shift)·scale):
  // float lanes, the sum in double. exp has a relative error below 2 ulp; exp(t) = 0 for t < −87.3.
  double (*exp_store)(float* y, const float* x, int64_t n, float shift, float scale, float mul);
  // out[m·ldo + j] = Σ_k A[m·lda + k]·B[j·ldb + k] for m < M, j in [j0, j1): out = A·Bᵀ for a few rows
  // (decoding), each element reduced in one fixed order whatever M and j0 are.
  void (*skinny_nt)(float* out, int64_t ldo, const float* A, int64_t lda, int64_t M, const float* B, int64_t ldb, int64_t j0,
                    int64_t j1, int64_t K);
  // y[i] += a·x[i]
  void (*axpy)(float* y, const float* x, float a, int64_t n);

  // RMSNorm rows: y = x·rstd·w with rstd = 1/√(mean(x²) + eps) (sum of squares in double)
  void (*rmsnorm_rows)(float* y, float* rstd, const float* x, const float* w, int64_t r0, int64_t r1, int64_t C, double eps);
  // dx += rstd·(dy·w − x̂·mean(dy·w·x̂)), x̂ = x·rstd
  void (*rmsnorm_backward_rows)(float* dx, const float* dy, const float* x, const float* w, const float* rstd, int64_t r0, int64_t r1,
                                int64_t C);
  // h = silu(g)·u and its backward, on [i0, i1)
  void (*swiglu)(float* h, const float* g, const float* u, int64_t i0, int64_t i1);
  void (*swiglu_backward)(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t i0, int64_t i1);

  // The no-BLAS fallback GEMM tiles (GL_BLAS=OFF): out tile rows [m0,m1) × cols [n0,n1).
  void (*tile_nt)(float* out, const float* A, const float* B, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t N, int64_t K, bool acc);
  void (*tile_nn)(float* out, const float* A, const float* B, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t N, int64_t K, bool acc);
};

// The variant for this machine (or GL_SIMD's); chosen once.
const SimdKernels& simd();

}  // namespace gl::cpu
