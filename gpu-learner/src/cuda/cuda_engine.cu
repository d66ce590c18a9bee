// CUDA backend of the Qwen3 policy: bf16 weights and matmul operands, fp32 master weights, gradients
// and AdamW state, fp32 residual stream. Same maths and call order as cpu_engine.cpp (the reference);
// differences are rounding only (bf16 operands, fp32 accumulation on the GPU).
// Memory: parameters, gradients, Adam moments one allocation each; activations planned per micro-batch
// in one arena. Activation checkpointing per layer: the forward keeps only each layer's input (fp32
// residual, T·C floats per layer); backward recomputes one layer's activations, then back-propagates it.
// LM head in row chunks so the (T,V) logits never exist at once (the CPU engine runs the head's backward inside its
// forward, while a chunk's logits exist; here the backward recomputes them, as it recomputes each layer). Notation as
// cpu_engine.cpp.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "check.cuh"
#include "cublas_check.cuh"
#include "cuda_engine.h"
#include "gl/engine.h"
#include "gl/layout.h"
#include "kernels.cuh"

namespace gl {

namespace {

using cuda::bf16;

std::atomic<size_t> g_current{0}, g_peak{0};

// Owning device buffer; counts bytes for cuda_memory_stats().
class DevMem {
 public:
  DevMem() = default;
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() { release(); }
  void* alloc(size_t bytes, const char* what) {
    release();
    if (bytes == 0) return nullptr;
    cudaError_t e = cudaMalloc(&p_, bytes);
    if (e != cudaSuccess) {
      p_ = nullptr;
      throw std::runtime_error(std::string("CUDA out of memory allocating ") + std::to_string(bytes >> 20) + " MiB for " + what +
                               " (" + cudaGetErrorString(e) + ") — lower microBatchTokens / the sequence length, or use a larger GPU");
    }
    bytes_ = bytes;
    cuda::name_device_range(p_, bytes, what);
    const size_t cur = g_current += bytes;
    size_t pk = g_peak.load();
    while (cur > pk && !g_peak.compare_exchange_weak(pk, cur)) {
    }
    return p_;
  }
  void release() {
    if (p_) {
      cudaFree(p_);
      g_current -= bytes_;
    }
    p_ = nullptr;
    bytes_ = 0;
  }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Stream and cuBLAS handle owned by the engine, released even when the constructor throws after creating them.
struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() = default;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() {
    if (s) cudaStreamDestroy(s);
  }
  operator cudaStream_t() const { return s; }
};
struct OwnedBlas {
  cublasHandle_t h = nullptr;
  OwnedBlas() = default;
  OwnedBlas(const OwnedBlas&) = delete;
  OwnedBlas& operator=(const OwnedBlas&) = delete;
  ~OwnedBlas() {
    if (h) cublasDestroy(h);
  }
  operator cublasHandle_t() const { return h; }
};

class CudaEngine final : public Engine {
 public:
  CudaEngine(const std::string& dir, const EngineOptions& opts) : CudaEngine(load_config(dir), dir, opts) {}
  CudaEngine(const QwenConfig& cfg, const std::string& dir, const EngineOptions& opts)
      : cfg_(cfg), opts_(opts), layout_(cfg), layers_(layout_.layers), n_params_(layout_.size()), emb_(layout_.embed),
        normf_(layout_.final_norm), head_(layout_.head) {
    if (cfg_.head_dim % 2 || cfg_.head_dim > 256)
      throw std::invalid_argument(dir + "/config.json: head_dim=" + std::to_string(cfg_.head_dim) + " unsupported by the CUDA backend (even, <= 256)");
    cudaCheck(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
    cublasCheck(cublasCreate(&blas_.h));
    cublasCheck(cublasSetStream(blas_, stream_));
    w32_.alloc(size_t(n_params_) * 4, "fp32 master weights");
    w16_.alloc(size_t(n_params_) * sizeof(bf16), "bf16 weights");
    g32_.alloc(size_t(n_params_) * 4, "gradients");
    m_.alloc(size_t(n_params_) * 4, "AdamW m");
    v_.alloc(size_t(n_params_) * 4, "AdamW v");
    red_.alloc(sizeof(double) * size_t(cuda::sumsq_blocks() + 8), "reductions");
    rope_tables();
    if (dir.empty()) {  // shape only (make_cuda_engine_for_shape): zero weights, no checkpoint
      for (DevMem* m : {&w32_, &w16_, &g32_, &m_, &v_}) cudaCheck(cudaMemsetAsync(m->as<char>(), 0, m->bytes(), stream_));
      cudaCheck(cudaStreamSynchronize(stream_));
    } else {
      load(dir);
    }
  }

  const QwenConfig& config() const override { return cfg_; }
  int64_t step() const override { return step_; }
  std::string device() const override { return "cuda"; }
  const std::vector<ParamInfo>& params() const override { return layout_.params(); }

  void load(const std::string& dir) override {
    CheckpointState s = read_checkpoint(dir, cfg_, layout_);
    upload(w32_.as<float>(), s.w.data(), n_params_);
    cuda::to_bf16(w16_.as<bf16>(), w32_.as<float>(), n_params_, stream_);
    upload(m_.as<float>(), s.m.data(), n_params_);
    upload(v_.as<float>(), s.v.data(), n_params_);
    cudaCheck(cudaMemsetAsync(g32_.as<float>(), 0, size_t(n_params_) * 4, stream_));
    cudaCheck(cudaStreamSynchronize(stream_));
    cfg_.raw_json = s.cfg.raw_json;
    step_ = s.step;
    src_dir_ = dir;
  }

  void save(const std::string& dir) override {
    std::vector<float> w = download(w32_.as<float>(), n_params_), m = download(m_.as<float>(), n_params_), v = download(v_.as<float>(), n_params_);
    save_checkpoint(dir, layout_, cfg_, w.data(), m, v, step_, src_dir_);
  }

  std::vector<float> get_tensor(const std::string& name, bool grad) const override {
    const ParamInfo& p = layout_.find(name);
    return download((grad ? g32_ : w32_).as<float>() + p.offset, p.numel);
  }

  void set_tensor(const std::string& name, const float* data, int64_t n) override {
    const ParamInfo& p = layout_.find(name);
    check_tensor_size(p, n);
    upload(w32_.as<float>() + p.offset, data, n);
    cuda::to_bf16(w16_.as<bf16>() + p.offset, w32_.as<float>() + p.offset, n, stream_);
    cudaCheck(cudaStreamSynchronize(stream_));
  }

  // ---------------------------------------------------------------- log-probs

  void logprobs(const PackedBatch& b, float* out) override {
    validate_packed(b, cfg_.vocab_size, cfg_.max_position_embeddings);
    for_micro_batches(b, 4096, [&](int64_t s0, int64_t s1) {
      const int64_t a = b.offsets[s0], T = b.offsets[s1] - a;
      if (T == 0) return;  // only empty sequences: no log-probs to compute
      upload_batch(b.ids + a, b.offsets + s0, s1 - s0, T);
      forward(T);
      cudaCheck(cudaMemcpyAsync(out + a, logp_, sizeof(float) * size_t(T), cudaMemcpyDeviceToHost, stream_));
      cudaCheck(cudaStreamSynchronize(stream_));
    });
  }

  // ---------------------------------------------------------------- training

  TrainStats train_step(const TrainBatch& b, const TrainHyper& hp) override {
    const auto t0 = std::chrono::steady_clock::now();
    TrainStats st = accumulate_gradients(b, hp);
    double* norm_d = red_.as<double>();
    cuda::sumsq(norm_d, norm_d + 8, g32_.as<float>(), n_params_, stream_);
    double ss = 0;
    cudaCheck(cudaMemcpyAsync(&ss, norm_d, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    cudaCheck(cudaStreamSynchronize(stream_));
    finish_train_step(st, ss, hp, &step_, [&](const AdamStep& a) {
      cuda::adamw(w32_.as<float>(), w16_.as<bf16>(), m_.as<float>(), v_.as<float>(), g32_.as<float>(), n_params_, a, stream_);
      cudaCheck(cudaStreamSynchronize(stream_));
    });
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
      kcache_.alloc(size_t(L * max_t * KD) * sizeof(bf16), "KV cache (K)");
      vcache_.alloc(size_t(L * max_t * KD) * sizeof(bf16), "KV cache (V)");
      cache_len_ = max_t;
    };
    auto feed = [&](const int32_t* toks, int64_t n, int64_t pos0, float* logits) { forward_infer(toks, n, pos0, logits); };
    GenerateResult r = decode_tokens(cfg_, prompt, n_prompt, o, reserve, feed);
    kcache_.release();
    vcache_.release();
    return r;
  }

 private:
  // ---------------------------------------------------------------- parameters

  const bf16* W(int64_t off) const { return off < 0 ? nullptr : w16_.as<bf16>() + off; }
  float* G(int64_t off) const { return off < 0 ? nullptr : g32_.as<float>() + off; }

  // cos/sin (P, D/2) of the host table every backend shares (gl/layout.h RopeTable).
  void rope_tables() {
    RopeTable t(cfg_);
    t.ensure(cfg_.max_position_embeddings);
    const int64_t n = cfg_.max_position_embeddings * (cfg_.head_dim / 2);
    cos_.alloc(size_t(n) * 4, "RoPE cos table");
    sin_.alloc(size_t(n) * 4, "RoPE sin table");
    upload(cos_.as<float>(), t.cos.data(), n);
    upload(sin_.as<float>(), t.sin.data(), n);
  }

  // ---------------------------------------------------------------- host <-> device

  void upload(float* dst, const float* src, int64_t n) {
    cudaCheck(cudaMemcpyAsync(dst, src, sizeof(float) * size_t(n), cudaMemcpyHostToDevice, stream_));
    cudaCheck(cudaStreamSynchronize(stream_));
  }
  std::vector<float> download(const float* src, int64_t n) const {
    std::vector<float> h(static_cast<size_t>(n));
    cudaCheck(cudaMemcpyAsync(h.data(), src, sizeof(float) * size_t(n), cudaMemcpyDeviceToHost, stream_));
    cudaCheck(cudaStreamSynchronize(stream_));
    return h;
  }

  // ---------------------------------------------------------------- activation plan (one arena)

  int64_t head_chunk(int64_t T) const {
    const int64_t budget = opts_.logits_budget > 0 ? opts_.logits_budget : int64_t(1) << 27;
    return std::max<int64_t>(1, std::min<int64_t>(T, budget / cfg_.vocab_size));
  }

  // Plans every activation buffer for a micro-batch of up to T ≥ 1 tokens in up to S sequences (offsets need
  // S + 1 entries; empty sequences make S exceed T); grows the arena when either grows.
  void plan(int64_t T, int64_t S) {
    if (T <= cap_tokens_ && S <= cap_seqs_) return;
    T = std::max(T, cap_tokens_);
    S = std::max(S, cap_seqs_);
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, QD = cfg_.q_dim(), KD = cfg_.kv_dim(), V = cfg_.vocab_size;
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, L = cfg_.num_hidden_layers, ch = head_chunk(T);
    arena_.release();
    for (int pass = 0; pass < 2; pass++) {
      char* base = pass ? arena_.as<char>() : nullptr;
      size_t off = 0;
      auto take = [&](int64_t n, size_t elem, const char* name) -> void* {
        void* r = base ? base + off : nullptr;
        const size_t bytes = size_t(n) * elem;
        cuda::name_device_range(r, bytes, name);
        off += ((bytes + 255) & ~size_t(255)) + cuda::kArenaGuard;
        return r;
      };
      auto f32 = [&](float*& p, int64_t n, const char* name) { p = static_cast<float*>(take(n, sizeof(float), name)); };
      auto b16 = [&](bf16*& p, int64_t n, const char* name) { p = static_cast<bf16*>(take(n, sizeof(bf16), name)); };
      auto i32 = [&](int32_t*& p, int64_t n, const char* name) { p = static_cast<int32_t*>(take(n, sizeof(int32_t), name)); };
      res_.assign(size_t(L + 1), nullptr);
      for (int64_t l = 0; l <= L; l++) f32(res_[size_t(l)], T * C, "res (layer input / final residual)");  // checkpoints
      i32(ids_, T, "ids"); i32(pos_, T, "pos"); i32(offs_, S + 1, "offs");
      b16(lnf_, T * C, "lnf"); f32(rstdf_, T, "rstdf"); f32(lse_head_, T, "lse_head"); f32(logp_, T, "logp"); f32(dlogp_, T, "dlogp");
      f32(coef_, T, "coef"); f32(adv_, T, "adv"); f32(old_, T, "old");
      b16(ln1_, T * C, "ln1"); f32(rstd1_, T, "rstd1"); f32(q32_, T * QD, "q32"); f32(k32_, T * KD, "k32"); f32(v32_, T * KD, "v32");
      b16(qr_, T * QD, "qr"); b16(kr_, T * KD, "kr"); b16(v16_, T * KD, "v16"); f32(qrstd_, T * Hq, "qrstd"); f32(krstd_, T * Hkv, "krstd");
      b16(atty_, T * QD, "atty"); f32(attlse_, T * Hq, "attlse"); f32(resmid_, T * C, "resmid"); b16(ln2_, T * C, "ln2"); f32(rstd2_, T, "rstd2");
      f32(gate_, T * I, "gate"); f32(up_, T * I, "up"); b16(h_, T * I, "h");
      f32(dres_, T * C, "dres"); b16(dres16_, T * C, "dres16"); f32(dln_, T * C, "dln"); f32(dh_, T * I, "dh"); b16(dg16_, T * I, "dg16");
      b16(du16_, T * I, "du16");
      b16(datty16_, T * QD, "datty16"); f32(dq32_, T * QD, "dq32"); f32(dk32_, T * KD, "dk32"); f32(dv32_, T * KD, "dv32");
      b16(dq16_, T * QD, "dq16"); b16(dk16_, T * KD, "dk16"); b16(dv16_, T * KD, "dv16"); f32(delta_, T * Hq, "delta");
      f32(logits_, ch * V, "logits"); b16(dlogits_, ch * V, "dlogits");
      if (!pass) arena_.alloc(off, "activations");
    }
    cap_tokens_ = T;
    cap_seqs_ = S;
  }

  // ---------------------------------------------------------------- GEMMs (cuBLAS, bf16 in, fp32 accumulate and out)
  // cuBLAS is column-major: a row-major (R,K) matrix is a column-major (K,R) one, so each row-major
  // product below is issued as its transpose.

  void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const bf16* A, int64_t lda, const bf16* B, int64_t ldb,
            float* Cm, int64_t ldc, float beta) {
    const float alpha = 1.0f;
    cublasCheck(cublasGemmEx(blas_, ta, tb, int(m), int(n), int(k), &alpha, A, CUDA_R_16BF, int(lda), B, CUDA_R_16BF, int(ldb), &beta, Cm,
                             CUDA_R_32F, int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // out (N,OC) = beta·out + x (N,IC) @ W^T, W (OC,IC)
  void linear_fwd(float* out, const bf16* x, const bf16* Wt, int64_t N, int64_t IC, int64_t OC, float beta = 0) {
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, Wt, IC, x, IC, out, OC, beta);
  }
  // dx (N,IC) = beta·dx + dy (N,OC) @ W
  void linear_dx(float* dx, const bf16* dy, const bf16* Wt, int64_t N, int64_t IC, int64_t OC, float beta) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, Wt, IC, dy, OC, dx, IC, beta);
  }
  // dW (OC,IC) += dy^T (OC,N) @ x (N,IC)
  void linear_dw(float* dW, const bf16* dy, const bf16* x, int64_t N, int64_t IC, int64_t OC) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, x, IC, dy, OC, dW, IC, 1.0f);
  }

  // ---------------------------------------------------------------- forward

  void upload_batch(const int32_t* ids, const int32_t* offs, int64_t n_seqs, int64_t T) {
    plan(T, n_seqs);
    std::vector<int32_t> pos(static_cast<size_t>(T)), rel(size_t(n_seqs + 1));
    max_len_ = 0;
    for (int64_t s = 0; s <= n_seqs; s++) rel[size_t(s)] = offs[s] - offs[0];
    for (int64_t s = 0; s < n_seqs; s++) {
      const int32_t n = rel[size_t(s + 1)] - rel[size_t(s)];
      max_len_ = std::max<int64_t>(max_len_, n);
      for (int32_t i = 0; i < n; i++) pos[size_t(rel[size_t(s)] + i)] = i;
    }
    n_seqs_ = n_seqs;
    cudaCheck(cudaMemcpyAsync(ids_, ids, sizeof(int32_t) * size_t(T), cudaMemcpyHostToDevice, stream_));
    cudaCheck(cudaMemcpyAsync(pos_, pos.data(), sizeof(int32_t) * size_t(T), cudaMemcpyHostToDevice, stream_));
    cudaCheck(cudaMemcpyAsync(offs_, rel.data(), sizeof(int32_t) * size_t(n_seqs + 1), cudaMemcpyHostToDevice, stream_));
    cudaCheck(cudaStreamSynchronize(stream_));  // the host vectors die here
  }

  cuda::AttnShape attn_shape(const int32_t* q_offs, const int32_t* k_offs, int64_t n_seqs, int64_t max_q, int64_t q_pos0) const {
    cuda::AttnShape a;
    a.q_offs = q_offs; a.k_offs = k_offs; a.n_seqs = int(n_seqs); a.max_q_len = int(max_q); a.q_pos0 = int(q_pos0);
    a.Hq = int(cfg_.num_attention_heads); a.Hkv = int(cfg_.num_key_value_heads); a.D = int(cfg_.head_dim);
    a.q_stride = cfg_.q_dim(); a.kv_stride = cfg_.kv_dim();
    a.scale = float(1.0 / std::sqrt(double(cfg_.head_dim)));
    return a;
  }

  // One decoder layer: res_[l] (T,C) → res_[l+1]. Leaves its activations in the layer scratch for backward.
  // With a KV cache (generation): new K/V rows go to the cache at pos0.., attention reads the whole cache.
  void layer_forward(int64_t l, int64_t T, const float* x, float* out, int64_t pos0 = -1) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, D = cfg_.head_dim, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads;
    const LayerParams& p = layers_[size_t(l)];
    cudaStream_t s = stream_;
    cuda::rmsnorm_forward(ln1_, rstd1_, x, W(p.ln1), T, C, cfg_.rms_norm_eps, s);
    linear_fwd(q32_, ln1_, W(p.wq), T, C, QD);
    linear_fwd(k32_, ln1_, W(p.wk), T, C, KD);
    linear_fwd(v32_, ln1_, W(p.wv), T, C, KD);
    if (p.bq >= 0) {
      cuda::add_bias(q32_, W(p.bq), T, QD, s);
      cuda::add_bias(k32_, W(p.bk), T, KD, s);
      cuda::add_bias(v32_, W(p.bv), T, KD, s);
    }
    // per-head RMSNorm over D then RoPE, rounded to bf16 for attention
    cuda::qknorm_rope_forward(qr_, qrstd_, q32_, W(p.qn), cos_.as<float>(), sin_.as<float>(), pos_, T, Hq, D, cfg_.rms_norm_eps, s);
    cuda::qknorm_rope_forward(kr_, krstd_, k32_, W(p.kn), cos_.as<float>(), sin_.as<float>(), pos_, T, Hkv, D, cfg_.rms_norm_eps, s);
    cuda::to_bf16(v16_, v32_, T * KD, s);
    if (pos0 < 0) {
      cuda::attention_forward(atty_, attlse_, qr_, kr_, v16_, attn_shape(offs_, offs_, n_seqs_, max_len_, 0), s);
    } else {
      bf16* kc = kcache_.as<bf16>() + l * cache_len_ * KD;
      bf16* vc = vcache_.as<bf16>() + l * cache_len_ * KD;
      cudaCheck(cudaMemcpyAsync(kc + pos0 * KD, kr_, sizeof(bf16) * size_t(T * KD), cudaMemcpyDeviceToDevice, s));
      cudaCheck(cudaMemcpyAsync(vc + pos0 * KD, v16_, sizeof(bf16) * size_t(T * KD), cudaMemcpyDeviceToDevice, s));
      cuda::attention_forward(atty_, attlse_, qr_, kc, vc, attn_shape(gen_offs_, gen_offs_ + 2, 1, T, pos0), s);
    }
    // resmid = x + atty @ Wo^T (+ bo)
    cudaCheck(cudaMemcpyAsync(resmid_, x, sizeof(float) * size_t(T * C), cudaMemcpyDeviceToDevice, s));
    linear_fwd(resmid_, atty_, W(p.wo), T, QD, C, 1.0f);
    if (p.bo >= 0) cuda::add_bias(resmid_, W(p.bo), T, C, s);
    cuda::rmsnorm_forward(ln2_, rstd2_, resmid_, W(p.ln2), T, C, cfg_.rms_norm_eps, s);
    linear_fwd(gate_, ln2_, W(p.wg), T, C, I);
    linear_fwd(up_, ln2_, W(p.wu), T, C, I);
    cuda::swiglu_forward(h_, gate_, up_, T * I, s);
    // out = resmid + h @ Wd^T
    cudaCheck(cudaMemcpyAsync(out, resmid_, sizeof(float) * size_t(T * C), cudaMemcpyDeviceToDevice, s));
    linear_fwd(out, h_, W(p.wd), T, I, C, 1.0f);
  }

  // Whole-model forward of the uploaded micro-batch: checkpoints res_[0..L], lnf_, lse_head_, logp_.
  void forward(int64_t T) {
    const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size, L = cfg_.num_hidden_layers;
    cuda::embedding_forward(res_[0], ids_, W(emb_), T, C, stream_);
    for (int64_t l = 0; l < L; l++) layer_forward(l, T, res_[size_t(l)], res_[size_t(l + 1)]);
    cuda::rmsnorm_forward(lnf_, rstdf_, res_[size_t(L)], W(normf_), T, C, cfg_.rms_norm_eps, stream_);
    cudaCheck(cudaMemsetAsync(logp_, 0, sizeof(float) * size_t(T), stream_));
    const int64_t ch = head_chunk(T);
    for (int64_t r0 = 0; r0 < T; r0 += ch) {
      const int64_t rn = std::min(ch, T - r0);
      linear_fwd(logits_, lnf_ + r0 * C, W(head_), rn, C, V);
      cuda::lmhead_logprobs(lse_head_, logp_, logits_, ids_, pos_, r0, rn, T, V, stream_);
    }
  }

  // ---------------------------------------------------------------- backward

  // Back-propagates dlogp_ through the model; accumulates into g32_.
  void backward(int64_t T) {
    const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size, L = cfg_.num_hidden_layers;
    cudaStream_t s = stream_;
    const int64_t ch = head_chunk(T);
    for (int64_t r0 = 0; r0 < T; r0 += ch) {  // LM head: logits recomputed chunk by chunk, never all at once
      const int64_t rn = std::min(ch, T - r0);
      linear_fwd(logits_, lnf_ + r0 * C, W(head_), rn, C, V);
      cuda::lmhead_dlogits(dlogits_, logits_, lse_head_, dlogp_, ids_, pos_, r0, rn, T, V, s);
      linear_dx(dln_ + r0 * C, dlogits_, W(head_), rn, C, V, 0.0f);
      linear_dw(G(head_), dlogits_, lnf_ + r0 * C, rn, C, V);
    }
    cudaCheck(cudaMemsetAsync(dres_, 0, sizeof(float) * size_t(T * C), s));
    cuda::rmsnorm_backward(dres_, G(normf_), dln_, res_[size_t(L)], W(normf_), rstdf_, T, C, s);
    for (int64_t l = L - 1; l >= 0; l--) {
      // Recompute (activation checkpointing; rewrites the same output), except the last layer: forward(T), which
      // always runs just before, left its activations in the layer scratch.
      if (l != L - 1) layer_forward(l, T, res_[size_t(l)], res_[size_t(l + 1)]);
      layer_backward(l, T);
    }
    cuda::embedding_backward(G(emb_), ids_, dres_, T, C, s);
  }

  // dres_ (T,C): gradient w.r.t. the layer's output on entry, w.r.t. its input on exit.
  void layer_backward(int64_t l, int64_t T) {
    const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, D = cfg_.head_dim, QD = cfg_.q_dim(), KD = cfg_.kv_dim();
    const int64_t Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads;
    const LayerParams& p = layers_[size_t(l)];
    cudaStream_t s = stream_;
    // out = resmid + down(h): dresmid = dres ; dh = dres @ Wd ; dWd += dres^T h
    cuda::to_bf16(dres16_, dres_, T * C, s);
    linear_dx(dh_, dres16_, W(p.wd), T, I, C, 0.0f);
    linear_dw(G(p.wd), dres16_, h_, T, I, C);
    cuda::swiglu_backward(dg16_, du16_, dh_, gate_, up_, T * I, s);
    linear_dx(dln_, dg16_, W(p.wg), T, C, I, 0.0f);
    linear_dx(dln_, du16_, W(p.wu), T, C, I, 1.0f);
    linear_dw(G(p.wg), dg16_, ln2_, T, C, I);
    linear_dw(G(p.wu), du16_, ln2_, T, C, I);
    cuda::rmsnorm_backward(dres_, G(p.ln2), dln_, resmid_, W(p.ln2), rstd2_, T, C, s);
    // resmid = x + o(atty): datty = dresmid @ Wo ; dWo += dresmid^T atty
    cuda::to_bf16(dres16_, dres_, T * C, s);
    linear_dx(dq32_, dres16_, W(p.wo), T, QD, C, 0.0f);  // dq32_ as fp32 scratch for datty
    cuda::to_bf16(datty16_, dq32_, T * QD, s);
    linear_dw(G(p.wo), dres16_, atty_, T, QD, C);
    if (p.bo >= 0) cuda::colsum_accumulate(G(p.bo), dres_, T, C, s);
    cuda::attention_backward(dq32_, dk32_, dv32_, delta_, datty16_, atty_, qr_, kr_, v16_, attlse_, attn_shape(offs_, offs_, n_seqs_, max_len_, 0), T, s);
    // RoPE^T then per-head RMSNorm backward, to the projection outputs
    cuda::qknorm_rope_backward(dq16_, G(p.qn), dq32_, q32_, W(p.qn), qrstd_, cos_.as<float>(), sin_.as<float>(), pos_, T, Hq, D, s);
    cuda::qknorm_rope_backward(dk16_, G(p.kn), dk32_, k32_, W(p.kn), krstd_, cos_.as<float>(), sin_.as<float>(), pos_, T, Hkv, D, s);
    cuda::to_bf16(dv16_, dv32_, T * KD, s);
    linear_dx(dln_, dq16_, W(p.wq), T, C, QD, 0.0f);
    linear_dx(dln_, dk16_, W(p.wk), T, C, KD, 1.0f);
    linear_dx(dln_, dv16_, W(p.wv), T, C, KD, 1.0f);
    linear_dw(G(p.wq), dq16_, ln1_, T, C, QD);
    linear_dw(G(p.wk), dk16_, ln1_, T, C, KD);
    linear_dw(G(p.wv), dv16_, ln1_, T, C, KD);
    if (p.bq >= 0) {
      cuda::colsum_accumulate(G(p.bq), dq16_, T, QD, s);
      cuda::colsum_accumulate(G(p.bk), dk16_, T, KD, s);
      cuda::colsum_accumulate(G(p.bv), dv32_, T, KD, s);
    }
    cuda::rmsnorm_backward(dres_, G(p.ln1), dln_, res_[size_t(l)], W(p.ln1), rstd1_, T, C, s);
  }

  // ---------------------------------------------------------------- GRPO++ loss over the batch

  TrainStats accumulate_gradients(const TrainBatch& b, const TrainHyper& hp) {
    validate_train(b, hp, cfg_.vocab_size, cfg_.max_position_embeddings);
    if (with_grads_) cudaCheck(cudaMemsetAsync(g32_.as<float>(), 0, size_t(n_params_) * 4, stream_));
    const bool pp = hp.mode == LossMode::GrpoPlusPlus;
    const double clip_high = pp ? hp.clip_high : hp.clip_low;  // GRPO: symmetric clip
    // Per-token coefficient mask/normaliser (0 ⇒ not trained) and advantage, as the CPU engine's loop.
    std::vector<float> coef(size_t(b.n_tokens), 0.0f), adv(size_t(b.n_tokens), 0.0f);
    const std::vector<double> norms = sequence_loss_norms(b, hp);
    for (int64_t s = 0; s < b.n_seqs; s++) {
      const int64_t t0 = b.offsets[s], t1 = b.offsets[s + 1];
      const double norm = norms[size_t(s)];
      if (norm == 0) continue;
      for (int64_t t = t0 + 1; t < t1; t++) {  // the first token of a sequence has no prediction
        coef[size_t(t)] = float(double(b.mask[t]) / norm);
        adv[size_t(t)] = b.advantages[s];
      }
    }
    double* stats = red_.as<double>();
    std::vector<float> step_logp;  // a micro-batch's log-probs on the host, for b.logprobs_out
    cudaCheck(cudaMemsetAsync(stats, 0, 4 * sizeof(double), stream_));
    for_micro_batches(b, hp.micro_batch_tokens, [&](int64_t s0, int64_t s1) {
      const int64_t a = b.offsets[s0], T = b.offsets[s1] - a;
      if (T == 0) return;  // only empty sequences: no tokens, no loss, no gradient (as the CPU engine)
      upload_batch(b.ids + a, b.offsets + s0, s1 - s0, T);
      cudaCheck(cudaMemcpyAsync(coef_, coef.data() + a, sizeof(float) * size_t(T), cudaMemcpyHostToDevice, stream_));
      cudaCheck(cudaMemcpyAsync(adv_, adv.data() + a, sizeof(float) * size_t(T), cudaMemcpyHostToDevice, stream_));
      if (b.old_logprobs) cudaCheck(cudaMemcpyAsync(old_, b.old_logprobs + a, sizeof(float) * size_t(T), cudaMemcpyHostToDevice, stream_));
      forward(T);
      if (b.logprobs_out) {
        step_logp.resize(size_t(T));
        cudaCheck(cudaMemcpyAsync(step_logp.data(), logp_, sizeof(float) * size_t(T), cudaMemcpyDeviceToHost, stream_));
      }
      cuda::grpo_token_loss(dlogp_, stats, logp_, b.old_logprobs ? old_ : nullptr, adv_, coef_, T, hp.clip_low, clip_high, stream_);
      if (with_grads_) backward(T);
      cudaCheck(cudaStreamSynchronize(stream_));  // coef/adv host vectors outlive this; sync bounds the queue
      if (b.logprobs_out)  // the trained tokens (coef != 0, as the CPU engine asks them) before the step
        for (int64_t t = 0; t < T; t++)
          if (coef[size_t(a + t)] != 0) b.logprobs_out[a + t] = step_logp[size_t(t)];
    });
    double h[4];
    cudaCheck(cudaMemcpyAsync(h, stats, sizeof h, cudaMemcpyDeviceToHost, stream_));
    cudaCheck(cudaStreamSynchronize(stream_));
    TrainStats st;
    st.tokens = b.n_tokens;
    st.rows = b.n_tokens;  // no shared prefixes on this backend
    st.loss = h[0];
    st.clip_fraction = h[3] > 0 ? h[2] / h[3] : 0.0;
    st.mean_ratio = h[3] > 0 ? h[1] / h[3] : 0.0;
    st.step = step_;
    return st;
  }

  // ---------------------------------------------------------------- incremental forward (KV cache)

  // Feeds n tokens at positions pos0.. through the model, appending K/V to the cache; logits (V) of the last one.
  void forward_infer(const int32_t* toks, int64_t n, int64_t pos0, float* logits) {
    const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size, L = cfg_.num_hidden_layers;
    plan(n, 1);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) pos[size_t(i)] = int32_t(pos0 + i);
    const int32_t go[4] = {0, int32_t(n), 0, int32_t(pos0 + n)};  // q offsets, k offsets (one sequence)
    if (!gen_offs_mem_.bytes()) gen_offs_mem_.alloc(4 * sizeof(int32_t), "generation offsets");
    gen_offs_ = gen_offs_mem_.as<int32_t>();
    cudaCheck(cudaMemcpyAsync(ids_, toks, sizeof(int32_t) * size_t(n), cudaMemcpyHostToDevice, stream_));
    cudaCheck(cudaMemcpyAsync(pos_, pos.data(), sizeof(int32_t) * size_t(n), cudaMemcpyHostToDevice, stream_));
    cudaCheck(cudaMemcpyAsync(gen_offs_, go, sizeof go, cudaMemcpyHostToDevice, stream_));
    cuda::embedding_forward(res_[0], ids_, W(emb_), n, C, stream_);
    for (int64_t l = 0; l < L; l++) layer_forward(l, n, res_[size_t(l)], res_[size_t(l + 1)], pos0);
    cuda::rmsnorm_forward(lnf_, rstdf_, res_[size_t(L)] + (n - 1) * C, W(normf_), 1, C, cfg_.rms_norm_eps, stream_);
    linear_fwd(logits_, lnf_, W(head_), 1, C, V);
    cudaCheck(cudaMemcpyAsync(logits, logits_, sizeof(float) * size_t(V), cudaMemcpyDeviceToHost, stream_));
    cudaCheck(cudaStreamSynchronize(stream_));
  }

  QwenConfig cfg_;
  EngineOptions opts_;
  OwnedStream stream_;
  OwnedBlas blas_;
  ParamLayout layout_;
  const std::vector<LayerParams>& layers_;
  const int64_t n_params_, emb_, normf_, head_;  // from layout_
  int64_t step_ = 0;
  DevMem w32_, w16_, g32_, m_, v_, red_, cos_, sin_, arena_, kcache_, vcache_, gen_offs_mem_;
  std::string src_dir_;
  bool with_grads_ = true;
  int64_t cap_tokens_ = 0, cap_seqs_ = 0, n_seqs_ = 0, max_len_ = 0, cache_len_ = 0;
  int32_t* gen_offs_ = nullptr;
  // activation arena views (see plan())
  std::vector<float*> res_;
  int32_t *ids_ = nullptr, *pos_ = nullptr, *offs_ = nullptr;
  bf16 *lnf_ = nullptr, *ln1_ = nullptr, *qr_ = nullptr, *kr_ = nullptr, *v16_ = nullptr, *atty_ = nullptr, *ln2_ = nullptr, *h_ = nullptr;
  bf16 *dres16_ = nullptr, *dg16_ = nullptr, *du16_ = nullptr, *datty16_ = nullptr, *dq16_ = nullptr, *dk16_ = nullptr, *dv16_ = nullptr,
       *dlogits_ = nullptr;
  float *rstdf_ = nullptr, *lse_head_ = nullptr, *logp_ = nullptr, *dlogp_ = nullptr, *coef_ = nullptr, *adv_ = nullptr, *old_ = nullptr;
  float *rstd1_ = nullptr, *q32_ = nullptr, *k32_ = nullptr, *v32_ = nullptr, *qrstd_ = nullptr, *krstd_ = nullptr, *attlse_ = nullptr;
  float *resmid_ = nullptr, *rstd2_ = nullptr, *gate_ = nullptr, *up_ = nullptr;
  float *dres_ = nullptr, *dln_ = nullptr, *dh_ = nullptr, *dq32_ = nullptr, *dk32_ = nullptr, *dv32_ = nullptr, *delta_ = nullptr,
        *logits_ = nullptr;
};

}  // namespace

namespace {
// A usable GPU of compute capability 8.0+ (bf16), or a clear error.
void require_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    throw std::runtime_error(std::string("CUDA requested but no GPU is visible (cudaGetDeviceCount=0)") +
                             (e != cudaSuccess ? std::string(" [") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + "]" : std::string()) +
                             "; use device 'cpu', or run on a machine with an NVIDIA GPU and driver");
  }
  int dev = 0;
  cudaCheck(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  cudaCheck(cudaGetDeviceProperties(&prop, dev));
  if (prop.major < 8)
    throw std::runtime_error(std::string("CUDA backend needs compute capability 8.0+ (bf16 tensor cores); ") + prop.name + " is " +
                             std::to_string(prop.major) + "." + std::to_string(prop.minor));
}
}  // namespace

std::unique_ptr<Engine> make_cuda_engine(const std::string& dir, const EngineOptions& opts) {
  require_gpu();
  return std::make_unique<CudaEngine>(dir, opts);
}

std::unique_ptr<Engine> make_cuda_engine_for_shape(const QwenConfig& cfg, const EngineOptions& opts) {
  require_gpu();
  return std::make_unique<CudaEngine>(cfg, std::string(), opts);
}

CudaMemoryStats cuda_memory_stats() { return {g_current.load(), g_peak.load()}; }
void cuda_reset_peak_memory() { g_peak = g_current.load(); }

}  // namespace gl
