// Host-side pieces every backend shares around its device code: the parameter layout (one table of
// tensor specs planned up front from the config, llm.c style), checkpoint I/O by tensor name, the
// decoding loop around a backend's incremental forward, and the GRPO++ batch bookkeeping.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gl/config.h"
#include "gl/engine.h"
#include "gl/sampling.h"

namespace gl {

// Offsets of one decoder layer's tensors into the parameter allocation; -1 when absent (no bias, no q/k norm).
struct LayerParams {
  int64_t ln1, wq, bq, wk, bk, wv, bv, wo, bo, qn, kn, ln2, wg, wu, wd;
};

// Every parameter tensor of the model: Hugging Face name, shape and offset into the one parameter
// allocation (gradients and Adam moments use the same offsets). Order and offsets are part of the
// optimizer.bin format: embed_tokens, then per layer ln1, q, (bq), k, (bk), v, (bv), o, (bo), (q_norm,
// k_norm), ln2, gate, up, down, then norm, then lm_head unless tied.
class ParamLayout {
 public:
  explicit ParamLayout(const QwenConfig& cfg);
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t size() const { return size_; }  // total floats
  // Throws std::invalid_argument naming the tensor when it does not exist.
  const ParamInfo& find(const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }

  int64_t embed = 0, final_norm = 0, head = 0;  // head == embed when the embeddings are tied
  std::vector<LayerParams> layers;

 private:
  int64_t add(const std::string& name, std::vector<int64_t> shape);
  std::vector<ParamInfo> params_;
  std::map<std::string, size_t> index_;
  int64_t size_ = 0;
};

// Throws when dir's config describes a model of another shape than `loaded` (reload in place).
void check_same_model_shape(const QwenConfig& loaded, const QwenConfig& c, const std::string& dir);
// All weights of dir's safetensors, converted to fp32, laid out as `layout` says. Throws naming a tensor the config
// does not describe, and a tied config whose file holds a different lm_head.weight.
std::vector<float> read_weights(const std::string& dir, const ParamLayout& layout, const QwenConfig& cfg);

// What every backend's load(dir) reads: the config (same model shape as `loaded` required), the fp32 weights
// and the AdamW state of optimizer.bin (zeros and step 0 without one); moments false: its step only (m, v empty).
struct CheckpointState {
  QwenConfig cfg;
  std::vector<float> w, m, v;
  bool has_optimizer = false;
  int64_t step = 0;
};
CheckpointState read_checkpoint(const std::string& dir, const QwenConfig& loaded, const ParamLayout& layout, bool moments = true);

// The constants of one AdamW update as torch.optim.AdamW computes it, on the gradient scaled by `clip`:
//   m ← b1·m + (1−b1)·g ; v ← b2·v + (1−b2)·g² ; p ← p·decay − step_size·m / (√v·inv_sqrt_bc2 + eps)
struct AdamStep {
  float b1, b2, decay, step_size, inv_sqrt_bc2, eps, clip;
};
// The end of every backend's train_step: grad_norm = √Σg²; a non-finite norm skips the update (weights and
// Adam state untouched, st.skipped); otherwise *step advances and update(constants) applies AdamW with the
// gradient clipped to hp.max_grad_norm.
void finish_train_step(TrainStats& st, double grad_sumsq, const TrainHyper& hp, int64_t* step, const std::function<void(const AdamStep&)>& update);

// RoPE as transformers computes it: inv_freq_i = 1/θ^(2i/D) in fp32, angle = fp32(pos)·inv_freq_i, cos and sin
// in double rounded to fp32. Tables (positions, D/2), grown on demand.
struct RopeTable {
  explicit RopeTable(const QwenConfig& cfg);
  void ensure(int64_t n_pos);  // covers positions 0..n_pos−1
  std::vector<float> inv_freq, cos, sin;
  int64_t n = 0;
};
// Throws std::invalid_argument when a set_tensor call gives the wrong element count.
void check_tensor_size(const ParamInfo& p, int64_t n);
void mkdir_p(const std::string& dir);

// A checkpoint directory: model.safetensors (F32), optimizer.bin, config.json (dtype float32), and the
// tokenizer / generation files copied from src_dir so the directory stays servable.
void save_checkpoint(const std::string& dir, const ParamLayout& layout, const QwenConfig& cfg, const float* w,
                     const std::vector<float>& m, const std::vector<float>& v, int64_t step, const std::string& src_dir);

// The decoding loop of every backend: validation, the position limit, host sampling and stop ids.
// reserve(max_t) sizes the backend's KV cache; feed(toks, n, pos0, logits) runs n tokens at positions
// pos0.. through the model, appending to the cache, and writes the last token's logits (V).
// decode_tokens' checks of a prompt and its options (also the batched decoder's): validate_generate, plus room for
// at least one token below max_position_embeddings.
void validate_decode(const QwenConfig& cfg, const int32_t* prompt, int64_t n_prompt, const GenerateOptions& o);
// The token at position pos of a sequence from its next-token logits (V): sampled under o with rng, top log-probs
// when asked; finish says whether it is the last (a stop id, or pos + 1 reached max_t).
DecodeToken next_token(const QwenConfig& cfg, const float* logits, const GenerateOptions& o, Rng& rng, int64_t pos, int64_t max_t);
// The position bound of a sequence decoding under o: min(n_prompt + max_new_tokens, max_position_embeddings).
int64_t decode_limit(const QwenConfig& cfg, int64_t n_prompt, const GenerateOptions& o);
using FeedTokens = std::function<void(const int32_t* toks, int64_t n, int64_t pos0, float* logits)>;
GenerateResult decode_tokens(const QwenConfig& cfg, const int32_t* prompt, int64_t n_prompt, const GenerateOptions& o,
                             const std::function<void(int64_t max_t)>& reserve, const FeedTokens& feed);

// Appends a decoded token to a GenerateResult (stopped when it ended on a stop id).
void append_token(GenerateResult* r, const DecodeToken& t);

// Micro-batches of whole sequences [s0, s1) with at most max_tokens tokens (a longer sequence alone).
template <typename F>
void for_micro_batches(const PackedBatch& b, int64_t max_tokens, F&& fn) {
  int64_t s0 = 0;
  while (s0 < b.n_seqs) {
    int64_t s1 = s0 + 1;
    while (s1 < b.n_seqs && b.offsets[s1 + 1] - b.offsets[s0] <= max_tokens) s1++;
    fn(s0, s1);
    s0 = s1;
  }
}

// Per sequence, the divisor of its tokens' m·ℓ (0 ⇒ the sequence adds nothing):
//   GRPO++: N·L_max (DESIGN §5, a constant);  GRPO: N·Σ_t m_t (per-sequence token mean, then mean over N).
// N = hp.norm_seqs when set, else the batch's sequence count; with it, a learner may leave out sequences
// that add 0 (zero advantage, no trainable token) and keep the loss and gradient of the full batch.
std::vector<double> sequence_loss_norms(const TrainBatch& b, const TrainHyper& hp);

}  // namespace gl
