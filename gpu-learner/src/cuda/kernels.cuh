// CUDA kernels of the Qwen3 forward/backward, GRPO++ loss and AdamW (launchers; bodies in kernels.cu and
// attention.cu). Row-major. Notation as cpu_engine.cpp: T tokens, C hidden, H heads, D head_dim,
// QD = Hq·D, KD = Hkv·D, I intermediate, V vocab. bf16 = matmul operands, fp32 = everything accumulated.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gl/layout.h"

namespace gl::cuda {

using bf16 = __nv_bfloat16;

// out (N) = bf16(in)                           [weights, GEMM operands]
void to_bf16(bf16* out, const float* in, int64_t n, cudaStream_t s);
// x (T,C) = E[ids]  (E bf16 (V,C))
void embedding_forward(float* x, const int32_t* ids, const bf16* E, int64_t T, int64_t C, cudaStream_t s);
// dE (V,C) += scatter of dx (T,C) by ids   (atomics: ids repeat)
void embedding_backward(float* dE, const int32_t* ids, const float* dx, int64_t T, int64_t C, cudaStream_t s);
// y (R,C) bf16 = x/sqrt(mean(x²)+eps)·w ; rstd (R)
void rmsnorm_forward(bf16* y, float* rstd, const float* x, const bf16* w, int64_t R, int64_t C, double eps, cudaStream_t s);
// dx (R,C) += rstd·(dy·w − x̂·mean(dy·w·x̂)) ; dw (C) += Σ_rows dy·x̂      (x̂ = x·rstd)
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const bf16* w, const float* rstd, int64_t R, int64_t C,
                      cudaStream_t s);
// Per-head q/k norm then rotate-half RoPE: x (T,H·D) fp32 → out (T,H·D) bf16, rstd (T·H).
// cos/sin tables (P, D/2) computed on the host exactly as the CPU engine does; pos (T).
// w null: no q/k norm (Qwen2, Llama), RoPE only; rstd is not written.
void qknorm_rope_forward(bf16* out, float* rstd, const float* x, const bf16* w, const float* cos_t, const float* sin_t, const int32_t* pos,
                         int64_t T, int64_t H, int64_t D, double eps, cudaStream_t s);
// dout (T,H·D) fp32 = d(rotated) → RoPE^T → RMSNorm backward: dx (T,H·D) bf16 (written), dw (D) +=.
// w null (no q/k norm): dx = RoPE^T dout, dw untouched.
void qknorm_rope_backward(bf16* dx, float* dw, const float* dout, const float* x, const bf16* w, const float* rstd, const float* cos_t,
                          const float* sin_t, const int32_t* pos, int64_t T, int64_t H, int64_t D, cudaStream_t s);
// h (N) bf16 = silu(g)·u
void swiglu_forward(bf16* h, const float* g, const float* u, int64_t n, cudaStream_t s);
// dg, du (N) bf16 from dh (N) fp32
void swiglu_backward(bf16* dg, bf16* du, const float* dh, const float* g, const float* u, int64_t n, cudaStream_t s);
// x (N,OC) += b (OC)
void add_bias(float* x, const bf16* b, int64_t N, int64_t OC, cudaStream_t s);
// g (OC) += Σ_n x (N,OC)
void colsum_accumulate(float* g, const float* x, int64_t N, int64_t OC, cudaStream_t s);
void colsum_accumulate(float* g, const bf16* x, int64_t N, int64_t OC, cudaStream_t s);

// Causal GQA attention over packed sequences, flash-style (online softmax, no T² memory).
// q (T_q, Hq·D) bf16 at row stride q_stride; k, v (T_k, Hkv·D) bf16 at kv_stride; sequence s has queries
// q_offs[s]..q_offs[s+1] at positions q_pos0 + i and keys k_offs[s]..k_offs[s+1] at positions j; key j is
// visible to query i when j ≤ q_pos0 + i. out (T_q, Hq·D) bf16, lse (T_q, Hq) fp32 (natural log, scaled scores).
struct AttnShape {
  const int32_t* q_offs;  // device, n_seqs + 1
  const int32_t* k_offs;  // device, n_seqs + 1
  int n_seqs, max_q_len, q_pos0, Hq, Hkv, D;
  int64_t q_stride, kv_stride;
  float scale;
};
void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttnShape& a, cudaStream_t s);
// Training only (q_pos0 = 0, q_offs == k_offs). dout (T,Hq·D) bf16, out as forward, lse from forward.
// delta scratch (T,Hq); dq (T,Hq·D), dk, dv (T,Hkv·D) fp32, written (not accumulated).
void attention_backward(float* dq, float* dk, float* dv, float* delta, const bf16* dout, const bf16* out, const bf16* q, const bf16* k,
                        const bf16* v, const float* lse, const AttnShape& a, int64_t T, cudaStream_t s);

// LM head, one chunk of rows r0..r0+rn of the micro-batch: logits (rn,V) fp32.
// lse[r] = logsumexp(logits[r]); logp[r+1] = logits[r][ids[r+1]] − lse[r] when r+1 < T and pos[r+1] ≠ 0.
void lmhead_logprobs(float* lse, float* logp, const float* logits, const int32_t* ids, const int32_t* pos, int64_t r0, int64_t rn, int64_t T,
                     int64_t V, cudaStream_t s);
// dlogits (rn,V) bf16 = c·(onehot(ids[r+1]) − softmax(logits[r])), c = dlogp[r+1] (0 when r+1 has no prediction).
void lmhead_dlogits(bf16* dlogits, const float* logits, const float* lse, const float* dlogp, const int32_t* ids, const int32_t* pos, int64_t r0,
                    int64_t rn, int64_t T, int64_t V, cudaStream_t s);
// GRPO++ token loss (gl/grpo.h formula) per token: coef[t] = mask/normaliser (0 ⇒ untrained), adv (T) per token,
// old (T) or null ⇒ old = logp. dlogp (T) = coef·dℓ/dlogp. stats (4 doubles, accumulated): Σcoef·ℓ, Σρ, #clipped, #trained.
void grpo_token_loss(float* dlogp, double* stats, const float* logp, const float* old, const float* adv, const float* coef, int64_t T,
                     double clip_low, double clip_high, cudaStream_t s);

// Σ g² in two passes: partial (blocks) doubles, then out[0] = Σ partial. partial needs sumsq_blocks() entries.
int sumsq_blocks();
void sumsq(double* out, double* partial, const float* g, int64_t n, cudaStream_t s);
// torch.optim.AdamW on clip·g; also refreshes the bf16 copy of the weights.
// The constants of one AdamW update, computed host-side by finish_train_step (gl/layout.h).
using AdamArgs = gl::AdamStep;
void adamw(float* w, bf16* w16, float* m, float* v, const float* g, int64_t n, const AdamArgs& a, cudaStream_t s);

}  // namespace gl::cuda
