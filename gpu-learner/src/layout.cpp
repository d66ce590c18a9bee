// Parameter layout, checkpoint I/O by tensor name, the shared decoding loop and GRPO++ normalisers.
#include "gl/layout.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <sys/stat.h>

#include "gl/safetensors.h"
#include "gl/sampling.h"

namespace gl {

ParamLayout::ParamLayout(const QwenConfig& cfg) {
  const int64_t C = cfg.hidden_size, V = cfg.vocab_size, I = cfg.intermediate_size, D = cfg.head_dim;
  const int64_t QD = cfg.q_dim(), KD = cfg.kv_dim();
  const bool bias = cfg.attention_bias;
  embed = add("model.embed_tokens.weight", {V, C});
  layers.resize(size_t(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParams& lp = layers[size_t(l)];
    lp.bq = lp.bk = lp.bv = lp.bo = -1;
    lp.ln1 = add(p + "input_layernorm.weight", {C});
    lp.wq = add(p + "self_attn.q_proj.weight", {QD, C});
    if (bias) lp.bq = add(p + "self_attn.q_proj.bias", {QD});
    lp.wk = add(p + "self_attn.k_proj.weight", {KD, C});
    if (bias) lp.bk = add(p + "self_attn.k_proj.bias", {KD});
    lp.wv = add(p + "self_attn.v_proj.weight", {KD, C});
    if (bias) lp.bv = add(p + "self_attn.v_proj.bias", {KD});
    lp.wo = add(p + "self_attn.o_proj.weight", {C, QD});
    if (bias) lp.bo = add(p + "self_attn.o_proj.bias", {C});
    lp.qn = add(p + "self_attn.q_norm.weight", {D});
    lp.kn = add(p + "self_attn.k_norm.weight", {D});
    lp.ln2 = add(p + "post_attention_layernorm.weight", {C});
    lp.wg = add(p + "mlp.gate_proj.weight", {I, C});
    lp.wu = add(p + "mlp.up_proj.weight", {I, C});
    lp.wd = add(p + "mlp.down_proj.weight", {C, I});
  }
  final_norm = add("model.norm.weight", {C});
  head = cfg.tie_word_embeddings ? embed : add("lm_head.weight", {V, C});
}

int64_t ParamLayout::add(const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  const int64_t off = size_;
  index_[name] = params_.size();
  params_.push_back({name, std::move(shape), off, n});
  size_ += n;
  return off;
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::invalid_argument("unknown parameter tensor \"" + name + "\"");
  return params_[it->second];
}

void check_same_model_shape(const QwenConfig& loaded, const QwenConfig& c, const std::string& dir) {
  if (c.vocab_size != loaded.vocab_size || c.hidden_size != loaded.hidden_size || c.num_hidden_layers != loaded.num_hidden_layers ||
      c.intermediate_size != loaded.intermediate_size || c.num_attention_heads != loaded.num_attention_heads ||
      c.num_key_value_heads != loaded.num_key_value_heads || c.head_dim != loaded.head_dim ||
      c.tie_word_embeddings != loaded.tie_word_embeddings || c.attention_bias != loaded.attention_bias)
    throw std::runtime_error(dir + "/config.json: model shape differs from the loaded model");
}

std::vector<float> read_weights(const std::string& dir, const ParamLayout& layout) {
  SafetensorsReader rd(dir);
  std::vector<float> w(static_cast<size_t>(layout.size()));
  for (auto& p : layout.params()) rd.read(p.name, p.shape, w.data() + p.offset);
  return w;
}

void check_tensor_size(const ParamInfo& p, int64_t n) {
  if (n != p.numel)
    throw std::invalid_argument("tensor \"" + p.name + "\" has " + std::to_string(p.numel) + " elements, got " + std::to_string(n));
}

void mkdir_p(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); i++) {
    if (i == dir.size() || dir[i] == '/')
      if (!cur.empty()) ::mkdir(cur.c_str(), 0755);
    if (i < dir.size()) cur += dir[i];
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw std::runtime_error(dir + ": cannot create directory");
}

void save_checkpoint(const std::string& dir, const ParamLayout& layout, const QwenConfig& cfg, const float* w,
                     const std::vector<float>& m, const std::vector<float>& v, int64_t step, const std::string& src_dir) {
  mkdir_p(dir);
  std::vector<TensorView> views;
  for (auto& p : layout.params()) views.push_back({p.name, p.shape, w + p.offset});
  write_safetensors_f32(dir + "/model.safetensors", views);
  write_optimizer_state(dir + "/optimizer.bin", step, m, v);
  atomic_write_file(dir + "/config.json", config_for_f32_weights(cfg.raw_json));
  if (src_dir != dir)
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json", "vocab.json",
                          "merges.txt"})
      if (file_exists(src_dir + "/" + f)) atomic_write_file(dir + "/" + f, read_file(src_dir + "/" + f));
}

// The k largest entries of one row's full-vocabulary log-softmax (temperature 1), appended most likely first.
static void append_top_logprobs(const float* logits, int64_t vocab, int64_t k, std::vector<int32_t>* ids, std::vector<float>* lps) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < vocab; i++) mx = std::max(mx, logits[i]);
  double se = 0;
  for (int64_t i = 0; i < vocab; i++) se += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(se);
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; i++) idx[size_t(i)] = int32_t(i);
  const int64_t kk = std::min(k, vocab);
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int64_t j = 0; j < kk; j++) {
    ids->push_back(idx[size_t(j)]);
    lps->push_back(float(double(logits[idx[size_t(j)]]) - lse));
  }
}

GenerateResult decode_tokens(const QwenConfig& cfg, const int32_t* prompt, int64_t n_prompt, const GenerateOptions& o,
                             const std::function<void(int64_t max_t)>& reserve, const FeedTokens& feed) {
  validate_generate(n_prompt, prompt, o, cfg.vocab_size);
  if (n_prompt >= cfg.max_position_embeddings)
    throw std::invalid_argument("promptIds.length=" + std::to_string(n_prompt) + " leaves no room below max_position_embeddings=" +
                                std::to_string(cfg.max_position_embeddings));
  GenerateResult r;
  if (o.max_new_tokens == 0) return r;
  const int64_t max_t = std::min(n_prompt + o.max_new_tokens, cfg.max_position_embeddings);
  reserve(max_t);
  std::vector<float> logits(size_t(cfg.vocab_size));
  feed(prompt, n_prompt, 0, logits.data());
  Rng rng(o.seed);  // the host sampler and RNG of every backend: same seed ⇒ same tokens where logits agree
  SampleParams sp{o.temperature, o.top_p, &o.allowed_ids};
  for (int64_t pos = n_prompt; pos < max_t; pos++) {
    float lp;
    const int32_t tok = sample_token(logits.data(), cfg.vocab_size, sp, rng, &lp);
    r.ids.push_back(tok);
    r.logprobs.push_back(lp);
    if (o.top_logprobs > 0) append_top_logprobs(logits.data(), cfg.vocab_size, o.top_logprobs, &r.top_ids, &r.top_logprobs);
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), tok) != o.stop_ids.end()) {
      r.stopped = true;
      break;
    }
    if (pos + 1 < max_t) feed(&tok, 1, pos, logits.data());
  }
  return r;
}

std::vector<double> sequence_loss_norms(const TrainBatch& b, const TrainHyper& hp) {
  const double n_seq = double(hp.norm_seqs > 0 ? hp.norm_seqs : b.n_seqs);
  std::vector<double> norms(size_t(b.n_seqs), 0.0);
  for (int64_t s = 0; s < b.n_seqs; s++) {
    if (hp.mode == LossMode::GrpoPlusPlus) {
      norms[size_t(s)] = n_seq * hp.l_max;  // Σ_i Σ_t m·ℓ / (N·L_max)
      continue;
    }
    double msum = 0;  // the first token of a sequence has no prediction and is never trained
    for (int64_t t = b.offsets[s] + 1; t < b.offsets[s + 1]; t++) msum += b.mask[t];
    norms[size_t(s)] = msum == 0 ? 0.0 : n_seq * msum;
  }
  return norms;
}

}  // namespace gl
