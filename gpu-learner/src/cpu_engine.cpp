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
#include <list>
#include <map>
#include <stdexcept>
#include <thread>

#include "attention.h"
#include "gl/engine.h"
#include "gl/grpo.h"
#include "gl/layout.h"
#include "gl/sampling.h"
#include "kernels.h"
#include "row_plan.h"
#include "simd.h"

namespace gl {

namespace {
// Round to nearest even, as a float holding a bf16 (8-bit mantissa) or fp16 (11-bit, range ±65504, subnormals below
// 2^-14) value. NaN stays NaN.
inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float round_fp16(float x) {
  const float a = std::fabs(x);
  if (!(a == a)) return x;
  if (a < 6.103515625e-05f) return std::nearbyint(x * 16777216.0f) / 16777216.0f;  // subnormal: multiples of 2^-24
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x0fffu + ((u >> 13) & 1u);
  u &= 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return std::fabs(x) > 65504.0f ? std::copysign(INFINITY, x) : x;
}
}  // namespace


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

// Recently prefilled prompts, newest first: their keys and values (per layer K (n, KD) then V) and the logits after
// them, so a sample of the same prompt added later (another rollout of a GRPO group, arriving after the first began)
// copies them instead of prefilling again. Exact prompts only: the copy holds the bits a fresh prefill would, so a
// sequence's tokens stay those it gets alone. Emptied whenever the weights change.
struct PromptCache {
  struct Entry {
    std::vector<int32_t> prompt;
    std::vector<float> kv, logits;
  };
  std::list<Entry> entries;
  size_t bytes = 0;
  void clear() {
    entries.clear();
    bytes = 0;
  }
};

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

  // The weights now; the AdamW moments (optimizer.bin: its step is checked and read now) when a step or a save needs
  // them, and the gradients when one is computed: a model that only samples (a policy server) holds its weights alone,
  // a quarter of a trainer's memory.
  void load(const std::string& dir) override {
    CheckpointState s = read_checkpoint(dir, cfg_, layout_, false);
    cfg_.raw_json = s.cfg.raw_json;
    w_ = std::move(s.w);
    to_half(w_.data(), int64_t(w_.size()));
    std::vector<float>().swap(m_);
    std::vector<float>().swap(v_);
    moments_from_ = s.has_optimizer ? dir + "/optimizer.bin" : "";
    step_ = s.step;
    src_dir_ = dir;
    decoder_.clear();  // their caches hold the old weights' keys and values
    prompts_.clear();
  }

  void save(const std::string& dir) override {
    ensure_moments();
    save_checkpoint(dir, layout_, cfg_, w_.data(), m_, v_, step_, src_dir_);
  }

  std::vector<float> get_tensor(const std::string& name, bool grad) const override {
    const ParamInfo& p = layout_.find(name);
    if (grad && g_.empty()) return std::vector<float>(size_t(p.numel), 0.0f);  // no gradient computed yet
    const float* src = (grad ? g_.data() : w_.data()) + p.offset;
    return std::vector<float>(src, src + p.numel);
  }

  void set_tensor(const std::string& name, const float* data, int64_t n) override {
    const ParamInfo& p = layout_.find(name);
    check_tensor_size(p, n);
    std::memcpy(w_.data() + p.offset, data, sizeof(float) * size_t(n));
    to_half(w_.data() + p.offset, n);
    prompts_.clear();
  }

  // ---------------------------------------------------------------- log-probs

  void logprobs(const PackedBatch& b, float* out) override {
    validate_packed(b, cfg_.vocab_size, cfg_.max_position_embeddings);
    for_row_plans(b, 4096, opts_.min_shared_prefix, [&](const RowPlan& pl) {
      forward(pl);
      const int64_t a = b.offsets[pl.s0];
      for (size_t t = 0; t < pl.src_row.size(); t++) out[a + int64_t(t)] = pl.src_row[t] >= 0 ? act_logp_[pl.src_row[t]] : 0.0f;
    });
    release_scratch();
  }

  // ---------------------------------------------------------------- training

  TrainStats train_step(const TrainBatch& b, const TrainHyper& hp) override {
    log_probs_only("trainStep");
    const auto t0 = std::chrono::steady_clock::now();
    ensure_moments();
    TrainStats st = accumulate_gradients(b, hp);
    finish_train_step(st, grad_sumsq(), hp, &step_, [&](const AdamStep& a) {
      adamw(a);
      prompts_.clear();
    });
    release_scratch();
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
    log_probs_only("generate");
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
    log_probs_only("decodeAdd");
    return add_sequences(decoder_, prompt, n_prompt, opts);
  }
  std::vector<DecodeToken> decode_step() override { return step_sequences(decoder_); }
  bool decode_remove(int64_t seq) override { return decoder_.erase(seq) > 0; }
  int64_t decode_running() const override { return int64_t(decoder_.size()); }

 private:
  // ---------------------------------------------------------------- parameters

  float* W(int64_t off) { return off < 0 ? nullptr : w_.data() + off; }

  // EngineOptions::emulate_half: x[0..n) rounded in place to the emulated type (nothing without emulation).
  void to_half(float* x, int64_t n) const {
    if (opts_.emulate_half == EngineOptions::Half::bf16)
      for (int64_t i = 0; i < n; i++) x[i] = round_bf16(x[i]);
    else if (opts_.emulate_half == EngineOptions::Half::fp16)
      for (int64_t i = 0; i < n; i++) x[i] = round_fp16(x[i]);
  }
  void log_probs_only(const char* call) const {
    if (opts_.emulate_half != EngineOptions::Half::none)
      throw std::invalid_argument(std::string(call) + ": this learner was loaded with emulateHalf, which computes log-probs only");
  }

  // The AdamW moments of the loaded checkpoint (zeros without optimizer.bin), read on first need.
  void ensure_moments() {
    if (!m_.empty()) return;
    if (moments_from_.empty()) {
      m_.assign(size_t(n_params_), 0.0f);
      v_.assign(size_t(n_params_), 0.0f);
      return;
    }
    int64_t step = 0;
    if (!read_optimizer_state(moments_from_, n_params_, &step, &m_, &v_))
      throw std::runtime_error(moments_from_ + ": the AdamW state of the loaded checkpoint is gone (read on first use, after load)");
    if (step != step_)
      throw std::runtime_error(moments_from_ + ": step " + std::to_string(step) + " now, " + std::to_string(step_) + " when loaded (the checkpoint changed)");
  }
  float* G(int64_t off) { return off < 0 ? nullptr : g_.data() + off; }

  // ---------------------------------------------------------------- activations plan

  // Lays out all activations of a micro-batch of T tokens in one allocation (linear in T: attention keeps a
  // log-sum-exp per row and head, not the probabilities). A forward without a backward (keep_layers false: log-probs)
  // runs every layer on one layer's buffers: layer l's output overwrites its input, which nothing reads again. For
  // Qwen2.5-0.5B that is 0.25 GB instead of 6 GB at 4,096 rows.
  void plan_acts(int64_t T, bool keep_layers) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, L = cfg_.num_hidden_layers;
    const int64_t qkn = cfg_.qk_norm ? 1 : 0;  // without q/k norm, RoPE runs in place on the projections
    const int64_t per_layer = T * C * 4 + T * 2 + T * QD * (2 + qkn) + T * KD * (2 + qkn) + qkn * T * (Hq + Hkv) + T * Hq + T * I * 2;
    const int64_t stored = keep_layers ? L : 1;
    const int64_t total = stored * per_layer + T * C /*final residual*/ + T * C + T * 3;
    grow(acts_, total);
    float* p = acts_.data();
    auto take = [&](int64_t n) { float* r = p; p += n; return r; };
    la_.resize(size_t(L));
    for (int64_t l = 0; l < L; l++) {
      LayerActs& a = la_[size_t(l)];
      if (l >= stored) {
        a = la_[0];
        continue;
      }
      a.res_in = take(T * C); a.ln1 = take(T * C); a.rstd1 = take(T);
      a.q = take(T * QD); a.k = take(T * KD); a.v = take(T * KD);
      if (qkn) {
        a.qrstd = take(T * Hq); a.krstd = take(T * Hkv); a.qr = take(T * QD); a.kr = take(T * KD);
      } else {
        a.qrstd = a.krstd = nullptr; a.qr = a.q; a.kr = a.k;
      }
      a.lse = take(T * Hq); a.atty = take(T * QD); a.resmid = take(T * C); a.ln2 = take(T * C); a.rstd2 = take(T);
      a.gate = take(T * I); a.up = take(T * I);  // h = silu(gate)·up is recomputed in the backward: 1/4 less memory
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

  // A scratch buffer of at least n floats; its contents are not kept when it grows (the old block is freed first, so a
  // larger micro-batch never holds the old and the new buffer at once: a 3 GB buffer grown to 6 GB peaked at 9).
  static void grow(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) >= n) return;
    std::vector<float>().swap(v);
    v.resize(size_t(n));
  }
  // The activation and gradient scratch of a step, freed when it ends: between steps the rollouts' policy server
  // (in the same process) has that memory (3 GB at 2,048 rows of Qwen2.5-0.5B); it is allocated again in the next step.
  void release_scratch() {
    for (std::vector<float>* v : {&acts_, &d_res_, &d_ln_, &d_atty_, &d_q_, &d_k_, &d_v_, &d_qn_, &d_kn_, &d_gate_, &d_up_, &d_h_, &scratch_a_,
                                  &scratch_t_, &logits_, &dlogp_, &h_, &kcat_, &vcat_, &dkcat_, &dvcat_, &lnf_sel_, &dln_sel_})
      std::vector<float>().swap(*v);
    la_.clear();
  }

  // Rows of LM-head logits per chunk: 2^26 logits as the FSDP engine (gpu-learner/fsdp), or the test's budget.
  int64_t head_chunk(int64_t T) const {
    const int64_t budget = opts_.logits_budget > 0 ? opts_.logits_budget : (int64_t(1) << 26);
    return std::max<int64_t>(1, std::min<int64_t>(T, budget / cfg_.vocab_size));
  }

  // ---------------------------------------------------------------- forward (training / log-probs)

  // dLoss/dlogp of the batch's token t from its log-prob (training); a row predicting several tokens (a shared
  // prefix's) sums their calls.
  using TokenGrad = std::function<float(int64_t t, float logp)>;

  // The attention units of the plan's spans for one layer's q/k/v: a span with a shared prefix reads the prefix's keys
  // and values, then its own, copied into one contiguous buffer per span (kcat_/vcat_), as one causal sequence whose
  // queries start at the prefix's length.
  std::vector<AttnSeq> attn_units(const RowPlan& pl, const LayerActs& a) {
    const int64_t QD = cfg_.q_dim(), KD = cfg_.kv_dim(), Hq = cfg_.num_attention_heads;
    int64_t cat = 0;
    for (const RowSpan& sp : pl.spans)
      if (sp.prefix >= 0) cat += (pl.spans[size_t(sp.prefix)].len + sp.len) * KD;
    grow(kcat_, cat);
    grow(vcat_, cat);
    std::vector<AttnSeq> att;
    int64_t off = 0;
    for (const RowSpan& sp : pl.spans) {
      const float *k = a.kr + sp.start * KD, *v = a.v + sp.start * KD;
      int64_t q0 = 0;
      if (sp.prefix >= 0) {
        const RowSpan& pre = pl.spans[size_t(sp.prefix)];
        float *kc = kcat_.data() + off, *vc = vcat_.data() + off;
        std::memcpy(kc, a.kr + pre.start * KD, sizeof(float) * size_t(pre.len * KD));
        std::memcpy(kc + pre.len * KD, k, sizeof(float) * size_t(sp.len * KD));
        std::memcpy(vc, a.v + pre.start * KD, sizeof(float) * size_t(pre.len * KD));
        std::memcpy(vc + pre.len * KD, v, sizeof(float) * size_t(sp.len * KD));
        k = kc;
        v = vc;
        q0 = pre.len;
        off += (pre.len + sp.len) * KD;
      }
      att.push_back({a.qr + sp.start * QD, k, v, a.atty + sp.start * QD, a.lse + sp.start * Hq, sp.len, q0});
    }
    return att;
  }

  // The plan's rows (a micro-batch); fills the activations and act_logp_ (per row: the log-prob of the token it
  // predicts). With token_grad (training), the LM head runs only on head_rows (increasing: the rows predicting a
  // trained token; a prompt's rows predict none), and its backward runs chunk by chunk right here, while the chunk's
  // logits exist (no second pass recomputing them): d_ln_ gets dLoss/d(final-norm output) (0 on the other rows) and
  // the head's gradient accumulates.
  void forward(const RowPlan& pl, const TokenGrad* token_grad = nullptr, const std::vector<int64_t>* head_rows = nullptr) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers, T = pl.rows();
    const int32_t* pos = pl.pos.data();
    rope_.ensure(pl.longest());
    plan_acts(T, token_grad != nullptr);
    // embedding: res_in[0] (T,C) = E[ids]
    for (int64_t t = 0; t < T; t++) std::memcpy(la_[0].res_in + t * C, W(emb_) + int64_t(pl.ids[size_t(t)]) * C, sizeof(float) * size_t(C));
    grow(scratch_a_, T * C);
    grow(h_, T * I);
    for (int64_t l = 0; l < L; l++) {
      const LayerParams& p = layers_[size_t(l)];
      LayerActs& a = la_[size_t(l)];
      float* res_out = l + 1 < L ? la_[size_t(l + 1)].res_in : act_res_final_;
      rmsnorm_forward(*tp_, a.ln1, a.rstd1, a.res_in, W(p.ln1), T, C, cfg_.rms_norm_eps);
      to_half(a.ln1, T * C);
      linear_forward(a.q, a.ln1, W(p.wq), W(p.bq), T, C, QD);
      linear_forward(a.k, a.ln1, W(p.wk), W(p.bk), T, C, KD);
      linear_forward(a.v, a.ln1, W(p.wv), W(p.bv), T, C, KD);
      to_half(a.q, T * QD);
      to_half(a.k, T * KD);
      to_half(a.v, T * KD);
      // per-head RMSNorm over D (Qwen3), then RoPE
      qk_norm(a.qr, a.qrstd, a.q, p.qn, T * Hq, D);
      qk_norm(a.kr, a.krstd, a.k, p.kn, T * Hkv, D);
      rope_forward(*tp_, a.qr, pos, rope_, T, Hq, D);
      rope_forward(*tp_, a.kr, pos, rope_, T, Hkv, D);
      to_half(a.qr, T * QD);
      to_half(a.kr, T * KD);
      // causal attention within each span (after its shared prefix); q head h reads kv head h / (Hq/Hkv)
      attention_forward(*tp_, attn_units(pl, a), attn_shape());
      to_half(a.atty, T * QD);
      linear_forward(scratch_a_.data(), a.atty, W(p.wo), W(p.bo), T, QD, C);
      to_half(scratch_a_.data(), T * C);
      for (int64_t i = 0; i < T * C; i++) a.resmid[i] = a.res_in[i] + scratch_a_[size_t(i)];
      to_half(a.resmid, T * C);
      rmsnorm_forward(*tp_, a.ln2, a.rstd2, a.resmid, W(p.ln2), T, C, cfg_.rms_norm_eps);
      to_half(a.ln2, T * C);
      linear_forward(a.gate, a.ln2, W(p.wg), nullptr, T, C, I);
      linear_forward(a.up, a.ln2, W(p.wu), nullptr, T, C, I);
      to_half(a.gate, T * I);
      to_half(a.up, T * I);
      swiglu_forward(*tp_, h_.data(), a.gate, a.up, T * I);
      to_half(h_.data(), T * I);
      linear_forward(scratch_a_.data(), h_.data(), W(p.wd), nullptr, T, I, C);
      to_half(scratch_a_.data(), T * C);
      for (int64_t i = 0; i < T * C; i++) res_out[i] = a.resmid[i] + scratch_a_[size_t(i)];
      to_half(res_out, T * C);
    }
    rmsnorm_forward(*tp_, act_lnf_, act_rstdf_, act_res_final_, W(normf_), T, C, cfg_.rms_norm_eps);
    to_half(act_lnf_, T * C);
    // LM head in row chunks (the (n,V) logits never exist at once): logp[r] = logits[r][target[r]] − lse[r]
    const int64_t n = head_rows ? int64_t(head_rows->size()) : T;
    const int64_t* rows = head_rows ? head_rows->data() : nullptr;  // null: every row
    const float* lnf = act_lnf_;
    if (rows) {  // the selected rows gathered, so each chunk is one GEMM
      grow(lnf_sel_, n * C);
      tp_->parallel_for(n, [&](int64_t i) { std::memcpy(lnf_sel_.data() + i * C, act_lnf_ + rows[i] * C, sizeof(float) * size_t(C)); });
      lnf = lnf_sel_.data();
    }
    const int64_t chunk = head_chunk(std::max<int64_t>(n, 1));
    grow(logits_, chunk * V);
    if (token_grad) {
      grow(d_ln_, T * C);
      grow(dlogp_, T);
      std::fill(d_ln_.begin(), d_ln_.begin() + T * C, 0.0f);  // rows without a trained token
    }
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
      const int64_t rn = std::min(chunk, n - i0);
      matmul_nt(*tp_, logits_.data(), lnf + i0 * C, W(head_), rn, V, C, false, naive());
      to_half(logits_.data(), rn * V);
      tp_->parallel_for(rn, [&](int64_t i) {
        const float* lr = logits_.data() + i * V;
        const float lse = float(log_sum_exp(lr, V));
        const int64_t r = rows ? rows[i0 + i] : i0 + i;
        const int32_t y = pl.target[size_t(r)];
        act_lse_[r] = lse;
        act_logp_[r] = y >= 0 ? lr[y] - lse : 0.0f;
      });
      if (token_grad) head_backward(pl, i0, rn, rows, lnf, *token_grad);
    }
  }

  // The LM head's backward for the chunk of selected rows [i0, i0+rn) (rows: their row numbers, null: i itself),
  // whose logits are in logits_ and final-norm outputs in lnf: dlogits[r] = c·(onehot(target[r]) − softmax(logits[r]))
  // with c = dLoss/dlogp[r] (summed over the tokens the row predicts); dln[r] = dlogits[r] @ Whead ; dWhead +=
  // dlogits^T lnf.
  void head_backward(const RowPlan& pl, int64_t i0, int64_t rn, const int64_t* rows, const float* lnf, const TokenGrad& token_grad) {
    const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
    auto row = [&](int64_t i) { return rows ? rows[i0 + i] : i0 + i; };
    bool any = false;
    for (int64_t i = 0; i < rn; i++) {  // in row order, each row's tokens in increasing order: the loss is summed in it
      const int64_t r = row(i);
      double c = 0;
      for (int64_t k = pl.row_tok_off[size_t(r)]; k < pl.row_tok_off[size_t(r + 1)]; k++) c += token_grad(pl.row_tok[size_t(k)], act_logp_[r]);
      dlogp_[size_t(r)] = float(c);
      any |= c != 0;
    }
    if (!any || !with_grads_) return;  // d_ln_ stays 0 on these rows
    const SimdKernels& sk = simd();
    tp_->parallel_for(rn, [&](int64_t i) {
      float* lr = logits_.data() + i * V;
      const int64_t r = row(i);
      const float c = dlogp_[size_t(r)];
      sk.exp_store(lr, lr, V, act_lse_[r], 1.0f, -c);  // −c·softmax
      if (c != 0) lr[pl.target[size_t(r)]] += c;
    });
    if (rows) grow(dln_sel_, rn * C);
    float* dln = rows ? dln_sel_.data() : d_ln_.data() + i0 * C;
    linear_backward(dln, false, G(head_), nullptr, logits_.data(), lnf + i0 * C, W(head_), rn, C, V);
    if (rows)
      tp_->parallel_for(rn, [&](int64_t i) { std::memcpy(d_ln_.data() + row(i) * C, dln + i * C, sizeof(float) * size_t(C)); });
  }

  // ---------------------------------------------------------------- backward

  // Attention's backward for one layer: dqr, dkr, dv (zeroed, rows of the plan) from datty. A span with a shared
  // prefix runs on its concatenated keys (attn_units) into dkcat_/dvcat_; the prefix rows of those gradients are then
  // added into the prefix's rows, in span order (fixed), and the span's own rows into its rows.
  void attention_backward_rows(const RowPlan& pl, const LayerActs& a, float* dqr, float* dkr, float* dv) {
    const int64_t QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const std::vector<AttnSeq> units = attn_units(pl, a);
    grow(dkcat_, int64_t(kcat_.size()));
    grow(dvcat_, int64_t(vcat_.size()));
    std::vector<AttnSeqGrad> att;
    int64_t off = 0;
    for (size_t i = 0; i < units.size(); i++) {
      const RowSpan& sp = pl.spans[i];
      float *dk = dkr + sp.start * KD, *dvv = dv + sp.start * KD;
      if (sp.prefix >= 0) {
        const int64_t n = (units[i].q0 + sp.len) * KD;
        std::fill(dkcat_.begin() + off, dkcat_.begin() + off + n, 0.0f);
        std::fill(dvcat_.begin() + off, dvcat_.begin() + off + n, 0.0f);
        dk = dkcat_.data() + off;
        dvv = dvcat_.data() + off;
        off += n;
      }
      att.push_back({units[i], d_atty_.data() + sp.start * QD, dqr + sp.start * QD, dk, dvv});
    }
    attention_backward(*tp_, att, attn_shape());
    off = 0;
    for (const RowSpan& sp : pl.spans) {
      if (sp.prefix < 0) continue;
      const RowSpan& pre = pl.spans[size_t(sp.prefix)];
      const float *gk = dkcat_.data() + off, *gv = dvcat_.data() + off;
      for (int64_t i = 0; i < pre.len * KD; i++) {
        dkr[pre.start * KD + i] += gk[i];
        dv[pre.start * KD + i] += gv[i];
      }
      std::memcpy(dkr + sp.start * KD, gk + pre.len * KD, sizeof(float) * size_t(sp.len * KD));
      std::memcpy(dv + sp.start * KD, gv + pre.len * KD, sizeof(float) * size_t(sp.len * KD));
      off += (pre.len + sp.len) * KD;
    }
  }

  // Back from d_ln_ (dLoss/d(final-norm output), left by forward's fused LM-head backward) through the layers.
  // Accumulates into the gradient allocation.
  void backward(const RowPlan& pl) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, D = cfg_.head_dim;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t L = cfg_.num_hidden_layers, T = pl.rows();
    const int32_t* pos = pl.pos.data();
    grow(d_res_, T * C); grow(d_ln_, T * C); grow(d_atty_, T * QD); grow(d_q_, T * QD); grow(d_k_, T * KD); grow(d_v_, T * KD);
    grow(d_gate_, T * I); grow(d_up_, T * I); grow(d_h_, T * I); grow(d_qn_, T * QD); grow(d_kn_, T * KD);
    float *dres = d_res_.data(), *dln = d_ln_.data();
    std::fill(dres, dres + T * C, 0.0f);
    rmsnorm_backward(*tp_, dres, G(normf_), dln, act_res_final_, W(normf_), act_rstdf_, T, C);
    for (int64_t l = L - 1; l >= 0; l--) {
      const LayerParams& p = layers_[size_t(l)];
      LayerActs& a = la_[size_t(l)];
      // res_out = resmid + down(h): dresmid = dres ; dh = dres @ Wd
      swiglu_forward(*tp_, h_.data(), a.gate, a.up, T * I);  // h again (not kept: activation memory)
      linear_backward(d_h_.data(), false, G(p.wd), nullptr, dres, h_.data(), W(p.wd), T, I, C);
      swiglu_backward(*tp_, d_gate_.data(), d_up_.data(), d_h_.data(), a.gate, a.up, T * I);
      linear_backward(dln, false, G(p.wg), nullptr, d_gate_.data(), a.ln2, W(p.wg), T, C, I);
      linear_backward(dln, true, G(p.wu), nullptr, d_up_.data(), a.ln2, W(p.wu), T, C, I);
      rmsnorm_backward(*tp_, dres, G(p.ln2), dln, a.resmid, W(p.ln2), a.rstd2, T, C);
      // resmid = res_in + o(atty): dres_in = dresmid ; datty = dresmid @ Wo
      linear_backward(d_atty_.data(), false, G(p.wo), G(p.bo), dres, a.atty, W(p.wo), T, QD, C);
      // attention backward per (span, kv head): the group's q heads share dK, dV
      std::fill(d_qn_.begin(), d_qn_.begin() + T * QD, 0.0f);
      std::fill(d_kn_.begin(), d_kn_.begin() + T * KD, 0.0f);
      std::fill(d_v_.begin(), d_v_.begin() + T * KD, 0.0f);
      float *dqr = d_qn_.data(), *dkr = d_kn_.data(), *dv = d_v_.data();
      attention_backward_rows(pl, a, dqr, dkr, dv);
      // RoPE^T, then the per-head RMSNorm backward to the projection outputs
      rope_backward(*tp_, dqr, pos, rope_, T, Hq, D);
      rope_backward(*tp_, dkr, pos, rope_, T, Hkv, D);
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
    // embedding: dE[ids[r]] += dres[r] (serial: ids repeat)
    float* dE = G(emb_);
    for (int64_t t = 0; t < T; t++) {
      float* row = dE + int64_t(pl.ids[size_t(t)]) * C;
      const float* d = dres + t * C;
      for (int64_t c = 0; c < C; c++) row[c] += d[c];
    }
  }

  // ---------------------------------------------------------------- GRPO++ loss over the batch

  TrainStats accumulate_gradients(const TrainBatch& b, const TrainHyper& hp) {
    validate_train(b, hp, cfg_.vocab_size, cfg_.max_position_embeddings);
    if (with_grads_) g_.assign(size_t(n_params_), 0.0f);  // allocated on first use
    const bool pp = hp.mode == LossMode::GrpoPlusPlus;
    const double clip_high = pp ? hp.clip_high : hp.clip_low;  // GRPO: symmetric clip
    const std::vector<double> norms = sequence_loss_norms(b, hp);
    TrainStats st;
    st.tokens = b.n_tokens;
    double loss = 0, ratio_sum = 0;
    int64_t masked = 0, clipped = 0;
    for_row_plans(b, hp.micro_batch_tokens, opts_.min_shared_prefix, [&](const RowPlan& pl) {
      auto seq_of = [&](int64_t t) { return int64_t(std::upper_bound(b.offsets + pl.s0, b.offsets + pl.s1 + 1, int32_t(t)) - b.offsets) - 1; };
      std::vector<int64_t> head_rows;  // rows predicting a trained token: the LM head runs on these only
      for (int64_t r = 0; r < pl.rows(); r++)
        for (int64_t k = pl.row_tok_off[size_t(r)]; k < pl.row_tok_off[size_t(r + 1)]; k++) {
          const int64_t t = pl.row_tok[size_t(k)];
          if (b.mask[t] != 0 && norms[size_t(seq_of(t))] != 0) {
            head_rows.push_back(r);
            break;
          }
        }
      const TokenGrad token_grad = [&](int64_t t, float logp) -> float {
        const int64_t s = seq_of(t);
        const double norm = norms[size_t(s)], m = b.mask[t];
        if (norm == 0 || m == 0) return 0.0f;  // (the first token of a sequence has no prediction: never asked)
        if (b.logprobs_out) b.logprobs_out[t] = logp;
        const double lp = logp;
        const double old = b.old_logprobs ? double(b.old_logprobs[t]) : lp;
        const TokenLoss tl = grpo_token_loss(lp, old, b.advantages[s], hp.clip_low, clip_high);
        loss += m * tl.loss / norm;
        masked++;
        clipped += tl.clipped;
        ratio_sum += tl.ratio;
        return float(m * tl.dlogp / norm);
      };
      st.rows += pl.rows();
      forward(pl, &token_grad, &head_rows);
      if (with_grads_) backward(pl);
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
    // the prompt's prefill once (or a recent one's copy), into the sequence that may grow longest; the others copy its cache
    DecodeSeq& first = *std::max_element(fresh.begin(), fresh.end(), [](auto& a, auto& b) { return a.max_t < b.max_t; });
    if (!cached_prefill(first, prompt, n_prompt)) {
      prefill(first, prompt, n_prompt);
      remember_prefill(first, prompt, n_prompt);
    }
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

  // s (empty) takes a remembered prefill of exactly this prompt; false when there is none.
  bool cached_prefill(DecodeSeq& s, const int32_t* prompt, int64_t n) {
    const int64_t KD = cfg_.kv_dim();
    for (auto it = prompts_.entries.begin(); it != prompts_.entries.end(); ++it) {
      if (int64_t(it->prompt.size()) != n || !std::equal(it->prompt.begin(), it->prompt.end(), prompt)) continue;
      reserve(s, n);
      for (int64_t l = 0; l < cfg_.num_hidden_layers; l++) {
        std::memcpy(kcache(s, l), it->kv.data() + 2 * l * n * KD, sizeof(float) * size_t(n * KD));
        std::memcpy(vcache(s, l), it->kv.data() + (2 * l + 1) * n * KD, sizeof(float) * size_t(n * KD));
      }
      s.logits = it->logits;
      s.len = n;
      prompts_.entries.splice(prompts_.entries.begin(), prompts_.entries, it);  // most recently used first
      return true;
    }
    return false;
  }

  // Keeps a copy of s's prefill of prompt (its first n cache rows) within opts_.prompt_cache_bytes, oldest dropped.
  void remember_prefill(DecodeSeq& s, const int32_t* prompt, int64_t n) {
    const int64_t KD = cfg_.kv_dim(), L = cfg_.num_hidden_layers;
    const size_t bytes = sizeof(float) * size_t(2 * L * n * KD + cfg_.vocab_size) + sizeof(int32_t) * size_t(n);
    if (bytes > size_t(std::max<int64_t>(0, opts_.prompt_cache_bytes))) return;
    PromptCache::Entry e;
    e.prompt.assign(prompt, prompt + n);
    e.kv.resize(size_t(2 * L * n * KD));
    for (int64_t l = 0; l < L; l++) {
      std::memcpy(e.kv.data() + 2 * l * n * KD, kcache(s, l), sizeof(float) * size_t(n * KD));
      std::memcpy(e.kv.data() + (2 * l + 1) * n * KD, vcache(s, l), sizeof(float) * size_t(n * KD));
    }
    e.logits = s.logits;
    prompts_.entries.push_front(std::move(e));
    prompts_.bytes += bytes;
    while (prompts_.bytes > size_t(opts_.prompt_cache_bytes)) {
      const PromptCache::Entry& old = prompts_.entries.back();
      prompts_.bytes -= sizeof(float) * (old.kv.size() + old.logits.size()) + sizeof(int32_t) * old.prompt.size();
      prompts_.entries.pop_back();
    }
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
  std::vector<float> w_, g_, m_, v_;  // parameters, gradients, Adam moments: one allocation each (g, m, v on first use)
  std::string src_dir_, moments_from_;  // moments_from_: the loaded checkpoint's optimizer.bin, "" for none
  bool with_grads_ = true;
  // activations of the current micro-batch
  std::vector<float> acts_;
  std::vector<LayerActs> la_;
  float *act_res_final_ = nullptr, *act_lnf_ = nullptr, *act_rstdf_ = nullptr, *act_lse_ = nullptr, *act_logp_ = nullptr;
  // backward scratch
  std::vector<float> d_res_, d_ln_, d_atty_, d_q_, d_k_, d_v_, d_qn_, d_kn_, d_gate_, d_up_, d_h_, scratch_a_, scratch_t_, logits_, dlogp_;
  std::vector<float> kcat_, vcat_, dkcat_, dvcat_;  // keys/values of spans after a shared prefix, and their gradients
  std::vector<float> h_;  // (T,I) silu(gate)·up of the layer at hand
  std::vector<float> lnf_sel_, dln_sel_;  // training: the final-norm rows the LM head runs on, and their gradients
  // batched decoding
  Decoder decoder_;
  PromptCache prompts_;
  int64_t next_seq_id_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const std::string& dir, const EngineOptions& opts) {
  return std::make_unique<CpuEngine>(dir, opts);
}

}  // namespace gl
