// Qwen3 model configuration, read from a Hugging Face config.json.
#pragma once
#include <cstdint>
#include <string>

namespace gl {

struct QwenConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;          // C
  int64_t intermediate_size = 0;    // I
  int64_t num_hidden_layers = 0;    // L
  int64_t num_attention_heads = 0;  // Hq
  int64_t num_key_value_heads = 0;  // Hkv (GQA: Hq % Hkv == 0)
  int64_t head_dim = 0;             // D, read from config, never derived
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::string raw_json;             // the file's text, written back by save() (dtype set to float32)

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
};

// Parses and validates; errors name the file and the field.
QwenConfig parse_config(const std::string& json_text, const std::string& path);
QwenConfig load_config(const std::string& dir);
// The config text written beside F32 weights: a top-level "dtype" / "torch_dtype" (e.g. "bfloat16" from a
// bf16 source) becomes "float32", so readers that honour it (transformers, vLLM) do not mistake the
// checkpoint's precision; every other byte is kept.
std::string config_for_f32_weights(const std::string& json_text);

}  // namespace gl
