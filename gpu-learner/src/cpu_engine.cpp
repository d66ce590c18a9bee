// CPU backend: the fp32 reference implementation of the decoder policy (Qwen3, Qwen2, Llama, Mistral: config.h) and
// its GRPO++ training step.
// llm.c style: explicit forward/backward per layer, one allocation for parameters, one for
// gradients, activations planned up front per micro-batch. Notation: T tokens in the micro-batch,
// C hidden, Hq/Hkv heads, D head_dim, QD = Hq·D, KD = Hkv·D, I intermediate, V vocab.
// Products go through gemm.cpp (OpenBLAS tiles), attention through attention.cpp (flash-style, memory linear in
// the sequence length), row loops through the vector-width variants of simd.h. Nothing depends on the thread
// count: every output element is computed by one task in an order fixed by the shapes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <thread>

#include "attention.h"
#include "gl/engine.h"
#include "gl/grpo.h"
#include "gl/layout.h"
#include "gl/sampling.h"
#include "kernels.h"
#include "simd.h"

namespace gl {

using namespace cpu;

namespace {

// Activations of one layer for a micro-batch (pointers into the activation allocation).
struct LayerActs {
  float* res_in;  // (T,C) layer input (residual stream)
  float* ln1;     // (T,C)
  float* rstd1;   // (T)
  float* q;       // (T,QD) projection output, before q_norm (without q/k norm: the same buffer as qr)
  float* k;       // (T,KD)
  float* v;       // (T,KD)
  float* qrstd;   // (T,Hq)
  float* krstd;   // (T,Hkv)
  float* qr;      // (T,QD) after q_norm and RoPE
  float* kr;      // (T,KD)
  float* lse;     // (T,Hq) attention log-sum-exp per query row and head (attention.h)
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

// A sequence of the batched decoder: its options, RNG, KV cache and next-token logits.
struct DecodeSeq {
  int64_t id = 0;
  GenerateOptions o;
  Rng rng{0};
  int64_t max_t = 0;         // positions 0..max_t−1
  int64_t len = 0;           // tokens in the cache
  int64_t cap = 0;           // cache rows per layer
  std::vector<float> kv;     // per layer l: K (cap, KD) at 2l·cap·KD, V right after
  std::vector<float> logits; // (V) of the token at position len
};
using Decoder = std::map<int64_t, DecodeSeq>;  // running sequences by id

class CpuEngine final : public Engine {
 public:
  CpuEngine(const std::string& dir, const EngineOptions& opts) : CpuEngine(load_config(dir), dir, opts) {}
  CpuEngine(const QwenConfig& cfg, const std::string& dir, const EngineOptions& opts)
      : cfg_(cfg), opts_(opts), layout_(cfg), layers_(layout_.layers), n_params_(layout_.size()), emb_(layout_.embed),
        normf_(layout_.final_norm), head_(layout_.head), rope_(cfg) {
    gemm_init();
    int threads = opts.threads > 0 ? opts.threads : int(std::thread::hardware_concurrency());
    tp_ = std::make_unique<ThreadPool>(std::max(1, threads));
    load(dir);
  }

  const QwenConfig& config() const override { return cfg_; }
  int64_t step() const override { return step_; }
  std::string device() const override { return "cpu"; }
  const std::vector<ParamInfo>& params() const override { return layout_.params(); }

  void load(const std::string& dir) override {
    CheckpointState s = read_checkpoint(dir, cfg_, layout_);
    cfg_.raw_json = s.cfg.raw_json;
    w_ = std::move(s.w);
    m_ = std::move(s.m);
    v_ = std::move(s.v);
    step_ = s.step;
    g_.assign(size_t(n_params_), 0.0f);
    src_dir_ = dir;
    decoder_.clear();  // their caches hold the old weights' keys and values
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
    finish_train_step(st, grad_sumsq(), hp, &step_, [&](const AdamStep& a) { adamw(a); });
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

  // One sequence through the batched decoder of its own: the same path, so the same tokens, as in any batch.
  GenerateResult generate(const int32_t* prompt, int64_t n_prompt, const GenerateOptions& o) override {
    validate_decode(cfg_, prompt, n_prompt, o);
    GenerateResult r;
    if (o.max_new_tokens == 0) return r;
    Decoder d;
    add_sequences(d, prompt, n_prompt, {o});
    while (!d.empty())
      for (const DecodeToken& t : step_sequences(d)) append_token(&r, t);
    return r;
  }

  std::vector<int64_t> decode_add(const int32_t* prompt, int64_t n_prompt, const std::vector<GenerateOptions>& opts) override {
    return add_sequences(decoder_, prompt, n_prompt, opts);
  }
  std::vector<DecodeToken> decode_step() override { return step_sequences(decoder_); }
  bool decode_remove(int64_t seq) override { return decoder_.erase(seq) > 0; }
  int64_t decode_running() const override { return int64_t(decoder_.size()); }

 private:
  // ---------------------------------------------------------------- parameters

  float* W(int64_t off) { return off < 0 ? nullptr : w_.data() + off; }
  float* G(int64_t off) { return off < 0 ? nullptr : g_.data() + off; }

  // ---------------------------------------------------------------- activations plan

  // Lays out all activations of a micro-batch of T tokens in one allocation (linear in T: attention keeps a
  // log-sum-exp per row and head, not the probabilities).
  void plan_acts(int64_t T) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, L = cfg_.num_hidden_layers;
    const int64_t qkn = cfg_.qk_norm ? 1 : 0;  // without q/k norm, RoPE runs in place on the projections
    const int64_t per_layer = T * C * 4 + T * 2 + T * QD * (2 + qkn) + T * KD * (2 + qkn) + qkn * T * (Hq + Hkv) + T * Hq + T * I * 3;
    const int64_t total = L * per_layer + T * C /*final residual*/ + T * C + T * 3;
    if (int64_t(acts_.size()) < total) acts_.resize(size_t(total));
    float* p = acts_.data();
    auto take = [&](int64_t n) { float* r = p; p += n; return r; };
    la_.resize(size_t(L));
    for (int64_t l = 0; l < L; l++) {
      LayerActs& a = la_[size_t(l)];
      a.res_in = take(T * C); a.ln1 = take(T * C); a.rstd1 = take(T);
      a.q = take(T * QD); a.k = take(T * KD); a.v = take(T * KD);
      if (qkn) {
        a.qrstd = take(T * Hq); a.krstd = take(T * Hkv); a.qr = take(T * QD); a.kr = take(T * KD);
      } else {
        a.qrstd = a.krstd = nullptr; a.qr = a.q; a.kr = a.k;
      }
      a.lse = take(T * Hq); a.atty = take(T * QD); a.resmid = take(T * C); a.ln2 = take(T * C); a.rstd2 = take(T);
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
  AttnShape attn_shape() const {
    return {cfg_.num_attention_heads, cfg_.num_key_value_heads, cfg_.head_dim, float(1.0 / std::sqrt(double(cfg_.head_dim)))};
  }

  // Per-head RMSNorm over D of rows (R = T·heads) when the architecture has q/k norm (weight offset >= 0); else a copy
  // (nothing when out is x).
  void qk_norm(float* out, float* rstd, const float* x, int64_t w_off, int64_t R, int64_t D) {
    if (w_off >= 0) rmsnorm_forward(*tp_, out, rstd, x, W(w_off), R, D, cfg_.rms_norm_eps);
    else if (out != x) std::memcpy(out, x, sizeof(float) * size_t(R * D));
  }

  static void add_bias(float* out, const float* b, int64_t N, int64_t OC) {
    if (b)
      for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++) out[n * OC + o] += b[o];
  }

  // out (N,OC) = x (N,IC) @ W^T + b
  void linear_forward(float* out, const float* x, const float* Wt, const float* b, int64_t N, int64_t IC, int64_t OC) {
    matmul_nt(*tp_, out, x, Wt, N, OC, IC, false, naive());
    add_bias(out, b, N, OC);
  }
  // The same for the few rows of a decoding step: each row's result independent of the others (kernels.h).
  void linear_rows(float* out, const float* x, const float* Wt, const float* b, int64_t N, int64_t IC, int64_t OC) {
    if (naive()) matmul_nt(*tp_, out, x, Wt, N, OC, IC, false, true);
    else matmul_nt_rows(*tp_, out, x, Wt, N, OC, IC);
    add_bias(out, b, N, OC);
  }

  // dx (N,IC) (+)= dy @ W ; dW (OC,IC) += dy^T @ x ; db (OC) += Σ_n dy
  void linear_backward(float* dx, bool dx_acc, float* dW, float* db, const float* dy, const float* x, const float* Wt, int64_t N,
                       int64_t IC, int64_t OC) {
    if (dx) matmul_nn(*tp_, dx, dy, Wt, N, IC, OC, dx_acc, naive());
    if (!with_grads_) return;
    matmul_tn(*tp_, dW, dy, x, OC, IC, N, true, naive(), &scratch_t_);
    if (db)
      for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++) db[o] += dy[n * OC + o];
  }

  static void grow(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
  }

  // Rows of LM-head logits per chunk: 2^26 logits as the FSDP engine (gpu-learner/fsdp), or the test's budget.
  int64_t head_chunk(int64_t T) const {
    const int64_t budget = opts_.logits_budget > 0 ? opts_.logits_budget : (int64_t(1) << 26);
    return std::max<int64_t>(1, std::min<int64_t>(T, budget / cfg_.vocab_size));
  }

  // ---------------------------------------------------------------- forward (training / log-probs)

  // dLoss/dlogp of token t (index in the micro-batch) from its log-prob, called in increasing t (training).
  using TokenGrad = std::function<float(int64_t t, float logp)>;

  // ids (T) of n_seqs packed sequences (offs relative to offs[0]); fills the activations and act_logp_. With
  // token_grad (training), the LM head's backward runs chunk by chunk right here, while the chunk's logits exist
  // (no second pass recomputing them): d_ln_ gets dLoss/d(final-norm output) and the head's gradient accumulates.
  void forward(const int32_t* ids, const int32_t* offs, int64_t n_seqs, int64_t T, const TokenGrad* token_grad = nullptr) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers;
    seqs_.clear();
    pos_.resize(size_t(T));
    int64_t longest = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
      const int64_t a = offs[s] - offs[0], n = offs[s + 1] - offs[s];
      seqs_.push_back({a, n});
      longest = std::max(longest, n);
      for (int64_t i = 0; i < n; i++) pos_[size_t(a + i)] = int32_t(i);
    }
    rope_.ensure(longest);
    plan_acts(T);
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
      // per-head RMSNorm over D (Qwen3), then RoPE
      qk_norm(a.qr, a.qrstd, a.q, p.qn, T * Hq, D);
      qk_norm(a.kr, a.krstd, a.k, p.kn, T * Hkv, D);
      rope_forward(*tp_, a.qr, pos_.data(), rope_, T, Hq, D);
      rope_forward(*tp_, a.kr, pos_.data(), rope_, T, Hkv, D);
      // causal attention within each sequence; q head h reads kv head h / (Hq/Hkv)
      std::vector<AttnSeq> att;
      for (const Seq& sq : seqs_)
        att.push_back({a.qr + sq.start * QD, a.kr + sq.start * KD, a.v + sq.start * KD, a.atty + sq.start * QD, a.lse + sq.start * Hq, sq.len, 0});
      attention_forward(*tp_, att, attn_shape());
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
    if (token_grad) {
      grow(d_ln_, T * C);
      grow(dlogp_, T);
    }
    for (int64_t r0 = 0; r0 < T; r0 += chunk) {
      const int64_t rn = std::min(chunk, T - r0);
      matmul_nt(*tp_, logits_.data(), act_lnf_ + r0 * C, W(head_), rn, V, C, false, naive());
      tp_->parallel_for(rn, [&](int64_t i) {
        const float* lr = logits_.data() + i * V;
        const float lse = float(log_sum_exp(lr, V));
        const int64_t r = r0 + i;
        act_lse_[r] = lse;
        if (r + 1 < T && pos_[size_t(r + 1)] != 0) act_logp_[r + 1] = lr[ids[r + 1]] - lse;
      });
      if (token_grad) head_backward(ids, T, r0, rn, *token_grad);
    }
  }

  // The LM head's backward for rows [r0, r0+rn) whose logits are in logits_: dlogits[r] = c·(onehot(ids[r+1]) −
  // softmax(logits[r])) with c = dLoss/dlogp[r+1]; dln[r] = dlogits[r] @ Whead ; dWhead += dlogits^T lnf.
  void head_backward(const int32_t* ids, int64_t T, int64_t r0, int64_t rn, const TokenGrad& token_grad) {
    const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
    bool any = false;
    for (int64_t r = r0; r < r0 + rn; r++) {  // in token order: the loss is summed in it
      const bool has = r + 1 < T && pos_[size_t(r + 1)] != 0;
      dlogp_[size_t(r)] = has ? token_grad(r + 1, act_logp_[r + 1]) : 0.0f;
      any |= dlogp_[size_t(r)] != 0;
    }
    float* dln = d_ln_.data() + r0 * C;
    if (!any || !with_grads_) {
      std::fill(dln, dln + rn * C, 0.0f);
      return;
    }
    const SimdKernels& sk = simd();
    tp_->parallel_for(rn, [&](int64_t i) {
      float* lr = logits_.data() + i * V;
      const int64_t r = r0 + i;
      const float c = dlogp_[size_t(r)];
      sk.exp_store(lr, lr, V, act_lse_[r], 1.0f, -c);  // −c·softmax
      if (c != 0) lr[ids[r + 1]] += c;
    });
    linear_backward(dln, false, G(head_), nullptr, logits_.data(), act_lnf_ + r0 * C, W(head_), rn, C, V);
  }

  // ---------------------------------------------------------------- backward

  // Back from d_ln_ (dLoss/d(final-norm output), left by forward's fused LM-head backward) through the layers.
  // Accumulates into the gradient allocation.
  void backward(const int32_t* ids, int64_t T) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers;
    grow(d_res_, T * C); grow(d_ln_, T * C); grow(d_atty_, T * QD); grow(d_q_, T * QD); grow(d_k_, T * KD); grow(d_v_, T * KD);
    grow(d_gate_, T * I); grow(d_up_, T * I); grow(d_h_, T * I); grow(d_qn_, T * QD); grow(d_kn_, T * KD);
    float *dres = d_res_.data(), *dln = d_ln_.data();
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
      std::vector<AttnSeqGrad> att;
      for (const Seq& sq : seqs_)
        att.push_back({{a.qr + sq.start * QD, a.kr + sq.start * KD, a.v + sq.start * KD, a.atty + sq.start * QD, a.lse + sq.start * Hq, sq.len, 0},
                       d_atty_.data() + sq.start * QD, dqr + sq.start * QD, dkr + sq.start * KD, dv + sq.start * KD});
      attention_backward(*tp_, att, attn_shape());
      // RoPE^T, then the per-head RMSNorm backward to the projection outputs
      rope_backward(*tp_, dqr, pos_.data(), rope_, T, Hq, D);
      rope_backward(*tp_, dkr, pos_.data(), rope_, T, Hkv, D);
      float *dq = dqr, *dk = dkr;  // without q/k norm, RoPE^T gives the projections' gradients
      if (p.qn >= 0) {
        std::fill(d_q_.begin(), d_q_.begin() + T * QD, 0.0f);
        std::fill(d_k_.begin(), d_k_.begin() + T * KD, 0.0f);
        rmsnorm_backward(*tp_, d_q_.data(), G(p.qn), dqr, a.q, W(p.qn), a.qrstd, T * Hq, D);
        rmsnorm_backward(*tp_, d_k_.data(), G(p.kn), dkr, a.k, W(p.kn), a.krstd, T * Hkv, D);
        dq = d_q_.data();
        dk = d_k_.data();
      }
      linear_backward(dln, false, G(p.wq), G(p.bq), dq, a.ln1, W(p.wq), T, C, QD);
      linear_backward(dln, true, G(p.wk), G(p.bk), dk, a.ln1, W(p.wk), T, C, KD);
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
    for_micro_batches(b, hp.micro_batch_tokens, [&](int64_t s0, int64_t s1) {
      const int64_t a = b.offsets[s0], T = b.offsets[s1] - a;
      int64_t s = s0;  // the sequence of token t: tokens come in increasing order
      const TokenGrad token_grad = [&](int64_t tt, float logp) -> float {
        const int64_t t = a + tt;
        while (t >= b.offsets[s + 1]) s++;
        const double norm = norms[size_t(s)], m = b.mask[t];
        if (norm == 0 || m == 0) return 0.0f;  // (the first token of a sequence has no prediction: never asked)
        const double lp = logp;
        const double old = b.old_logprobs ? double(b.old_logprobs[t]) : lp;
        const TokenLoss tl = grpo_token_loss(lp, old, b.advantages[s], hp.clip_low, clip_high);
        loss += m * tl.loss / norm;
        masked++;
        clipped += tl.clipped;
        ratio_sum += tl.ratio;
        return float(m * tl.dlogp / norm);
      };
      forward(b.ids + a, b.offsets + s0, s1 - s0, T, &token_grad);
      if (with_grads_) backward(b.ids + a, T);
    });
    st.loss = loss;
    st.clip_fraction = masked ? double(clipped) / double(masked) : 0.0;
    st.mean_ratio = masked ? ratio_sum / double(masked) : 0.0;
    st.step = step_;
    return st;
  }

  // Σ g² in double over fixed ranges, the partial sums added in order.
  double grad_sumsq() {
    constexpr int64_t kRange = int64_t(1) << 20;
    const int64_t n = n_params_, nt = (n + kRange - 1) / kRange;
    std::vector<double> part(size_t(nt), 0.0);
    tp_->parallel_for(nt, [&](int64_t t) {
      double s = 0;
      const float* g = g_.data();
#pragma omp simd reduction(+ : s)
      for (int64_t i = t * kRange; i < std::min(n, (t + 1) * kRange); i++) s += double(g[i]) * g[i];
      part[size_t(t)] = s;
    });
    double ss = 0;
    for (double s : part) ss += s;
    return ss;
  }

  // AdamW as torch.optim.AdamW (layout.h AdamStep), element by element.
  void adamw(const AdamStep& a) {
    const int64_t n = n_params_, nt = std::max<int64_t>(1, n / 65536 + 1);
    tp_->parallel_for(nt, [&](int64_t t) {
      float *w = w_.data(), *m = m_.data(), *v = v_.data();
      const float* gr = g_.data();
#pragma omp simd
      for (int64_t i = n * t / nt; i < n * (t + 1) / nt; i++) {
        const float g = gr[i] * a.clip;
        m[i] = a.b1 * m[i] + (1 - a.b1) * g;
        v[i] = a.b2 * v[i] + (1 - a.b2) * g * g;
        w[i] = w[i] * a.decay - a.step_size * m[i] / (std::sqrt(v[i]) * a.inv_sqrt_bc2 + a.eps);
      }
    });
  }

  // ---------------------------------------------------------------- batched decoding (KV cache per sequence)

  float* kcache(DecodeSeq& s, int64_t l) { return s.kv.data() + 2 * l * s.cap * cfg_.kv_dim(); }
  float* vcache(DecodeSeq& s, int64_t l) { return kcache(s, l) + s.cap * cfg_.kv_dim(); }

  // Room for n cached positions (doubling, at most max_t).
  void reserve(DecodeSeq& s, int64_t n) {
    if (n <= s.cap) return;
    const int64_t KD = cfg_.kv_dim(), L = cfg_.num_hidden_layers;
    const int64_t cap = std::min(s.max_t, std::max({n, 2 * s.cap, int64_t(64)}));
    std::vector<float> kv(size_t(2 * L * cap * KD));
    for (int64_t l = 0; l < L; l++)
      for (int64_t half = 0; half < 2; half++)
        std::memcpy(kv.data() + (2 * l + half) * cap * KD, s.kv.data() + (2 * l + half) * s.cap * KD, sizeof(float) * size_t(s.len * KD));
    s.kv = std::move(kv);
    s.cap = cap;
  }

  std::vector<int64_t> add_sequences(Decoder& d, const int32_t* prompt, int64_t n_prompt, const std::vector<GenerateOptions>& opts) {
    if (opts.empty()) throw std::invalid_argument("decodeAdd needs at least one options entry");
    for (size_t i = 0; i < opts.size(); i++) {
      validate_decode(cfg_, prompt, n_prompt, opts[i]);
      if (opts[i].max_new_tokens < 1)
        throw std::invalid_argument("options[" + std::to_string(i) + "].maxNewTokens must be >= 1 for batched decoding, got " +
                                    std::to_string(opts[i].max_new_tokens));
    }
    std::vector<DecodeSeq> fresh(opts.size());
    for (size_t i = 0; i < opts.size(); i++) {
      DecodeSeq& s = fresh[i];
      s.o = opts[i];
      s.rng = Rng(opts[i].seed);
      s.max_t = decode_limit(cfg_, n_prompt, opts[i]);
    }
    // the prompt's prefill once, into the sequence that may grow longest; the others copy its cache
    DecodeSeq& first = *std::max_element(fresh.begin(), fresh.end(), [](auto& a, auto& b) { return a.max_t < b.max_t; });
    prefill(first, prompt, n_prompt);
    const int64_t KD = cfg_.kv_dim();
    for (DecodeSeq& s : fresh) {
      if (&s == &first) continue;
      reserve(s, n_prompt);
      for (int64_t l = 0; l < cfg_.num_hidden_layers; l++) {
        std::memcpy(kcache(s, l), kcache(first, l), sizeof(float) * size_t(n_prompt * KD));
        std::memcpy(vcache(s, l), vcache(first, l), sizeof(float) * size_t(n_prompt * KD));
      }
      s.len = n_prompt;
      s.logits = first.logits;
    }
    std::vector<int64_t> ids;
    for (DecodeSeq& s : fresh) {
      s.id = next_seq_id_++;
      ids.push_back(s.id);
      d.emplace(s.id, std::move(s));
    }
    return ids;
  }

  std::vector<DecodeToken> step_sequences(Decoder& d) {
    std::vector<DecodeSeq*> all;
    for (auto& [id, s] : d) all.push_back(&s);
    std::vector<DecodeToken> out(all.size());
    tp_->parallel_for(int64_t(all.size()), [&](int64_t i) {  // each sequence samples with its own RNG
      DecodeSeq& s = *all[size_t(i)];
      out[size_t(i)] = next_token(cfg_, s.logits.data(), s.o, s.rng, s.len, s.max_t);
      out[size_t(i)].seq = s.id;
    });
    std::vector<DecodeSeq*> running;
    std::vector<int32_t> toks;
    for (size_t i = 0; i < all.size(); i++)
      if (out[i].finish == DecodeToken::Running) {
        running.push_back(all[i]);
        toks.push_back(out[i].id);
      }
    if (!running.empty()) decode_forward(running, toks.data());
    for (const DecodeToken& t : out)
      if (t.finish != DecodeToken::Running) d.erase(t.seq);
    return out;
  }

  // The prompt's n tokens at positions s.len.. through the model into s's cache; s.logits of the last one.
  void prefill(DecodeSeq& s, const int32_t* toks, int64_t n) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers, pos0 = s.len;
    reserve(s, pos0 + n);
    rope_.ensure(pos0 + n);
    std::vector<float> x(size_t(n * C)), ln(size_t(n * C)), tmp(size_t(n * C)), rstd(size_t(n * std::max(Hq, int64_t(1))));
    std::vector<float> q(size_t(n * QD)), k(size_t(n * KD)), atty(size_t(n * QD)), g(size_t(n * I)), u(size_t(n * I));
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) pos[size_t(i)] = int32_t(pos0 + i);
    for (int64_t t = 0; t < n; t++) std::memcpy(&x[size_t(t * C)], W(emb_) + int64_t(toks[t]) * C, sizeof(float) * size_t(C));
    for (int64_t l = 0; l < L; l++) {
      const LayerParams& p = layers_[size_t(l)];
      float *kc = kcache(s, l), *vc = vcache(s, l);
      rmsnorm_forward(*tp_, ln.data(), rstd.data(), x.data(), W(p.ln1), n, C, cfg_.rms_norm_eps);
      linear_forward(q.data(), ln.data(), W(p.wq), W(p.bq), n, C, QD);
      linear_forward(k.data(), ln.data(), W(p.wk), W(p.bk), n, C, KD);
      linear_forward(vc + pos0 * KD, ln.data(), W(p.wv), W(p.bv), n, C, KD);
      qk_norm(q.data(), rstd.data(), q.data(), p.qn, n * Hq, D);
      qk_norm(kc + pos0 * KD, rstd.data(), k.data(), p.kn, n * Hkv, D);
      rope_forward(*tp_, q.data(), pos.data(), rope_, n, Hq, D);
      rope_forward(*tp_, kc + pos0 * KD, pos.data(), rope_, n, Hkv, D);
      attention_forward(*tp_, {AttnSeq{q.data(), kc, vc, atty.data(), nullptr, n, pos0}}, attn_shape());
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
    s.logits.resize(size_t(V));
    linear_rows(s.logits.data(), ln.data(), W(head_), nullptr, 1, C, V);
    s.len = pos0 + n;
  }

  // One token per sequence (M rows) at each one's next position: the weights are read once for all rows, and a
  // row's arithmetic is the same whatever the other rows are (linear_rows, per-sequence attention).
  void decode_forward(const std::vector<DecodeSeq*>& ss, const int32_t* toks) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers, M = int64_t(ss.size());
    std::vector<int32_t> pos(static_cast<size_t>(M));
    int64_t top = 0;
    for (int64_t i = 0; i < M; i++) {
      reserve(*ss[size_t(i)], ss[size_t(i)]->len + 1);
      pos[size_t(i)] = int32_t(ss[size_t(i)]->len);
      top = std::max(top, ss[size_t(i)]->len + 1);
    }
    rope_.ensure(top);
    std::vector<float> x(size_t(M * C)), ln(size_t(M * C)), tmp(size_t(M * C)), rstd(size_t(M * std::max(Hq, int64_t(1))));
    std::vector<float> q(size_t(M * QD)), k(size_t(M * KD)), v(size_t(M * KD)), atty(size_t(M * QD)), g(size_t(M * I)), u(size_t(M * I));
    for (int64_t t = 0; t < M; t++) std::memcpy(&x[size_t(t * C)], W(emb_) + int64_t(toks[t]) * C, sizeof(float) * size_t(C));
    for (int64_t l = 0; l < L; l++) {
      const LayerParams& p = layers_[size_t(l)];
      rmsnorm_forward(*tp_, ln.data(), rstd.data(), x.data(), W(p.ln1), M, C, cfg_.rms_norm_eps);
      linear_rows(q.data(), ln.data(), W(p.wq), W(p.bq), M, C, QD);
      linear_rows(k.data(), ln.data(), W(p.wk), W(p.bk), M, C, KD);
      linear_rows(v.data(), ln.data(), W(p.wv), W(p.bv), M, C, KD);
      qk_norm(q.data(), rstd.data(), q.data(), p.qn, M * Hq, D);
      qk_norm(k.data(), rstd.data(), k.data(), p.kn, M * Hkv, D);
      rope_forward(*tp_, q.data(), pos.data(), rope_, M, Hq, D);
      rope_forward(*tp_, k.data(), pos.data(), rope_, M, Hkv, D);
      std::vector<AttnSeq> att;
      for (int64_t i = 0; i < M; i++) {
        DecodeSeq& s = *ss[size_t(i)];
        float *kc = kcache(s, l), *vc = vcache(s, l);
        std::memcpy(kc + s.len * KD, &k[size_t(i * KD)], sizeof(float) * size_t(KD));
        std::memcpy(vc + s.len * KD, &v[size_t(i * KD)], sizeof(float) * size_t(KD));
        att.push_back({&q[size_t(i * QD)], kc, vc, &atty[size_t(i * QD)], nullptr, 1, s.len});
      }
      attention_decode(*tp_, att, attn_shape());
      linear_rows(tmp.data(), atty.data(), W(p.wo), W(p.bo), M, QD, C);
      for (int64_t i = 0; i < M * C; i++) x[size_t(i)] += tmp[size_t(i)];
      rmsnorm_forward(*tp_, ln.data(), rstd.data(), x.data(), W(p.ln2), M, C, cfg_.rms_norm_eps);
      linear_rows(g.data(), ln.data(), W(p.wg), nullptr, M, C, I);
      linear_rows(u.data(), ln.data(), W(p.wu), nullptr, M, C, I);
      swiglu_forward(*tp_, g.data(), g.data(), u.data(), M * I);
      linear_rows(tmp.data(), g.data(), W(p.wd), nullptr, M, I, C);
      for (int64_t i = 0; i < M * C; i++) x[size_t(i)] += tmp[size_t(i)];
    }
    rmsnorm_forward(*tp_, ln.data(), rstd.data(), x.data(), W(normf_), M, C, cfg_.rms_norm_eps);
    grow(logits_, M * V);
    linear_rows(logits_.data(), ln.data(), W(head_), nullptr, M, C, V);
    for (int64_t i = 0; i < M; i++) {
      DecodeSeq& s = *ss[size_t(i)];
      s.logits.assign(logits_.begin() + i * V, logits_.begin() + (i + 1) * V);
      s.len++;
    }
  }

  QwenConfig cfg_;
  EngineOptions opts_;
  std::unique_ptr<ThreadPool> tp_;
  ParamLayout layout_;
  const std::vector<LayerParams>& layers_;
  const int64_t n_params_, emb_, normf_, head_;  // from layout_
  RopeTable rope_;
  int64_t step_ = 0;
  std::vector<float> w_, g_, m_, v_;  // parameters, gradients, Adam moments: one allocation each
  std::string src_dir_;
  bool with_grads_ = true;
  // activations of the current micro-batch
  std::vector<float> acts_;
  std::vector<LayerActs> la_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> pos_;
  float *act_res_final_ = nullptr, *act_lnf_ = nullptr, *act_rstdf_ = nullptr, *act_lse_ = nullptr, *act_logp_ = nullptr;
  // backward scratch
  std::vector<float> d_res_, d_ln_, d_atty_, d_q_, d_k_, d_v_, d_qn_, d_kn_, d_gate_, d_up_, d_h_, scratch_a_, scratch_t_, logits_, dlogp_;
  // batched decoding
  Decoder decoder_;
  int64_t next_seq_id_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const std::string& dir, const EngineOptions& opts) {
  return std::make_unique<CpuEngine>(dir, opts);
}

}  // namespace gl
