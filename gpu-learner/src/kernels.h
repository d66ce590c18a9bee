// CPU kernels of the Qwen3 forward/backward (fp32). Row-major; shapes in the comments. Products go through
// gemm.cpp (OpenBLAS tiles, or the built-in tiles with GL_BLAS=OFF); element-wise and row loops through the
// vector-width variants of simd.h.
#pragma once
#include <cstdint>
#include <vector>

#include "gl/layout.h"
#include "threadpool.h"

namespace gl::cpu {

using gl::RopeTable;

// Sets the BLAS to run each call on its caller's thread and picks the SIMD variant (throws on a bad GL_SIMD).
void gemm_init();
bool blas_built();

// out (M,N) (+)= A (M,K) @ B^T, B (N,K)   [Linear forward: x @ W^T]
void matmul_nt(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool accumulate, bool naive);
// out (M,N) (+)= A (M,K) @ B (K,N)        [Linear backward: dy @ W]
void matmul_nn(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool accumulate, bool naive);
// out (M,N) (+)= A^T @ B, A (K,M), B (K,N) [weight gradient: dy^T @ x, the transposed operand read in place]
// scratch: the no-BLAS build's transpose buffer.
void matmul_tn(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool accumulate, bool naive,
               std::vector<float>* scratch);
// out (M,N) = A (M,K) @ B^T for a few rows (decoding): each element reduced in one fixed order whatever M is,
// so a sequence's result does not depend on the other rows decoded with it; B read once for all rows.
void matmul_nt_rows(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K);
// C (M,N) = op(A)·op(B) + beta·C on the calling thread (blocks inside a parallel task); op(A) (M,K), op(B) (K,N).
void gemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc);
// out (N,M) = in (M,N)^T
void transpose(ThreadPool& tp, float* out, const float* in, int64_t M, int64_t N);

// y (R,C) = x / sqrt(mean(x^2) + eps) * w ; rstd (R)
void rmsnorm_forward(ThreadPool& tp, float* y, float* rstd, const float* x, const float* w, int64_t R, int64_t C, double eps);
// dx (R,C) += d/dx ; dw (C) += d/dw
void rmsnorm_backward(ThreadPool& tp, float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int64_t R, int64_t C);

// Rotate-half RoPE in place on x (T, H*D) at positions pos (T); the table must cover them.
void rope_forward(ThreadPool& tp, float* x, const int32_t* pos, const RopeTable& tab, int64_t T, int64_t H, int64_t D);
// dx = R^T dy in place.
void rope_backward(ThreadPool& tp, float* d, const int32_t* pos, const RopeTable& tab, int64_t T, int64_t H, int64_t D);

// h (N) = silu(g) * u
void swiglu_forward(ThreadPool& tp, float* h, const float* g, const float* u, int64_t N);
void swiglu_backward(ThreadPool& tp, float* dg, float* du, const float* dh, const float* g, const float* u, int64_t N);

}  // namespace gl::cpu
