// Causal grouped-query attention on the CPU, flash-style: blocks of queries × keys through GEMMs with an online
// softmax, so memory stays linear in the sequence length (only a log-sum-exp per query row and head is kept
// for the backward, which recomputes the probabilities). Work is split over (sequence, head, query block) in
// the forward and (sequence, kv head) in the backward; each output is written by one task in a fixed order,
// so results do not depend on the thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "threadpool.h"

namespace gl::cpu {

struct AttnShape {
  int64_t Hq, Hkv, D;
  float scale;  // 1/√D
};

// One sequence's queries against its keys. Rows: q/out (n_q, Hq·D), k/v (q0 + n_q, Hkv·D); query i sits at
// position q0 + i and sees keys 0..q0+i. q head h reads kv head h / (Hq/Hkv).
struct AttnSeq {
  const float *q, *k, *v;
  float* out;
  float* lse;  // (n_q, Hq): log Σ_j exp(scale·s_j) in units of s (see attention.cpp), or null
  int64_t n_q, q0;
};

// out = softmax(scale·q·kᵀ, causal)·v for every sequence.
void attention_forward(ThreadPool& tp, const std::vector<AttnSeq>& seqs, const AttnShape& a);

// Backward of attention_forward given its out and lse: dq (n_q rows), dk and dv (q0 + n_q rows) are accumulated into.
struct AttnSeqGrad {
  AttnSeq fwd;
  const float* dout;
  float *dq, *dk, *dv;
};
void attention_backward(ThreadPool& tp, const std::vector<AttnSeqGrad>& seqs, const AttnShape& a);

// Decoding: one query row per sequence (n_q = 1) against its cache of q0 + 1 keys; one task per (sequence, kv head).
void attention_decode(ThreadPool& tp, const std::vector<AttnSeq>& seqs, const AttnShape& a);

}  // namespace gl::cpu
