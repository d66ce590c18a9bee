// Deterministic RNG and next-token sampling, shared by every backend (host side).
#pragma once
#include <cstdint>
#include <vector>

namespace gl {

// splitmix64: tiny, fast, same stream on every platform.
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
};

struct SampleParams {
  double temperature = 1.0;   // 0 => greedy
  double top_p = 1.0;
  const std::vector<int32_t>* allowed = nullptr;  // empty/null => whole vocabulary
};

// Picks a token from one row of logits (V). *logprob gets the full-vocabulary log-softmax of the
// chosen token at temperature 1 (the policy's log-prob, what the learner recomputes), not the
// tempered / top-p / allowed-restricted sampling distribution.
int32_t sample_token(const float* logits, int64_t vocab, const SampleParams& p, Rng& rng, float* logprob);

// log Σ_i exp(logits[i]) over the vocabulary (float lanes, double sum).
double log_sum_exp(const float* logits, int64_t vocab);
// Appends the k largest entries of the row's full-vocabulary log-softmax (temperature 1), most likely first
// (ties: lower id first).
void append_top_logprobs(const float* logits, int64_t vocab, int64_t k, std::vector<int32_t>* ids, std::vector<float>* lps);

}  // namespace gl
