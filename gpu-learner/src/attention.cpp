// Flash-style causal attention (see attention.h). Scores s = q·kᵀ are kept raw; probabilities are
// p = exp(scale·(s − m)) / l with m the running row maximum and l the running sum (online softmax), and the
// forward keeps lse = m + log(l)/scale per row and head, so the backward recomputes p = exp(scale·(s − lse)).
// Backward (FlashAttention-2): with Δ_i = Σ_d dO_i·O_i, dP = dO·Vᵀ, dS = P∘(dP − Δ)·scale:
//   dV += Pᵀ·dO,  dQ += dS·K,  dK += dSᵀ·Q.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels.h"
#include "simd.h"

namespace gl::cpu {

namespace {

constexpr int64_t kBq = 64, kBk = 64;  // query and key rows per block

int64_t blocks(int64_t n) { return (n + kBq - 1) / kBq; }

// Scratch of one worker thread, reused across tasks.
struct Scratch {
  std::vector<float> s, p, o;
  std::vector<double> l;
  std::vector<float> m, delta;
};
thread_local Scratch tls;

// One (sequence, q head, query block) of the forward.
void forward_block(const AttnSeq& sq, const AttnShape& a, int64_t h, int64_t i0) {
  const SimdKernels& K = simd();
  const int64_t D = a.D, ldq = a.Hq * D, ldk = a.Hkv * D, g = h / (a.Hq / a.Hkv);
  const int64_t mi = std::min(kBq, sq.n_q - i0);
  const float* Q = sq.q + i0 * ldq + h * D;
  const float *Kp = sq.k + g * D, *Vp = sq.v + g * D;
  Scratch& t = tls;
  t.s.resize(size_t(kBq * kBk));
  t.o.assign(size_t(mi * D), 0.0f);
  t.m.assign(size_t(mi), -INFINITY);
  t.l.assign(size_t(mi), 0.0);
  const int64_t kend = sq.q0 + i0 + mi;  // keys visible to the block's last row
  for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
    const int64_t nj = std::min(kBk, kend - j0);
    float* S = t.s.data();
    gemm_serial(false, true, mi, nj, D, Q, ldq, Kp + j0 * ldk, ldk, 0.0f, S, kBk);
    for (int64_t r = 0; r < mi; r++) {
      float* sr = S + r * kBk;
      const int64_t vis = std::min(nj, sq.q0 + i0 + r + 1 - j0);  // causal: keys ≤ the row's position
      if (vis <= 0) {
        std::fill(sr, sr + nj, 0.0f);
        continue;
      }
      const float mx = std::max(t.m[size_t(r)], K.max(sr, vis));
      const double sum = K.exp_store(sr, sr, vis, mx, a.scale, 1.0f);
      std::fill(sr + vis, sr + nj, 0.0f);
      if (mx != t.m[size_t(r)]) {
        const float corr = t.m[size_t(r)] == -INFINITY ? 0.0f : std::exp(a.scale * (t.m[size_t(r)] - mx));
        t.l[size_t(r)] *= corr;
        float* orow = t.o.data() + r * D;
        for (int64_t d = 0; d < D; d++) orow[d] *= corr;
        t.m[size_t(r)] = mx;
      }
      t.l[size_t(r)] += sum;
    }
    gemm_serial(false, false, mi, D, nj, S, kBk, Vp + j0 * ldk, ldk, 1.0f, t.o.data(), D);
  }
  for (int64_t r = 0; r < mi; r++) {
    const float inv = float(1.0 / t.l[size_t(r)]);
    float* out = sq.out + (i0 + r) * ldq + h * D;
    const float* orow = t.o.data() + r * D;
    for (int64_t d = 0; d < D; d++) out[d] = orow[d] * inv;
    if (sq.lse) sq.lse[(i0 + r) * a.Hq + h] = t.m[size_t(r)] + float(std::log(t.l[size_t(r)]) / a.scale);
  }
}

// One (sequence, kv head) of the backward: the group's q heads, every key block, the query blocks that see it.
void backward_group(const AttnSeqGrad& sg, const AttnShape& a, int64_t g) {
  const SimdKernels& K = simd();
  const AttnSeq& sq = sg.fwd;
  const int64_t D = a.D, ldq = a.Hq * D, ldk = a.Hkv * D, group = a.Hq / a.Hkv, n = sq.n_q, q0 = sq.q0, nk = q0 + n;
  const float *Kp = sq.k + g * D, *Vp = sq.v + g * D;
  float *dK = sg.dk + g * D, *dV = sg.dv + g * D;
  Scratch& t = tls;
  t.s.resize(size_t(kBq * kBk));
  t.p.resize(size_t(kBq * kBk));
  t.delta.resize(size_t(n));
  for (int64_t h = g * group; h < (g + 1) * group; h++) {
    for (int64_t i = 0; i < n; i++) {  // Δ_i = dO_i · O_i
      const float *dor = sg.dout + i * ldq + h * D, *orow = sq.out + i * ldq + h * D;
      double s = 0;
      for (int64_t d = 0; d < D; d++) s += double(dor[d]) * orow[d];
      t.delta[size_t(i)] = float(s);
    }
    for (int64_t j0 = 0; j0 < nk; j0 += kBk) {
      const int64_t nj = std::min(kBk, nk - j0);
      // query blocks whose rows (at positions q0 + i) reach the key block
      for (int64_t i0 = j0 > q0 ? ((j0 - q0) / kBq) * kBq : 0; i0 < n; i0 += kBq) {
        const int64_t mi = std::min(kBq, n - i0);
        const float *Q = sq.q + i0 * ldq + h * D, *dO = sg.dout + i0 * ldq + h * D;
        float *P = t.p.data(), *dS = t.s.data();
        gemm_serial(false, true, mi, nj, D, Q, ldq, Kp + j0 * ldk, ldk, 0.0f, P, kBk);
        bool any = false;
        for (int64_t r = 0; r < mi; r++) {
          float* pr = P + r * kBk;
          const int64_t vis = std::max<int64_t>(0, std::min(nj, q0 + i0 + r + 1 - j0));
          if (vis > 0) {
            K.exp_store(pr, pr, vis, sq.lse[(i0 + r) * a.Hq + h], a.scale, 1.0f);
            any = true;
          }
          std::fill(pr + vis, pr + nj, 0.0f);
        }
        if (!any) continue;
        gemm_serial(true, false, nj, D, mi, P, kBk, dO, ldq, 1.0f, dV + j0 * ldk, ldk);              // dV += Pᵀ dO
        gemm_serial(false, true, mi, nj, D, dO, ldq, Vp + j0 * ldk, ldk, 0.0f, dS, kBk);             // dP = dO Vᵀ
        for (int64_t r = 0; r < mi; r++) {
          const float dl = t.delta[size_t(i0 + r)];
          float *dsr = dS + r * kBk, *pr = P + r * kBk;
#pragma omp simd
          for (int64_t c = 0; c < nj; c++) dsr[c] = pr[c] * (dsr[c] - dl) * a.scale;
        }
        gemm_serial(false, false, mi, D, nj, dS, kBk, Kp + j0 * ldk, ldk, 1.0f, sg.dq + i0 * ldq + h * D, ldq);  // dQ += dS K
        gemm_serial(true, false, nj, D, mi, dS, kBk, Q, ldq, 1.0f, dK + j0 * ldk, ldk);                         // dK += dSᵀ Q
      }
    }
  }
}

}  // namespace

void attention_forward(ThreadPool& tp, const std::vector<AttnSeq>& seqs, const AttnShape& a) {
  std::vector<int64_t> first(seqs.size() + 1, 0);  // task index of each sequence's first (head, block)
  for (size_t s = 0; s < seqs.size(); s++) first[s + 1] = first[s] + a.Hq * blocks(seqs[s].n_q);
  tp.parallel_for(first.back(), [&](int64_t task) {
    const size_t s = size_t(std::upper_bound(first.begin(), first.end(), task) - first.begin() - 1);
    const int64_t local = task - first[s], nb = blocks(seqs[s].n_q);
    forward_block(seqs[s], a, local / nb, (local % nb) * kBq);
  });
}

void attention_backward(ThreadPool& tp, const std::vector<AttnSeqGrad>& seqs, const AttnShape& a) {
  tp.parallel_for(int64_t(seqs.size()) * a.Hkv, [&](int64_t task) { backward_group(seqs[size_t(task / a.Hkv)], a, task % a.Hkv); });
}

void attention_decode(ThreadPool& tp, const std::vector<AttnSeq>& seqs, const AttnShape& a) {
  const int64_t group = a.Hq / a.Hkv, D = a.D, ldk = a.Hkv * D;
  tp.parallel_for(int64_t(seqs.size()) * a.Hkv, [&](int64_t task) {
    const AttnSeq& sq = seqs[size_t(task / a.Hkv)];
    const int64_t g = task % a.Hkv, nk = sq.q0 + 1;
    const SimdKernels& K = simd();
    Scratch& t = tls;
    t.s.resize(size_t(group * nk));
    float* S = t.s.data();
    // the group's q heads are adjacent rows of q: S (group, nk) = Q_g · K_gᵀ
    K.skinny_nt(S, nk, sq.q + g * group * D, D, group, sq.k + g * D, ldk, 0, nk, D);
    for (int64_t r = 0; r < group; r++) {
      float* sr = S + r * nk;
      const float mx = K.max(sr, nk);
      const double l = K.exp_store(sr, sr, nk, mx, a.scale, 1.0f);
      const float inv = float(1.0 / l);
      float* out = sq.out + (g * group + r) * D;
      std::fill(out, out + D, 0.0f);
      for (int64_t j = 0; j < nk; j++) K.axpy(out, sq.v + j * ldk + g * D, sr[j] * inv, D);
    }
  });
}

}  // namespace gl::cpu
