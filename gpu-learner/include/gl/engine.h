// The learner's backend interface: the CPU engine implements it (reference), a CUDA engine slots in
// behind the same calls. Everything shared by backends (validation, the GRPO++ token loss, sampling,
// config and safetensors I/O, optimizer-file format) lives host-side next to this header.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gl/config.h"

namespace gl {

struct EngineOptions {
  int threads = 0;            // 0 => std::thread::hardware_concurrency()
  bool naive_matmul = false;  // single-loop reference matmul (bench baseline only)
  int64_t logits_budget = 0;  // LM-head chunk in logits (rows·V); 0 ⇒ the backend's default. Tests force small chunks.
  // Consecutive sequences sharing at least this many first tokens (a GRPO group's prompt) forward them once in
  // log-probs and training (CPU engine; src/row_plan.h); 0 ⇒ never.
  int64_t min_shared_prefix = 32;
  // Batched decoding (CPU engine): the keys/values of recently prefilled prompts kept, up to this many bytes, so a
  // later sample of the same prompt skips its prefill; 0 ⇒ none.
  int64_t prompt_cache_bytes = int64_t(256) << 20;
  // Log-probs as a half-precision server computes them (CPU engine, logprobs() only): the weights and every tensor
  // the forward stores (norm outputs, projections, attention output, residual stream, MLP, logits) rounded to this
  // type, the products still summed in fp32 as oneDNN's and cuBLAS's half GEMMs do. The weight-sync probe measures a
  // bf16 server's expected error with it (lib/sync-probe.ts). A learner loaded so refuses to train or generate.
  enum class Half { none, bf16, fp16 } emulate_half = Half::none;
};

// Packed variable-length sequences: sequence i is ids[offsets[i], offsets[i+1]); no padding.
struct PackedBatch {
  const int32_t* ids = nullptr;
  int64_t n_tokens = 0;
  const int32_t* offsets = nullptr;  // n_seqs + 1 entries
  int64_t n_seqs = 0;
};

struct TrainBatch : PackedBatch {
  const float* mask = nullptr;          // n_tokens
  const float* advantages = nullptr;    // n_seqs
  const float* old_logprobs = nullptr;  // n_tokens, or null => recomputed on the current weights
  // n_tokens, or null: train_step writes here the log-prob of each trained token (mask != 0) on the weights before
  // the step, from the step's own forward (the caller's π_old measure needs no second pass); other entries untouched
  float* logprobs_out = nullptr;
};

enum class LossMode { GrpoPlusPlus, Grpo };

struct TrainHyper {
  double lr = 1e-6, weight_decay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip_low = 0.2, clip_high = 0.28, max_grad_norm = 1.0, l_max = 32768;
  LossMode mode = LossMode::GrpoPlusPlus;
  int64_t micro_batch_tokens = 4096;
  // N of the loss normalisation (see sequence_loss_norms): the batch's sequences plus those a caller
  // left out because they add 0; 0 => the batch's own sequence count. Never below that count.
  int64_t norm_seqs = 0;
};

struct TrainStats {
  double loss = 0, grad_norm = 0, clip_fraction = 0, mean_ratio = 0;
  int64_t tokens = 0;
  int64_t rows = 0;  // rows run through the model: tokens minus those a shared prefix saved (CPU engine)
  double seconds = 0;
  bool skipped = false;
  int64_t step = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 0;
  double temperature = 1.0;
  double top_p = 1.0;
  uint64_t seed = 0;
  std::vector<int32_t> stop_ids;
  std::vector<int32_t> allowed_ids;
  int64_t top_logprobs = 0;  // k most likely tokens (full-vocab log-softmax at temperature 1) per position
};

struct GenerateResult {
  std::vector<int32_t> ids;       // generated tokens only (the prompt is not repeated)
  std::vector<float> logprobs;    // full-vocab log-softmax at temperature 1 of each generated token
  bool stopped = false;           // true => ended on a stop id (included in ids)
  // top_logprobs > 0: per generated position the k most likely ids and their log-probs, most likely
  // first (ties: lower id first); row-major (ids.size() x k), same distribution as `logprobs`
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

// One token of one sequence from a batched decoding step (Engine::decode_step).
struct DecodeToken {
  int64_t seq = 0;        // the id decode_add gave
  int32_t id = 0;         // the token
  float logprob = 0;      // as GenerateResult::logprobs
  std::vector<int32_t> top_ids;  // top_logprobs > 0: as GenerateResult
  std::vector<float> top_logprobs;
  enum Finish { Running, Stop, Length } finish = Running;  // Stop/Length: the sequence's last token (it is gone after)
};

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0, numel = 0;  // into the one parameter (and gradient) allocation
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const QwenConfig& config() const = 0;
  virtual int64_t step() const = 0;
  virtual std::string device() const = 0;

  virtual GenerateResult generate(const int32_t* prompt, int64_t n_prompt, const GenerateOptions& opts) = 0;
  // out: n_tokens entries; out[t] = log p(ids[t] | earlier ids of its sequence), 0 for each first token.
  virtual void logprobs(const PackedBatch& batch, float* out) = 0;
  virtual TrainStats train_step(const TrainBatch& batch, const TrainHyper& hp) = 0;
  virtual void save(const std::string& dir) = 0;   // model.safetensors + config.json + optimizer.bin, atomic
  virtual void load(const std::string& dir) = 0;   // weights (+ optimizer state when present)

  // Batched decoding: running sequences decode together, each step reading the weights once for all of them.
  // A sequence's tokens and log-probs depend on its prompt, options and seed only, never on the others
  // (generate() gives the same for one sequence alone). A server adds and removes sequences between steps.
  // decode_add: n = opts.size() samples of one prompt (maxNewTokens >= 1 each); the prompt is prefilled once and
  // its KV cache shared by copy. Returns their ids (increasing). load() ends every running sequence.
  virtual std::vector<int64_t> decode_add(const int32_t* prompt, int64_t n_prompt, const std::vector<GenerateOptions>& opts);
  // One token for every running sequence, by increasing id.
  virtual std::vector<DecodeToken> decode_step();
  // Ends a running sequence early; false when there is none with that id.
  virtual bool decode_remove(int64_t seq);
  virtual int64_t decode_running() const { return 0; }

  // Debug/testing: loss (and gradients into the gradient buffer) without an optimizer step.
  virtual double debug_loss(const TrainBatch& batch, const TrainHyper& hp, bool with_grads) = 0;
  virtual const std::vector<ParamInfo>& params() const = 0;
  virtual std::vector<float> get_tensor(const std::string& name, bool grad) const = 0;
  virtual void set_tensor(const std::string& name, const float* data, int64_t n) = 0;
};

// The CPU engine's GEMM kernels, e.g. "OpenBLAS SkylakeX" (after the run-time fix of gemm.cpp), or the built-in ones.
std::string cpu_gemm_kernels();

// device: "cpu" | "cuda". Loads config.json + safetensors (+ optimizer.bin) from dir.
std::unique_ptr<Engine> make_engine(const std::string& device, const std::string& dir, const EngineOptions& opts);

// Shared validation: throws std::invalid_argument naming the field and the value/index. A sequence may hold at
// most max_positions tokens (config max_position_embeddings: positions 0..max_positions−1, as generation).
void validate_packed(const PackedBatch& b, int64_t vocab, int64_t max_positions);
void validate_train(const TrainBatch& b, const TrainHyper& hp, int64_t vocab, int64_t max_positions);
void validate_generate(int64_t n_prompt, const int32_t* prompt, const GenerateOptions& o, int64_t vocab);

// Optimizer state file (optimizer.bin): magic, version, step, n, m[n], v[n].
void write_optimizer_state(const std::string& path, int64_t step, const std::vector<float>& m, const std::vector<float>& v);
// Returns false when the file does not exist; throws on a malformed file or a size mismatch. m and v null: the header
// only (the step, every check but the data's).
bool read_optimizer_state(const std::string& path, int64_t n, int64_t* step, std::vector<float>* m, std::vector<float>* v);

// Writes to path + ".tmp<pid>" in parts, then commit() renames it over path (same directory => atomic on POSIX); the
// temporary file is removed when the writer goes away uncommitted. For files too large to build in memory.
class AtomicWriter {
 public:
  explicit AtomicWriter(const std::string& path);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  void write(const void* p, size_t n);
  void commit();

 private:
  std::string path_, tmp_;
  std::ofstream f_;
  bool done_ = false;
};
// The same for a whole file at once.
void atomic_write_file(const std::string& path, const std::string& bytes);
bool file_exists(const std::string& path);
std::string read_file(const std::string& path);

}  // namespace gl
