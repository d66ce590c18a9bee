// CPU kernels of the Qwen3 forward/backward (fp32). Row-major; shapes in the comments.
#pragma once
#include <cstdint>

#include "threadpool.h"

namespace gl::cpu {

// out (M,N) (+)= A (M,K) @ B^T, B (N,K)   [Linear forward: x @ W^T]
void matmul_nt(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool accumulate, bool naive);
// out (M,N) (+)= A (M,K) @ B (K,N)        [Linear backward: dy @ W]
void matmul_nn(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool accumulate, bool naive);
// out (N,M) = in (M,N)^T
void transpose(ThreadPool& tp, float* out, const float* in, int64_t M, int64_t N);

// y (R,C) = x / sqrt(mean(x^2) + eps) * w ; rstd (R)
void rmsnorm_forward(ThreadPool& tp, float* y, float* rstd, const float* x, const float* w, int64_t R, int64_t C, double eps);
// dx (R,C) += d/dx ; dw (C) += d/dw
void rmsnorm_backward(ThreadPool& tp, float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int64_t R, int64_t C);

// Rotate-half RoPE in place on x (T, H*D); pos (T). inv_freq (D/2).
void rope_forward(ThreadPool& tp, float* x, const int32_t* pos, const float* inv_freq, int64_t T, int64_t H, int64_t D);
// dx = R^T dy in place.
void rope_backward(ThreadPool& tp, float* d, const int32_t* pos, const float* inv_freq, int64_t T, int64_t H, int64_t D);

// h (N) = silu(g) * u
void swiglu_forward(ThreadPool& tp, float* h, const float* g, const float* u, int64_t N);
void swiglu_backward(ThreadPool& tp, float* dg, float* du, const float* dh, const float* g, const float* u, int64_t N);

}  // namespace gl::cpu
