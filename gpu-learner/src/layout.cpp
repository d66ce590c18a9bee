// Parameter layout, checkpoint I/O by tensor name, the shared decoding loop and GRPO++ normalisers.
#include "gl/layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <sys/stat.h>

#include "gl/safetensors.h"
#include "gl/sampling.h"

namespace gl {

ParamLayout::ParamLayout(const QwenConfig& cfg) {
  const int64_t C = cfg.hidden_size, V = cfg.vocab_size, I = cfg.intermediate_size, D = cfg.head_dim;
  const int64_t QD = cfg.q_dim(), KD = cfg.kv_dim();
  embed = add("model.embed_tokens.weight", {V, C});
  layers.resize(size_t(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParams& lp = layers[size_t(l)];
    lp.bq = lp.bk = lp.bv = lp.bo = lp.qn = lp.kn = -1;
    lp.ln1 = add(p + "input_layernorm.weight", {C});
    lp.wq = add(p + "self_attn.q_proj.weight", {QD, C});
    if (cfg.qkv_bias) lp.bq = add(p + "self_attn.q_proj.bias", {QD});
    lp.wk = add(p + "self_attn.k_proj.weight", {KD, C});
    if (cfg.qkv_bias) lp.bk = add(p + "self_attn.k_proj.bias", {KD});
    lp.wv = add(p + "self_attn.v_proj.weight", {KD, C});
    if (cfg.qkv_bias) lp.bv = add(p + "self_attn.v_proj.bias", {KD});
    lp.wo = add(p + "self_attn.o_proj.weight", {C, QD});
    if (cfg.o_bias) lp.bo = add(p + "self_attn.o_proj.bias", {C});
    if (cfg.qk_norm) {
      lp.qn = add(p + "self_attn.q_norm.weight", {D});
      lp.kn = add(p + "self_attn.k_norm.weight", {D});
    }
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
      c.tie_word_embeddings != loaded.tie_word_embeddings || c.model_type != loaded.model_type || c.qk_norm != loaded.qk_norm ||
      c.qkv_bias != loaded.qkv_bias || c.o_bias != loaded.o_bias)
    throw std::runtime_error(dir + "/config.json: model shape differs from the loaded model");
}

std::vector<float> read_weights(const std::string& dir, const ParamLayout& layout, const QwenConfig& cfg) {
  SafetensorsReader rd(dir);
  std::vector<float> w(static_cast<size_t>(layout.size()));
  for (auto& p : layout.params()) rd.read(p.name, p.shape, w.data() + p.offset);
  // A tensor the config does not describe (a bias or norm the architecture has none of) would be silently unused.
  for (auto& [name, info] : rd.tensors()) {
    if (name == "lm_head.weight" && cfg.tie_word_embeddings) {
      const ParamInfo& e = layout.find("model.embed_tokens.weight");
      std::vector<float> head(size_t(e.numel));
      rd.read(name, e.shape, head.data());
      if (std::memcmp(head.data(), w.data() + e.offset, sizeof(float) * head.size()) != 0)
        throw std::runtime_error(dir + ": config.json has \"tie_word_embeddings\"=true but the checkpoint's \"lm_head.weight\" differs from "
                                 "\"model.embed_tokens.weight\" (an untied head: set tie_word_embeddings to false)");
      continue;
    }
    if (layout.has(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;  // inv_freq: old buffers, recomputed
    throw std::runtime_error(dir + ": tensor \"" + name + "\" is not part of a " + cfg.model_type + " model as config.json describes it" +
                             " (qk_norm " + (cfg.qk_norm ? "yes" : "no") + ", q/k/v bias " + (cfg.qkv_bias ? "yes" : "no") + ", o_proj bias " +
                             (cfg.o_bias ? "yes" : "no") + ", MLP bias no, tie_word_embeddings " + (cfg.tie_word_embeddings ? "true" : "false") +
                             "): refusing to ignore it");
  }
  return w;
}

CheckpointState read_checkpoint(const std::string& dir, const QwenConfig& loaded, const ParamLayout& layout, bool moments) {
  CheckpointState s;
  s.cfg = load_config(dir);
  check_same_model_shape(loaded, s.cfg, dir);
  s.w = read_weights(dir, layout, s.cfg);
  s.has_optimizer = read_optimizer_state(dir + "/optimizer.bin", layout.size(), &s.step, moments ? &s.m : nullptr, moments ? &s.v : nullptr);
  if (!s.has_optimizer && moments) {
    s.m.assign(size_t(layout.size()), 0.0f);
    s.v.assign(size_t(layout.size()), 0.0f);
  }
  return s;
}

void finish_train_step(TrainStats& st, double grad_sumsq, const TrainHyper& hp, int64_t* step, const std::function<void(const AdamStep&)>& update) {
  st.grad_norm = std::sqrt(grad_sumsq);
  if (!std::isfinite(st.grad_norm)) {
    st.skipped = true;  // weights and Adam state untouched
  } else {
    const double clip = st.grad_norm > hp.max_grad_norm ? hp.max_grad_norm / (st.grad_norm + 1e-6) : 1.0;
    ++*step;
    const double bc1 = 1.0 - std::pow(hp.beta1, double(*step)), bc2 = 1.0 - std::pow(hp.beta2, double(*step));
    update(AdamStep{float(hp.beta1), float(hp.beta2), float(1.0 - hp.lr * hp.weight_decay), float(hp.lr / bc1), float(1.0 / std::sqrt(bc2)),
                    float(hp.eps), float(clip)});
  }
  st.step = *step;
}

RopeTable::RopeTable(const QwenConfig& cfg) : inv_freq(size_t(cfg.head_dim / 2)) {
  for (int64_t i = 0; i < cfg.head_dim / 2; i++)
    inv_freq[size_t(i)] = float(1.0 / std::pow(cfg.rope_theta, double(float(2 * i) / float(cfg.head_dim))));
}

void RopeTable::ensure(int64_t n_pos) {
  if (n_pos <= n) return;
  const int64_t half = int64_t(inv_freq.size()), m = std::max(n_pos, 2 * n);
  cos.resize(size_t(m * half));
  sin.resize(size_t(m * half));
  for (int64_t p = n; p < m; p++)
    for (int64_t i = 0; i < half; i++) {
      const float ang = float(p) * inv_freq[size_t(i)];
      cos[size_t(p * half + i)] = float(std::cos(double(ang)));
      sin[size_t(p * half + i)] = float(std::sin(double(ang)));
    }
  n = m;
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

void validate_decode(const QwenConfig& cfg, const int32_t* prompt, int64_t n_prompt, const GenerateOptions& o) {
  validate_generate(n_prompt, prompt, o, cfg.vocab_size);
  if (n_prompt >= cfg.max_position_embeddings)
    throw std::invalid_argument("promptIds.length=" + std::to_string(n_prompt) + " leaves no room below max_position_embeddings=" +
                                std::to_string(cfg.max_position_embeddings));
}

DecodeToken next_token(const QwenConfig& cfg, const float* logits, const GenerateOptions& o, Rng& rng, int64_t pos, int64_t max_t) {
  DecodeToken t;
  const SampleParams sp{o.temperature, o.top_p, &o.allowed_ids};
  t.id = sample_token(logits, cfg.vocab_size, sp, rng, &t.logprob);
  if (o.top_logprobs > 0) append_top_logprobs(logits, cfg.vocab_size, o.top_logprobs, &t.top_ids, &t.top_logprobs);
  if (std::find(o.stop_ids.begin(), o.stop_ids.end(), t.id) != o.stop_ids.end()) t.finish = DecodeToken::Stop;
  else if (pos + 1 >= max_t) t.finish = DecodeToken::Length;
  return t;
}

int64_t decode_limit(const QwenConfig& cfg, int64_t n_prompt, const GenerateOptions& o) {
  return std::min(n_prompt + o.max_new_tokens, cfg.max_position_embeddings);
}

GenerateResult decode_tokens(const QwenConfig& cfg, const int32_t* prompt, int64_t n_prompt, const GenerateOptions& o,
                             const std::function<void(int64_t max_t)>& reserve, const FeedTokens& feed) {
  validate_decode(cfg, prompt, n_prompt, o);
  GenerateResult r;
  if (o.max_new_tokens == 0) return r;
  const int64_t max_t = decode_limit(cfg, n_prompt, o);
  reserve(max_t);
  std::vector<float> logits(size_t(cfg.vocab_size));
  feed(prompt, n_prompt, 0, logits.data());
  Rng rng(o.seed);  // the host sampler and RNG of every backend: same seed ⇒ same tokens where logits agree
  for (int64_t pos = n_prompt;; pos++) {
    DecodeToken t = next_token(cfg, logits.data(), o, rng, pos, max_t);
    append_token(&r, t);
    if (t.finish != DecodeToken::Running) break;
    feed(&t.id, 1, pos, logits.data());
  }
  return r;
}

void append_token(GenerateResult* r, const DecodeToken& t) {
  r->ids.push_back(t.id);
  r->logprobs.push_back(t.logprob);
  r->top_ids.insert(r->top_ids.end(), t.top_ids.begin(), t.top_ids.end());
  r->top_logprobs.insert(r->top_logprobs.end(), t.top_logprobs.begin(), t.top_logprobs.end());
  r->stopped = t.finish == DecodeToken::Stop;
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
