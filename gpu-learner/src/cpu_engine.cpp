// CPU backend: the fp32 reference implementation of the Qwen3 policy and its GRPO++ training step.
// llm.c style: explicit forward/backward per layer, one allocation for parameters, one for
// gradients, activations planned up front per micro-batch. Notation: T tokens in the micro-batch,
// C hidden, Hq/Hkv heads, D head_dim, QD = Hq·D, KD = Hkv·D, I intermediate, V vocab.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "gl/engine.h"
#include "gl/grpo.h"
#include "gl/layout.h"
#include "kernels.h"

namespace gl {

using namespace cpu;

namespace {

// Activations of one layer for a micro-batch (pointers into the activation allocation).
struct LayerActs {
  float* res_in;  // (T,C) layer input (residual stream)
  float* ln1;     // (T,C)
  float* rstd1;   // (T)
  float* q;       // (T,QD) projection output, before q_norm
  float* k;       // (T,KD)
  float* v;       // (T,KD)
  float* qrstd;   // (T,Hq)
  float* krstd;   // (T,Hkv)
  float* qr;      // (T,QD) after q_norm and RoPE
  float* kr;      // (T,KD)
  float* att;     // Σ_seq Hq·n·n softmax probabilities
  float* atty;    // (T,QD) attention output, before o_proj
  float* resmid;  // (T,C) residual after attention
  float* ln2;     // (T,C)
  float* rstd2;   // (T)
  float* gate;    // (T,I)
  float* up;      // (T,I)
  float* h;       // (T,I) silu(gate)·up
};

struct Seq {
  int64_t start, len;  // token range within the micro-batch
};

class CpuEngine final : public Engine {
 public:
  CpuEngine(const std::string& dir, const EngineOptions& opts) : CpuEngine(load_config(dir), dir, opts) {}
  CpuEngine(const QwenConfig& cfg, const std::string& dir, const EngineOptions& opts)
      : cfg_(cfg), opts_(opts), layout_(cfg), layers_(layout_.layers), n_params_(layout_.size()), emb_(layout_.embed),
        normf_(layout_.final_norm), head_(layout_.head) {
    int threads = opts.threads > 0 ? opts.threads : int(std::thread::hardware_concurrency());
    tp_ = std::make_unique<ThreadPool>(std::max(1, threads));
    inv_freq_.resize(cfg_.head_dim / 2);
    // As transformers: inv_freq = 1 / theta^(2i/D), computed in fp32.
    for (int64_t i = 0; i < cfg_.head_dim / 2; i++)
      inv_freq_[i] = float(1.0 / std::pow(cfg_.rope_theta, double(float(2 * i) / float(cfg_.head_dim))));
    load(dir);
  }

  const QwenConfig& config() const override { return cfg_; }
  int64_t step() const override { return step_; }
  std::string device() const override { return "cpu"; }
  const std::vector<ParamInfo>& params() const override { return layout_.params(); }

  void load(const std::string& dir) override {
    QwenConfig c = load_config(dir);
    check_same_model_shape(cfg_, c, dir);
    std::vector<float> w = read_weights(dir, layout_);
    std::vector<float> m, v;
    int64_t step = 0;
    if (!read_optimizer_state(dir + "/optimizer.bin", n_params_, &step, &m, &v)) {
      m.assign(size_t(n_params_), 0.0f);
      v.assign(size_t(n_params_), 0.0f);
    }
    cfg_.raw_json = c.raw_json;
    w_ = std::move(w);
    m_ = std::move(m);
    v_ = std::move(v);
    step_ = step;
    g_.assign(size_t(n_params_), 0.0f);
    src_dir_ = dir;
  }

  void save(const std::string& dir) override { save_checkpoint(dir, layout_, cfg_, w_.data(), m_, v_, step_, src_dir_); }

  std::vector<float> get_tensor(const std::string& name, bool grad) const override {
    const ParamInfo& p = layout_.find(name);
    const float* src = (grad ? g_.data() : w_.data()) + p.offset;
    return std::vector<float>(src, src + p.numel);
  }

  void set_tensor(const std::string& name, const float* data, int64_t n) override {
    const ParamInfo& p = layout_.find(name);
    check_tensor_size(p, n);
    std::memcpy(w_.data() + p.offset, data, sizeof(float) * size_t(n));
  }

  // ---------------------------------------------------------------- log-probs

  void logprobs(const PackedBatch& b, float* out) override {
    validate_packed(b, cfg_.vocab_size, cfg_.max_position_embeddings);
    for_micro_batches(b, 4096, [&](int64_t s0, int64_t s1) {
      const int64_t a = b.offsets[s0], T = b.offsets[s1] - a;
      forward(b.ids + a, b.offsets + s0, s1 - s0, T);
      std::memcpy(out + a, act_logp_, sizeof(float) * size_t(T));
    });
  }

  // ---------------------------------------------------------------- training

  TrainStats train_step(const TrainBatch& b, const TrainHyper& hp) override {
    const auto t0 = std::chrono::steady_clock::now();
    TrainStats st = accumulate_gradients(b, hp);
    double ss = 0;
    for (int64_t i = 0; i < n_params_; i++) ss += double(g_[i]) * g_[i];
    st.grad_norm = std::sqrt(ss);
    if (!std::isfinite(st.grad_norm)) {
      st.skipped = true;  // weights and Adam state untouched
    } else {
      adamw(hp, st.grad_norm);
    }
    st.step = step_;
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return st;
  }

  double debug_loss(const TrainBatch& b, const TrainHyper& hp, bool with_grads) override {
    struct Restore {
      bool& flag;
      ~Restore() { flag = true; }
    } restore{with_grads_};  // gradients back on, even when the batch is rejected
    with_grads_ = with_grads;
    return accumulate_gradients(b, hp).loss;
  }

  // ---------------------------------------------------------------- generation

  GenerateResult generate(const int32_t* prompt, int64_t n_prompt, const GenerateOptions& o) override {
    const int64_t L = cfg_.num_hidden_layers, KD = cfg_.kv_dim();
    auto reserve = [&](int64_t max_t) {
      kcache_.assign(size_t(L * max_t * KD), 0.0f);
      vcache_.assign(size_t(L * max_t * KD), 0.0f);
      cache_len_ = max_t;
    };
    auto feed = [&](const int32_t* toks, int64_t n, int64_t pos0, float* logits) { forward_infer(toks, n, pos0, logits); };
    return decode_tokens(cfg_, prompt, n_prompt, o, reserve, feed);
  }

 private:
  // ---------------------------------------------------------------- parameters

  float* W(int64_t off) { return off < 0 ? nullptr : w_.data() + off; }
  float* G(int64_t off) { return off < 0 ? nullptr : g_.data() + off; }

  // ---------------------------------------------------------------- activations plan

  // Lays out all activations of a micro-batch of T tokens in one allocation.
  void plan_acts(int64_t T, const std::vector<Seq>& seqs) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, L = cfg_.num_hidden_layers;
    int64_t att = 0;
    att_off_.clear();
    for (auto& s : seqs) { att_off_.push_back(att); att += Hq * s.len * s.len; }
    const int64_t per_layer = T * C * 4 + T * 2 + T * QD * 3 + T * KD * 3 + T * (Hq + Hkv) + att + T * I * 3;
    const int64_t total = L * per_layer + T * C /*final residual*/ + T * C + T * 3;
    if (int64_t(acts_.size()) < total) acts_.resize(size_t(total));
    float* p = acts_.data();
    auto take = [&](int64_t n) { float* r = p; p += n; return r; };
    la_.resize(size_t(L));
    for (int64_t l = 0; l < L; l++) {
      LayerActs& a = la_[size_t(l)];
      a.res_in = take(T * C); a.ln1 = take(T * C); a.rstd1 = take(T);
      a.q = take(T * QD); a.k = take(T * KD); a.v = take(T * KD);
      a.qrstd = take(T * Hq); a.krstd = take(T * Hkv); a.qr = take(T * QD); a.kr = take(T * KD);
      a.att = take(att); a.atty = take(T * QD); a.resmid = take(T * C); a.ln2 = take(T * C); a.rstd2 = take(T);
      a.gate = take(T * I); a.up = take(T * I); a.h = take(T * I);
    }
    act_res_final_ = take(T * C);
    act_lnf_ = take(T * C);
    act_rstdf_ = take(T);
    act_lse_ = take(T);
    act_logp_ = take(T);
  }

  // ---------------------------------------------------------------- building blocks

  bool naive() const { return opts_.naive_matmul; }

  // out (N,OC) = x (N,IC) @ W^T + b
  void linear_forward(float* out, const float* x, const float* Wt, const float* b, int64_t N, int64_t IC, int64_t OC) {
    matmul_nt(*tp_, out, x, Wt, N, OC, IC, false, naive());
    if (b)
      for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++) out[n * OC + o] += b[o];
  }

  // dx (N,IC) (+)= dy @ W ; dW (OC,IC) += dy^T @ x ; db (OC) += Σ_n dy
  void linear_backward(float* dx, bool dx_acc, float* dW, float* db, const float* dy, const float* x, const float* Wt, int64_t N,
                       int64_t IC, int64_t OC) {
    if (dx) matmul_nn(*tp_, dx, dy, Wt, N, IC, OC, dx_acc, naive());
    if (!with_grads_) return;
    grow(scratch_t_, N * OC);
    transpose(*tp_, scratch_t_.data(), dy, N, OC);
    matmul_nn(*tp_, dW, scratch_t_.data(), x, OC, IC, N, true, naive());
    if (db)
      for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++) db[o] += dy[n * OC + o];
  }

  static void grow(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
  }

  // One query row: p (nvis) = softmax(scale · q·K_j), j < nvis ; out (D) = Σ_j p_j V_j.
  static void attend_row(float* out, float* p, const float* q, const float* K, const float* Vv, int64_t ks, int64_t nvis, int64_t D,
                         float scale) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < nvis; j++) {
      const float* kj = K + j * ks;
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t d = 0; d < D; d++) s += q[d] * kj[d];
      p[j] = s * scale;
      mx = std::max(mx, p[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j < nvis; j++) { p[j] = std::exp(p[j] - mx); sum += p[j]; }
    const float inv = 1.0f / sum;
    for (int64_t d = 0; d < D; d++) out[d] = 0;
    for (int64_t j = 0; j < nvis; j++) {
      p[j] *= inv;
      const float* vj = Vv + j * ks;
      const float pj = p[j];
#pragma omp simd
      for (int64_t d = 0; d < D; d++) out[d] += pj * vj[d];
    }
  }

  // ---------------------------------------------------------------- forward (training / log-probs)

  // ids (T) of n_seqs packed sequences (offs relative to offs[0]); fills the activations and act_logp_.
  void forward(const int32_t* ids, const int32_t* offs, int64_t n_seqs, int64_t T) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers, group = Hq / Hkv;
    const float scale = float(1.0 / std::sqrt(double(D)));
    seqs_.clear();
    pos_.resize(size_t(T));
    for (int64_t s = 0; s < n_seqs; s++) {
      const int64_t a = offs[s] - offs[0], n = offs[s + 1] - offs[s];
      seqs_.push_back({a, n});
      for (int64_t i = 0; i < n; i++) pos_[size_t(a + i)] = int32_t(i);
    }
    plan_acts(T, seqs_);
    // embedding: res_in[0] (T,C) = E[ids]
    for (int64_t t = 0; t < T; t++) std::memcpy(la_[0].res_in + t * C, W(emb_) + int64_t(ids[t]) * C, sizeof(float) * size_t(C));
    grow(scratch_a_, T * C);
    for (int64_t l = 0; l < L; l++) {
      const LayerParams& p = layers_[size_t(l)];
      LayerActs& a = la_[size_t(l)];
      float* res_out = l + 1 < L ? la_[size_t(l + 1)].res_in : act_res_final_;
      rmsnorm_forward(*tp_, a.ln1, a.rstd1, a.res_in, W(p.ln1), T, C, cfg_.rms_norm_eps);
      linear_forward(a.q, a.ln1, W(p.wq), W(p.bq), T, C, QD);
      linear_forward(a.k, a.ln1, W(p.wk), W(p.bk), T, C, KD);
      linear_forward(a.v, a.ln1, W(p.wv), W(p.bv), T, C, KD);
      // per-head RMSNorm over D, then RoPE
      rmsnorm_forward(*tp_, a.qr, a.qrstd, a.q, W(p.qn), T * Hq, D, cfg_.rms_norm_eps);
      rmsnorm_forward(*tp_, a.kr, a.krstd, a.k, W(p.kn), T * Hkv, D, cfg_.rms_norm_eps);
      rope_forward(*tp_, a.qr, pos_.data(), inv_freq_.data(), T, Hq, D);
      rope_forward(*tp_, a.kr, pos_.data(), inv_freq_.data(), T, Hkv, D);
      // causal attention per (sequence, q head); q head h reads kv head h / group
      tp_->parallel_for(int64_t(seqs_.size()) * Hq, [&](int64_t task) {
        const int64_t s = task / Hq, h = task % Hq, g = h / group;
        const Seq sq = seqs_[size_t(s)];
        float* P = a.att + att_off_[size_t(s)] + h * sq.len * sq.len;
        for (int64_t i = 0; i < sq.len; i++) {
          float* prow = P + i * sq.len;
          attend_row(a.atty + (sq.start + i) * QD + h * D, prow, a.qr + (sq.start + i) * QD + h * D, a.kr + sq.start * KD + g * D,
                     a.v + sq.start * KD + g * D, KD, i + 1, D, scale);
          for (int64_t j = i + 1; j < sq.len; j++) prow[j] = 0;
        }
      });
      linear_forward(scratch_a_.data(), a.atty, W(p.wo), W(p.bo), T, QD, C);
      for (int64_t i = 0; i < T * C; i++) a.resmid[i] = a.res_in[i] + scratch_a_[size_t(i)];
      rmsnorm_forward(*tp_, a.ln2, a.rstd2, a.resmid, W(p.ln2), T, C, cfg_.rms_norm_eps);
      linear_forward(a.gate, a.ln2, W(p.wg), nullptr, T, C, I);
      linear_forward(a.up, a.ln2, W(p.wu), nullptr, T, C, I);
      swiglu_forward(*tp_, a.h, a.gate, a.up, T * I);
      linear_forward(scratch_a_.data(), a.h, W(p.wd), nullptr, T, I, C);
      for (int64_t i = 0; i < T * C; i++) res_out[i] = a.resmid[i] + scratch_a_[size_t(i)];
    }
    rmsnorm_forward(*tp_, act_lnf_, act_rstdf_, act_res_final_, W(normf_), T, C, cfg_.rms_norm_eps);
    // LM head in row chunks (the (T,V) logits never exist at once): logp[t] = logits[t−1][ids[t]] − lse[t−1]
    for (int64_t t = 0; t < T; t++) act_logp_[t] = 0;
    const int64_t chunk = head_chunk(T);
    grow(logits_, chunk * V);
    for (int64_t r0 = 0; r0 < T; r0 += chunk) {
      const int64_t rn = std::min(chunk, T - r0);
      matmul_nt(*tp_, logits_.data(), act_lnf_ + r0 * C, W(head_), rn, V, C, false, naive());
      tp_->parallel_for(rn, [&](int64_t i) {
        const float* lr = logits_.data() + i * V;
        float mx = -INFINITY;
        for (int64_t v = 0; v < V; v++) mx = std::max(mx, lr[v]);
        double se = 0;
        for (int64_t v = 0; v < V; v++) se += std::exp(double(lr[v] - mx));
        const float lse = float(mx + std::log(se));
        const int64_t r = r0 + i;
        act_lse_[r] = lse;
        if (r + 1 < T && pos_[size_t(r + 1)] != 0) act_logp_[r + 1] = lr[ids[r + 1]] - lse;
      });
    }
  }

  int64_t head_chunk(int64_t T) const {
    if (opts_.logits_budget > 0) return std::max<int64_t>(1, std::min<int64_t>(T, opts_.logits_budget / cfg_.vocab_size));
    return std::max<int64_t>(4, std::min<int64_t>(T, (int64_t(1) << 22) / cfg_.vocab_size));
  }

  // ---------------------------------------------------------------- backward

  // dlogp (T): dLoss/dlogp per token. Accumulates into the gradient allocation.
  void backward(const int32_t* ids, int64_t T, const float* dlogp) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers, group = Hq / Hkv;
    const float scale = float(1.0 / std::sqrt(double(D)));
    grow(d_res_, T * C); grow(d_ln_, T * C); grow(d_atty_, T * QD); grow(d_q_, T * QD); grow(d_k_, T * KD); grow(d_v_, T * KD);
    grow(d_gate_, T * I); grow(d_up_, T * I); grow(d_h_, T * I); grow(d_qn_, T * QD); grow(d_kn_, T * KD);
    float *dres = d_res_.data(), *dln = d_ln_.data();
    // LM head: dlogits[r] = dlogp[r+1]·(onehot(ids[r+1]) − softmax(logits[r])) ; dlnf = dlogits @ Whead ; dWhead += dlogits^T lnf
    std::fill(dln, dln + T * C, 0.0f);
    const int64_t chunk = head_chunk(T);
    grow(logits_, chunk * V);
    for (int64_t r0 = 0; r0 < T; r0 += chunk) {
      const int64_t rn = std::min(chunk, T - r0);
      bool any = false;
      for (int64_t r = r0; r < r0 + rn; r++) any |= (r + 1 < T && pos_[size_t(r + 1)] != 0 && dlogp[r + 1] != 0);
      if (!any) continue;
      matmul_nt(*tp_, logits_.data(), act_lnf_ + r0 * C, W(head_), rn, V, C, false, naive());
      tp_->parallel_for(rn, [&](int64_t i) {
        float* lr = logits_.data() + i * V;
        const int64_t r = r0 + i;
        const bool has = r + 1 < T && pos_[size_t(r + 1)] != 0;
        const float c = has ? dlogp[r + 1] : 0.0f;
        for (int64_t v = 0; v < V; v++) lr[v] = -c * std::exp(lr[v] - act_lse_[r]);
        if (has) lr[ids[r + 1]] += c;
      });
      linear_backward(dln + r0 * C, false, G(head_), nullptr, logits_.data(), act_lnf_ + r0 * C, W(head_), rn, C, V);
    }
    std::fill(dres, dres + T * C, 0.0f);
    rmsnorm_backward(*tp_, dres, G(normf_), dln, act_res_final_, W(normf_), act_rstdf_, T, C);
    for (int64_t l = L - 1; l >= 0; l--) {
      const LayerParams& p = layers_[size_t(l)];
      LayerActs& a = la_[size_t(l)];
      // res_out = resmid + down(h): dresmid = dres ; dh = dres @ Wd
      linear_backward(d_h_.data(), false, G(p.wd), nullptr, dres, a.h, W(p.wd), T, I, C);
      swiglu_backward(*tp_, d_gate_.data(), d_up_.data(), d_h_.data(), a.gate, a.up, T * I);
      linear_backward(dln, false, G(p.wg), nullptr, d_gate_.data(), a.ln2, W(p.wg), T, C, I);
      linear_backward(dln, true, G(p.wu), nullptr, d_up_.data(), a.ln2, W(p.wu), T, C, I);
      rmsnorm_backward(*tp_, dres, G(p.ln2), dln, a.resmid, W(p.ln2), a.rstd2, T, C);
      // resmid = res_in + o(atty): dres_in = dresmid ; datty = dresmid @ Wo
      linear_backward(d_atty_.data(), false, G(p.wo), G(p.bo), dres, a.atty, W(p.wo), T, QD, C);
      // attention backward per (sequence, kv head): the group's q heads share dK, dV
      std::fill(d_qn_.begin(), d_qn_.begin() + T * QD, 0.0f);
      std::fill(d_kn_.begin(), d_kn_.begin() + T * KD, 0.0f);
      std::fill(d_v_.begin(), d_v_.begin() + T * KD, 0.0f);
      float *dqr = d_qn_.data(), *dkr = d_kn_.data(), *dv = d_v_.data();
      tp_->parallel_for(int64_t(seqs_.size()) * Hkv, [&](int64_t task) {
        const int64_t s = task / Hkv, g = task % Hkv;
        const Seq sq = seqs_[size_t(s)];
        std::vector<float> dp(size_t(sq.len));
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          const float* P = a.att + att_off_[size_t(s)] + h * sq.len * sq.len;
          for (int64_t i = 0; i < sq.len; i++) {
            const float* prow = P + i * sq.len;
            const float* dout = d_atty_.data() + (sq.start + i) * QD + h * D;
            const float* qi = a.qr + (sq.start + i) * QD + h * D;
            float* dqi = dqr + (sq.start + i) * QD + h * D;
            double dsum = 0;
            for (int64_t j = 0; j <= i; j++) {
              const float* vj = a.v + (sq.start + j) * KD + g * D;
              float dpj = 0;
#pragma omp simd reduction(+ : dpj)
              for (int64_t d = 0; d < D; d++) dpj += dout[d] * vj[d];
              dp[size_t(j)] = dpj;
              dsum += double(prow[j]) * dpj;
              float* dvj = dv + (sq.start + j) * KD + g * D;
              const float pj = prow[j];
#pragma omp simd
              for (int64_t d = 0; d < D; d++) dvj[d] += pj * dout[d];
            }
            for (int64_t j = 0; j <= i; j++) {
              const float ds = prow[j] * (dp[size_t(j)] - float(dsum)) * scale;  // softmax backward, times the score scale
              const float* kj = a.kr + (sq.start + j) * KD + g * D;
              float* dkj = dkr + (sq.start + j) * KD + g * D;
#pragma omp simd
              for (int64_t d = 0; d < D; d++) { dqi[d] += ds * kj[d]; dkj[d] += ds * qi[d]; }
            }
          }
        }
      });
      // RoPE^T, then the per-head RMSNorm backward to the projection outputs
      rope_backward(*tp_, dqr, pos_.data(), inv_freq_.data(), T, Hq, D);
      rope_backward(*tp_, dkr, pos_.data(), inv_freq_.data(), T, Hkv, D);
      std::fill(d_q_.begin(), d_q_.begin() + T * QD, 0.0f);
      std::fill(d_k_.begin(), d_k_.begin() + T * KD, 0.0f);
      rmsnorm_backward(*tp_, d_q_.data(), G(p.qn), dqr, a.q, W(p.qn), a.qrstd, T * Hq, D);
      rmsnorm_backward(*tp_, d_k_.data(), G(p.kn), dkr, a.k, W(p.kn), a.krstd, T * Hkv, D);
      linear_backward(dln, false, G(p.wq), G(p.bq), d_q_.data(), a.ln1, W(p.wq), T, C, QD);
      linear_backward(dln, true, G(p.wk), G(p.bk), d_k_.data(), a.ln1, W(p.wk), T, C, KD);
      linear_backward(dln, true, G(p.wv), G(p.bv), dv, a.ln1, W(p.wv), T, C, KD);
      rmsnorm_backward(*tp_, dres, G(p.ln1), dln, a.res_in, W(p.ln1), a.rstd1, T, C);
    }
    if (!with_grads_) return;
    // embedding: dE[ids[t]] += dres[t] (serial: ids repeat)
    float* dE = G(emb_);
    for (int64_t t = 0; t < T; t++) {
      float* row = dE + int64_t(ids[t]) * C;
      const float* d = dres + t * C;
      for (int64_t c = 0; c < C; c++) row[c] += d[c];
    }
  }

  // ---------------------------------------------------------------- GRPO++ loss over the batch

  TrainStats accumulate_gradients(const TrainBatch& b, const TrainHyper& hp) {
    validate_train(b, hp, cfg_.vocab_size, cfg_.max_position_embeddings);
    if (with_grads_) std::fill(g_.begin(), g_.end(), 0.0f);
    const bool pp = hp.mode == LossMode::GrpoPlusPlus;
    const double clip_high = pp ? hp.clip_high : hp.clip_low;  // GRPO: symmetric clip
    const std::vector<double> norms = sequence_loss_norms(b, hp);
    TrainStats st;
    st.tokens = b.n_tokens;
    double loss = 0, ratio_sum = 0;
    int64_t masked = 0, clipped = 0;
    std::vector<float> dlogp;
    for_micro_batches(b, hp.micro_batch_tokens, [&](int64_t s0, int64_t s1) {
      const int64_t a = b.offsets[s0], T = b.offsets[s1] - a;
      forward(b.ids + a, b.offsets + s0, s1 - s0, T);
      dlogp.assign(size_t(T), 0.0f);
      for (int64_t s = s0; s < s1; s++) {
        const int64_t t0 = b.offsets[s], t1 = b.offsets[s + 1];
        const double norm = norms[size_t(s)];
        if (norm == 0) continue;
        // the first token of a sequence has no prediction and is never trained
        for (int64_t t = t0 + 1; t < t1; t++) {
          const double m = b.mask[t];
          if (m == 0) continue;
          const double lp = act_logp_[t - a];
          const double old = b.old_logprobs ? double(b.old_logprobs[t]) : lp;
          const TokenLoss tl = grpo_token_loss(lp, old, b.advantages[s], hp.clip_low, clip_high);
          loss += m * tl.loss / norm;
          dlogp[size_t(t - a)] = float(m * tl.dlogp / norm);
          masked++;
          clipped += tl.clipped;
          ratio_sum += tl.ratio;
        }
      }
      if (with_grads_) backward(b.ids + a, T, dlogp.data());
    });
    st.loss = loss;
    st.clip_fraction = masked ? double(clipped) / double(masked) : 0.0;
    st.mean_ratio = masked ? ratio_sum / double(masked) : 0.0;
    st.step = step_;
    return st;
  }

  // AdamW as torch.optim.AdamW: p ← p·(1 − lr·wd) − lr·m̂/(√v̂ + eps), on the norm-clipped gradient.
  void adamw(const TrainHyper& hp, double grad_norm) {
    const double clip = grad_norm > hp.max_grad_norm ? hp.max_grad_norm / (grad_norm + 1e-6) : 1.0;
    step_++;
    const double bc1 = 1.0 - std::pow(hp.beta1, double(step_)), bc2 = 1.0 - std::pow(hp.beta2, double(step_));
    const float b1 = float(hp.beta1), b2 = float(hp.beta2), decay = float(1.0 - hp.lr * hp.weight_decay);
    const float step_size = float(hp.lr / bc1), inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2)), eps = float(hp.eps), cl = float(clip);
    const int64_t n = n_params_, nt = std::max<int64_t>(1, std::min<int64_t>(tp_->size() * 4, n / 65536 + 1));
    tp_->parallel_for(nt, [&](int64_t t) {
      for (int64_t i = n * t / nt; i < n * (t + 1) / nt; i++) {
        const float g = g_[i] * cl;
        m_[i] = b1 * m_[i] + (1 - b1) * g;
        v_[i] = b2 * v_[i] + (1 - b2) * g * g;
        w_[i] = w_[i] * decay - step_size * m_[i] / (std::sqrt(v_[i]) * inv_sqrt_bc2 + eps);
      }
    });
  }

  // ---------------------------------------------------------------- incremental forward (KV cache)

  // Feeds n tokens at positions pos0.. through the model, appending K/V to the cache; logits (V) of the last one.
  void forward_infer(const int32_t* toks, int64_t n, int64_t pos0, float* logits) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers, group = Hq / Hkv;
    const float scale = float(1.0 / std::sqrt(double(D)));
    std::vector<float> x(size_t(n * C)), ln(size_t(n * C)), tmp(size_t(n * C)), rstd(size_t(n * std::max(Hq, int64_t(1))));
    std::vector<float> q(size_t(n * QD)), k(size_t(n * KD)), atty(size_t(n * QD)), g(size_t(n * I)), u(size_t(n * I));
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) pos[size_t(i)] = int32_t(pos0 + i);
    for (int64_t t = 0; t < n; t++) std::memcpy(&x[size_t(t * C)], W(emb_) + int64_t(toks[t]) * C, sizeof(float) * size_t(C));
    for (int64_t l = 0; l < L; l++) {
      const LayerParams& p = layers_[size_t(l)];
      float* kc = kcache_.data() + l * cache_len_ * KD;
      float* vc = vcache_.data() + l * cache_len_ * KD;
      rmsnorm_forward(*tp_, ln.data(), rstd.data(), x.data(), W(p.ln1), n, C, cfg_.rms_norm_eps);
      linear_forward(q.data(), ln.data(), W(p.wq), W(p.bq), n, C, QD);
      linear_forward(k.data(), ln.data(), W(p.wk), W(p.bk), n, C, KD);
      linear_forward(vc + pos0 * KD, ln.data(), W(p.wv), W(p.bv), n, C, KD);
      rmsnorm_forward(*tp_, q.data(), rstd.data(), q.data(), W(p.qn), n * Hq, D, cfg_.rms_norm_eps);
      rmsnorm_forward(*tp_, kc + pos0 * KD, rstd.data(), k.data(), W(p.kn), n * Hkv, D, cfg_.rms_norm_eps);
      rope_forward(*tp_, q.data(), pos.data(), inv_freq_.data(), n, Hq, D);
      rope_forward(*tp_, kc + pos0 * KD, pos.data(), inv_freq_.data(), n, Hkv, D);
      tp_->parallel_for(n * Hq, [&](int64_t task) {
        const int64_t i = task / Hq, h = task % Hq, gi = h / group;
        std::vector<float> prow(size_t(pos0 + i + 1));
        attend_row(&atty[size_t(i * QD + h * D)], prow.data(), &q[size_t(i * QD + h * D)], kc + gi * D, vc + gi * D, KD, pos0 + i + 1, D, scale);
      });
      linear_forward(tmp.data(), atty.data(), W(p.wo), W(p.bo), n, QD, C);
      for (int64_t i = 0; i < n * C; i++) x[size_t(i)] += tmp[size_t(i)];
      rmsnorm_forward(*tp_, ln.data(), rstd.data(), x.data(), W(p.ln2), n, C, cfg_.rms_norm_eps);
      linear_forward(g.data(), ln.data(), W(p.wg), nullptr, n, C, I);
      linear_forward(u.data(), ln.data(), W(p.wu), nullptr, n, C, I);
      swiglu_forward(*tp_, g.data(), g.data(), u.data(), n * I);
      linear_forward(tmp.data(), g.data(), W(p.wd), nullptr, n, I, C);
      for (int64_t i = 0; i < n * C; i++) x[size_t(i)] += tmp[size_t(i)];
    }
    rmsnorm_forward(*tp_, ln.data(), rstd.data(), &x[size_t((n - 1) * C)], W(normf_), 1, C, cfg_.rms_norm_eps);
    matmul_nt(*tp_, logits, ln.data(), W(head_), 1, V, C, false, naive());
  }

  QwenConfig cfg_;
  EngineOptions opts_;
  std::unique_ptr<ThreadPool> tp_;
  ParamLayout layout_;
  const std::vector<LayerParams>& layers_;
  const int64_t n_params_, emb_, normf_, head_;  // from layout_
  int64_t step_ = 0;
  std::vector<float> w_, g_, m_, v_;  // parameters, gradients, Adam moments: one allocation each
  std::vector<float> inv_freq_;
  std::string src_dir_;
  bool with_grads_ = true;
  // activations of the current micro-batch
  std::vector<float> acts_;
  std::vector<LayerActs> la_;
  std::vector<Seq> seqs_;
  std::vector<int64_t> att_off_;
  std::vector<int32_t> pos_;
  float *act_res_final_ = nullptr, *act_lnf_ = nullptr, *act_rstdf_ = nullptr, *act_lse_ = nullptr, *act_logp_ = nullptr;
  // backward scratch
  std::vector<float> d_res_, d_ln_, d_atty_, d_q_, d_k_, d_v_, d_qn_, d_kn_, d_gate_, d_up_, d_h_, scratch_a_, scratch_t_, logits_;
  // generation
  std::vector<float> kcache_, vcache_;
  int64_t cache_len_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const std::string& dir, const EngineOptions& opts) {
  return std::make_unique<CpuEngine>(dir, opts);
}

}  // namespace gl
