// Host-side pieces shared by every backend: validation, files, optimizer state, sampling, factory.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

#include "gl/engine.h"
#include "gl/sampling.h"
#include "simd.h"

namespace gl {

std::unique_ptr<Engine> make_cpu_engine(const std::string& dir, const EngineOptions& opts);
#ifdef GL_HAVE_CUDA
std::unique_ptr<Engine> make_cuda_engine(const std::string& dir, const EngineOptions& opts);
#endif

std::unique_ptr<Engine> make_engine(const std::string& device, const std::string& dir, const EngineOptions& opts) {
  if (opts.threads < 0) throw std::invalid_argument("threads must be >= 0, got " + std::to_string(opts.threads));
  if (device == "cpu") return make_cpu_engine(dir, opts);
  if (device == "cuda") {
    if (opts.emulate_half != EngineOptions::Half::none) throw std::invalid_argument("emulateHalf: the CPU engine's option (device \"cpu\"), got device \"cuda\"");
#ifdef GL_HAVE_CUDA
    return make_cuda_engine(dir, opts);
#else
    throw std::runtime_error("CUDA backend not built (no nvcc found at build time)");
#endif
  }
  throw std::invalid_argument("device must be \"cpu\" or \"cuda\", got \"" + device + "\"");
}

// Backends without batched decoding.
std::vector<int64_t> Engine::decode_add(const int32_t*, int64_t, const std::vector<GenerateOptions>&) {
  throw std::runtime_error("batched decoding is implemented by the cpu backend only (device " + device() + "); use generate");
}
std::vector<DecodeToken> Engine::decode_step() { return {}; }
bool Engine::decode_remove(int64_t) { return false; }

// ---- validation ----

static std::string num(double v) {
  char b[64];
  snprintf(b, sizeof b, "%.9g", v);
  return b;
}

void validate_packed(const PackedBatch& b, int64_t vocab, int64_t max_positions) {
  if (b.n_seqs < 1) throw std::invalid_argument("offsets must have at least 2 entries (n sequences + 1), got " + std::to_string(b.n_seqs + 1));
  if (b.offsets[0] != 0) throw std::invalid_argument("offsets[0] must be 0, got " + std::to_string(b.offsets[0]));
  for (int64_t i = 1; i <= b.n_seqs; i++)
    if (b.offsets[i] < b.offsets[i - 1])
      throw std::invalid_argument("offsets must be non-decreasing: offsets[" + std::to_string(i) + "]=" + std::to_string(b.offsets[i]) +
                                  " < offsets[" + std::to_string(i - 1) + "]=" + std::to_string(b.offsets[i - 1]));
  if (b.offsets[b.n_seqs] != b.n_tokens)
    throw std::invalid_argument("offsets[" + std::to_string(b.n_seqs) + "]=" + std::to_string(b.offsets[b.n_seqs]) +
                                " must equal ids.length=" + std::to_string(b.n_tokens));
  for (int64_t i = 0; i < b.n_seqs; i++)
    if (b.offsets[i + 1] - b.offsets[i] > max_positions)
      throw std::invalid_argument("sequence " + std::to_string(i) + " has " + std::to_string(b.offsets[i + 1] - b.offsets[i]) +
                                  " tokens, more than max_position_embeddings=" + std::to_string(max_positions) + " of the model (positions 0.." +
                                  std::to_string(max_positions - 1) + ")");
  for (int64_t t = 0; t < b.n_tokens; t++)
    if (b.ids[t] < 0 || b.ids[t] >= vocab)
      throw std::invalid_argument("ids[" + std::to_string(t) + "]=" + std::to_string(b.ids[t]) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
}

static void check_range(const char* name, double v, double lo, double hi, bool lo_open, bool hi_open) {
  bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok)
    throw std::invalid_argument(std::string(name) + " must be a finite number in " + (lo_open ? "(" : "[") + num(lo) + ", " +
                                (std::isinf(hi) ? std::string("inf") : num(hi)) + (hi_open ? ")" : "]") + ", got " + num(v));
}

void validate_train(const TrainBatch& b, const TrainHyper& hp, int64_t vocab, int64_t max_positions) {
  validate_packed(b, vocab, max_positions);
  const double inf = INFINITY;
  check_range("lr", hp.lr, 0, inf, false, true);
  check_range("weightDecay", hp.weight_decay, 0, inf, false, true);
  check_range("beta1", hp.beta1, 0, 1, false, true);
  check_range("beta2", hp.beta2, 0, 1, false, true);
  check_range("eps", hp.eps, 0, inf, true, true);
  check_range("clipLow", hp.clip_low, 0, 1, false, true);
  check_range("clipHigh", hp.clip_high, 0, inf, false, true);
  check_range("maxGradNorm", hp.max_grad_norm, 0, inf, true, true);
  check_range("lMax", hp.l_max, 0, inf, true, true);
  if (hp.micro_batch_tokens < 1) throw std::invalid_argument("microBatchTokens must be >= 1, got " + std::to_string(hp.micro_batch_tokens));
  if (hp.norm_seqs != 0 && hp.norm_seqs < b.n_seqs)
    throw std::invalid_argument("hp.normSequences=" + std::to_string(hp.norm_seqs) + " must be 0 (the batch's count) or >= the " +
                                std::to_string(b.n_seqs) + " sequences in the batch");
  for (int64_t t = 0; t < b.n_tokens; t++)
    if (!std::isfinite(b.mask[t]) || b.mask[t] < 0)
      throw std::invalid_argument("mask[" + std::to_string(t) + "]=" + num(b.mask[t]) + " must be finite and >= 0");
  for (int64_t i = 0; i < b.n_seqs; i++)
    if (!std::isfinite(b.advantages[i])) throw std::invalid_argument("advantages[" + std::to_string(i) + "]=" + num(b.advantages[i]) + " is not finite");
  if (b.old_logprobs)
    for (int64_t t = 0; t < b.n_tokens; t++)
      if (!std::isfinite(b.old_logprobs[t]) || b.old_logprobs[t] > 0)
        throw std::invalid_argument("oldLogprobs[" + std::to_string(t) + "]=" + num(b.old_logprobs[t]) + " must be finite and <= 0");
}

void validate_generate(int64_t n_prompt, const int32_t* prompt, const GenerateOptions& o, int64_t vocab) {
  if (n_prompt < 1) throw std::invalid_argument("promptIds must not be empty");
  for (int64_t t = 0; t < n_prompt; t++)
    if (prompt[t] < 0 || prompt[t] >= vocab)
      throw std::invalid_argument("promptIds[" + std::to_string(t) + "]=" + std::to_string(prompt[t]) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (o.max_new_tokens < 0) throw std::invalid_argument("maxNewTokens must be >= 0, got " + std::to_string(o.max_new_tokens));
  check_range("temperature", o.temperature, 0, INFINITY, false, true);
  check_range("topP", o.top_p, 0, 1, true, false);
  for (size_t i = 0; i < o.stop_ids.size(); i++)
    if (o.stop_ids[i] < 0 || o.stop_ids[i] >= vocab)
      throw std::invalid_argument("stopIds[" + std::to_string(i) + "]=" + std::to_string(o.stop_ids[i]) + " is outside the vocabulary");
  for (size_t i = 0; i < o.allowed_ids.size(); i++)
    if (o.allowed_ids[i] < 0 || o.allowed_ids[i] >= vocab)
      throw std::invalid_argument("allowedIds[" + std::to_string(i) + "]=" + std::to_string(o.allowed_ids[i]) + " is outside the vocabulary");
  if (o.top_logprobs < 0 || o.top_logprobs > vocab)
    throw std::invalid_argument("topLogprobs must be in [0, " + std::to_string(vocab) + "], got " + std::to_string(o.top_logprobs));
}

// ---- files ----

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open for reading");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

AtomicWriter::AtomicWriter(const std::string& path) : path_(path), tmp_(path + ".tmp" + std::to_string(::getpid())) {
  f_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!f_) throw std::runtime_error(tmp_ + ": cannot open for writing (does the directory exist?)");
}

AtomicWriter::~AtomicWriter() {
  if (!done_) {
    f_.close();
    std::remove(tmp_.c_str());
  }
}

void AtomicWriter::write(const void* p, size_t n) {
  f_.write(static_cast<const char*>(p), std::streamsize(n));
  if (!f_) throw std::runtime_error(tmp_ + ": write failed (disk full?)");
}

void AtomicWriter::commit() {
  f_.flush();
  f_.close();
  if (!f_) throw std::runtime_error(tmp_ + ": write failed (disk full?)");
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) throw std::runtime_error(path_ + ": rename from temporary file failed");
  done_ = true;
}

void atomic_write_file(const std::string& path, const std::string& bytes) {
  AtomicWriter w(path);
  w.write(bytes.data(), bytes.size());
  w.commit();
}

static const uint32_t kOptMagic = 0x54504F47;  // "GOPT" little-endian
static const uint32_t kOptVersion = 1;

void write_optimizer_state(const std::string& path, int64_t step, const std::vector<float>& m, const std::vector<float>& v) {
  AtomicWriter w(path);  // streamed: the state of a 630M-parameter model is 5 GB
  const uint64_t n = m.size();
  const uint64_t s = uint64_t(step);
  w.write(&kOptMagic, 4);
  w.write(&kOptVersion, 4);
  w.write(&s, 8);
  w.write(&n, 8);
  w.write(m.data(), n * 4);
  w.write(v.data(), n * 4);
  w.commit();
}

bool read_optimizer_state(const std::string& path, int64_t n, int64_t* step, std::vector<float>* m, std::vector<float>* v) {
  if (!file_exists(path)) return false;
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error(path + ": cannot open for reading");
  const uint64_t size = uint64_t(f.tellg());
  if (size < 24) throw std::runtime_error(path + ": truncated optimizer state (" + std::to_string(size) + " bytes)");
  f.seekg(0);
  uint32_t magic, version;
  uint64_t s, cnt;
  f.read(reinterpret_cast<char*>(&magic), 4);
  f.read(reinterpret_cast<char*>(&version), 4);
  f.read(reinterpret_cast<char*>(&s), 8);
  f.read(reinterpret_cast<char*>(&cnt), 8);
  if (magic != kOptMagic) throw std::runtime_error(path + ": bad magic number (not a gpu-learner optimizer file)");
  if (version != kOptVersion) throw std::runtime_error(path + ": unsupported version " + std::to_string(version) + ", expected " + std::to_string(kOptVersion));
  if (cnt != uint64_t(n)) throw std::runtime_error(path + ": holds state for " + std::to_string(cnt) + " parameters, the model has " + std::to_string(n));
  if (size != 24 + 8 * cnt) throw std::runtime_error(path + ": size " + std::to_string(size) + " bytes, expected " + std::to_string(24 + 8 * cnt) + " (truncated?)");
  *step = int64_t(s);
  if (!m) return true;  // the header only (the step), the moments read when training needs them
  m->resize(cnt);
  v->resize(cnt);
  f.read(reinterpret_cast<char*>(m->data()), std::streamsize(cnt * 4));  // straight into place: no whole-file copy
  f.read(reinterpret_cast<char*>(v->data()), std::streamsize(cnt * 4));
  if (!f) throw std::runtime_error(path + ": short read (truncated file)");
  return true;
}

// ---- sampling ----

// Samples from (weight, id) pairs with the given total; top_p < 1 keeps the smallest set of most likely ids whose
// mass reaches top_p (ties broken by id, for determinism). Sorts pr.
static int32_t sample_weighted(std::vector<std::pair<double, int32_t>>& pr, double total, double top_p, Rng& rng) {
  size_t keep = pr.size();
  if (top_p < 1.0) {
    std::sort(pr.begin(), pr.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    double cum = 0;
    for (keep = 0; keep < pr.size();) {
      cum += pr[keep++].first;
      if (cum >= top_p * total) break;
    }
    total = cum;
  }
  const double u = rng.uniform() * total;
  double acc = 0;
  for (size_t k = 0; k < keep; k++) {
    acc += pr[k].first;
    if (u < acc) return pr[k].second;
  }
  return pr[keep - 1].second;
}

double log_sum_exp(const float* logits, int64_t vocab) {
  const cpu::SimdKernels& k = cpu::simd();
  const float mx = k.max(logits, vocab);
  return double(mx) + std::log(k.exp_store(nullptr, logits, vocab, mx, 1.0f, 1.0f));
}

int32_t sample_token(const float* logits, int64_t vocab, const SampleParams& p, Rng& rng, float* logprob) {
  const double lse = log_sum_exp(logits, vocab);  // full-vocabulary log-softmax at temperature 1, for the log-prob
  const bool restricted = p.allowed && !p.allowed->empty();
  int32_t tok;
  if (p.temperature == 0) {  // greedy: the first largest logit
    if (restricted) {
      tok = (*p.allowed)[0];
      for (int32_t c : *p.allowed) if (logits[c] > logits[tok] || (logits[c] == logits[tok] && c < tok)) tok = c;
    } else {
      tok = 0;
      for (int64_t i = 1; i < vocab; i++) if (logits[i] > logits[tok]) tok = int32_t(i);
    }
  } else if (restricted) {
    const std::vector<int32_t>& cand = *p.allowed;
    float cmx = -INFINITY;
    for (int32_t c : cand) cmx = std::max(cmx, logits[c]);
    std::vector<std::pair<double, int32_t>> pr(cand.size());
    double total = 0;
    for (size_t k = 0; k < cand.size(); k++) {
      const double w = std::exp((double(logits[cand[k]]) - cmx) / p.temperature);
      pr[k] = {w, cand[k]};
      total += w;
    }
    tok = sample_weighted(pr, total, p.top_p, rng);
  } else {
    // w_i = exp((l_i − max)/T) on float lanes, the total in double
    thread_local std::vector<float> w;
    w.resize(size_t(vocab));
    const cpu::SimdKernels& k = cpu::simd();
    const double total = k.exp_store(w.data(), logits, vocab, k.max(logits, vocab), float(1.0 / p.temperature), 1.0f);
    if (p.top_p < 1.0) {
      std::vector<std::pair<double, int32_t>> pr;
      pr.reserve(size_t(vocab));
      for (int64_t i = 0; i < vocab; i++) if (w[size_t(i)] > 0) pr.push_back({double(w[size_t(i)]), int32_t(i)});
      tok = sample_weighted(pr, total, p.top_p, rng);
    } else {
      const double u = rng.uniform() * total;
      double acc = 0;
      tok = int32_t(vocab - 1);
      for (int64_t i = 0; i < vocab; i++) {
        acc += w[size_t(i)];
        if (u < acc) { tok = int32_t(i); break; }
      }
      while (w[size_t(tok)] == 0 && tok > 0) tok--;  // rounding left u at the very end: the last token with weight
    }
  }
  *logprob = float(double(logits[tok]) - lse);
  return tok;
}

void append_top_logprobs(const float* logits, int64_t vocab, int64_t k, std::vector<int32_t>* ids, std::vector<float>* lps) {
  const double lse = log_sum_exp(logits, vocab);
  const int64_t kk = std::min(k, vocab);
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<int32_t> top;  // the kk best so far, best first: one pass, an insertion per improvement
  top.reserve(size_t(kk) + 1);
  for (int64_t i = 0; i < vocab; i++) {
    const int32_t c = int32_t(i);
    if (int64_t(top.size()) == kk && !before(c, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), c, before), c);
    if (int64_t(top.size()) > kk) top.pop_back();
  }
  for (int32_t c : top) {
    ids->push_back(c);
    lps->push_back(float(double(logits[c]) - lse));
  }
}

}  // namespace gl
