// Decoder configuration (Qwen3, Qwen2, Llama, Mistral), read from a Hugging Face config.json. The architectures differ
// only in the switches below; everything else (RMSNorm, rotate-half RoPE, GQA, SwiGLU) is shared.
#pragma once
#include <cstdint>
#include <string>

namespace gl {

struct QwenConfig {
  std::string model_type = "qwen3";  // qwen3 | qwen2 | llama | mistral (config.json model_type / architectures)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;          // C
  int64_t intermediate_size = 0;    // I
  int64_t num_hidden_layers = 0;    // L
  int64_t num_attention_heads = 0;  // Hq
  int64_t num_key_value_heads = 0;  // Hkv (GQA: Hq % Hkv == 0)
  int64_t head_dim = 0;             // D: config.json's, else hidden/heads (Llama, Qwen2, Mistral; Qwen3 requires it)
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  bool qk_norm = true;              // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool qkv_bias = false;            // q/k/v projection biases (Qwen2 always; Qwen3/Llama attention_bias)
  bool o_bias = false;              // o_proj bias (Qwen3/Llama attention_bias)
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
// The model as the engine reads it, as one JSON object (model_type, every shape field with head_dim and
// num_key_value_heads resolved, rope_theta, rms_norm_eps, qk_norm, qkv_bias, o_bias, tie_word_embeddings).
std::string resolved_config_json(const QwenConfig& c);

}  // namespace gl
