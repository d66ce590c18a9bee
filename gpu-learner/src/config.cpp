#include "gl/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "gl/engine.h"
#include "gl/json.h"

namespace gl {

namespace {

const Json& need(const Json& j, const std::string& key, const std::string& path) {
  const Json* v = j.find(key);
  if (!v || v->is_null()) throw std::runtime_error(path + ": missing required field \"" + key + "\"");
  return *v;
}

int64_t get_int(const Json& j, const std::string& key, const std::string& path, int64_t min_value) {
  const Json& v = need(j, key, path);
  if (!v.is_number() || std::floor(v.num) != v.num || v.num < double(min_value) || v.num > 1e12)
    throw std::runtime_error(path + ": field \"" + key + "\" must be an integer >= " + std::to_string(min_value));
  return int64_t(v.num);
}

double get_pos(const Json& j, const std::string& key, const std::string& path) {
  const Json& v = need(j, key, path);
  if (!v.is_number() || !(v.num > 0) || !std::isfinite(v.num))
    throw std::runtime_error(path + ": field \"" + key + "\" must be a positive finite number");
  return v.num;
}

// A scalar's text for an error message.
std::string json_text(const Json& v) {
  if (v.is_string()) return "\"" + v.str + "\"";
  if (v.is_number()) {
    char b[32];
    for (int prec = 6; prec <= 17; prec++) {  // the shortest text that reads back as the same number
      std::snprintf(b, sizeof b, "%.*g", prec, v.num);
      if (std::strtod(b, nullptr) == v.num) break;
    }
    return b;
  }
  if (v.is_bool()) return v.b ? "true" : "false";
  return v.is_null() ? "null" : "a JSON object or array";
}

// The RoPE type named by a rope_parameters / rope_scaling object ("rope_type", or transformers 4's "type").
std::string rope_type_of(const Json& r, const std::string& field, const std::string& path) {
  if (!r.is_object()) throw std::runtime_error(path + ": field \"" + field + "\" must be an object or null");
  const Json* t = r.find("rope_type");
  if (!t) t = r.find("type");
  if (!t || t->is_null()) return "default";
  if (!t->is_string()) throw std::runtime_error(path + ": field \"" + field + ".rope_type\" must be a string");
  return t->str;
}

// rope_theta: transformers 4 writes it at the top level (rope_scaling beside it), transformers 5 inside
// rope_parameters {rope_type, rope_theta}. Only the default (unscaled, fully rotary) RoPE is implemented: any other
// type or a partial rotary factor is refused by name rather than silently computed wrong.
double read_rope_theta(const Json& j, const std::string& path) {
  for (const char* field : {"rope_parameters", "rope_scaling"}) {
    const Json* r = j.find(field);
    if (!r || r->is_null()) continue;
    const std::string type = rope_type_of(*r, field, path);
    if (type != "default")
      throw std::runtime_error(path + ": field \"" + field + ".rope_type\" is \"" + type +
                               "\": this RoPE type is not implemented (only \"default\" RoPE)");
    if (const Json* f = r->find("partial_rotary_factor"); f && !(f->is_number() && f->num == 1.0))
      throw std::runtime_error(path + ": field \"" + field + ".partial_rotary_factor\" is " + json_text(*f) +
                               ": partial RoPE is not implemented (only 1.0)");
    if (std::string(field) == "rope_parameters" && r->find("rope_theta")) return get_pos(*r, "rope_theta", path + " rope_parameters");
  }
  if (const Json* f = j.find("partial_rotary_factor"); f && !(f->is_number() && f->num == 1.0))
    throw std::runtime_error(path + ": field \"partial_rotary_factor\" is " + json_text(*f) + ": partial RoPE is not implemented (only 1.0)");
  if (!j.find("rope_theta"))
    throw std::runtime_error(path + ": missing required field \"rope_theta\" (or \"rope_parameters.rope_theta\")");
  return get_pos(j, "rope_theta", path);
}

bool get_bool(const Json& j, const std::string& key, bool dflt, const std::string& path) {
  const Json* v = j.find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_bool()) throw std::runtime_error(path + ": field \"" + key + "\" must be true or false");
  return v->b;
}

// What transformers' config class of each architecture fixes, and the defaults it fills in (transformers 5).
struct Arch {
  const char* model_type;
  const char* class_name;  // architectures[0]
  bool qk_norm, qkv_bias_always, has_attention_bias_field, head_dim_required, has_sliding_window_switch, window_by_default;
  int64_t max_pos_default;
};
constexpr Arch kArchs[] = {
    {"qwen3", "Qwen3ForCausalLM", true, false, true, true, true, false, 32768},
    {"qwen2", "Qwen2ForCausalLM", false, true, false, false, true, false, 32768},
    {"llama", "LlamaForCausalLM", false, false, true, false, false, false, 2048},
    {"mistral", "MistralForCausalLM", false, false, false, false, false, true, 131072},
};

// The architecture named by model_type, else by architectures[0]; both present must agree.
const Arch& read_arch(const Json& j, const std::string& path) {
  std::string names;
  for (const Arch& a : kArchs) names += std::string(names.empty() ? "" : ", ") + a.model_type;
  const Json* mt = j.find("model_type");
  const Json* ar = j.find("architectures");
  std::string cls;
  if (ar && ar->is_array() && !ar->arr.empty() && ar->arr[0].is_string()) cls = ar->arr[0].str;
  const Arch* by_cls = nullptr;
  for (const Arch& a : kArchs)
    if (cls == a.class_name) by_cls = &a;
  if (mt && !mt->is_null()) {
    if (!mt->is_string()) throw std::runtime_error(path + ": field \"model_type\" must be a string");
    for (const Arch& a : kArchs)
      if (mt->str == a.model_type) {
        if (!cls.empty() && by_cls != &a)
          throw std::runtime_error(path + ": field \"architectures\" is [\"" + cls + "\"] but \"model_type\" is \"" + mt->str +
                                   "\" (expected \"" + a.class_name + "\")");
        return a;
      }
    throw std::runtime_error(path + ": field \"model_type\" is \"" + mt->str + "\": architecture not implemented (supported: " + names + ")");
  }
  if (by_cls) return *by_cls;
  if (!cls.empty())
    throw std::runtime_error(path + ": field \"architectures\" is [\"" + cls + "\"]: architecture not implemented (supported: " + names + ")");
  throw std::runtime_error(path + ": missing required field \"model_type\" (or \"architectures\"): one of " + names);
}

// Sliding-window attention is refused wherever it would act: Qwen's use_sliding_window / layer_types, Mistral's
// sliding_window (transformers defaults it to 4096) below max_position_embeddings.
void refuse_sliding_window(const Json& j, const Arch& a, const QwenConfig& c, const std::string& path) {
  if (a.has_sliding_window_switch && get_bool(j, "use_sliding_window", false, path))
    throw std::runtime_error(path + ": field \"use_sliding_window\"=true is not supported (full causal attention only)");
  if (const Json* lt = j.find("layer_types"); lt && lt->is_array())
    for (const Json& t : lt->arr)
      if (!(t.is_string() && t.str == "full_attention"))
        throw std::runtime_error(path + ": field \"layer_types\" holds \"" + (t.is_string() ? t.str : std::string("?")) +
                                 "\": only \"full_attention\" layers are supported");
  if (a.window_by_default) {
    const Json* w = j.find("sliding_window");
    const int64_t window = !w ? 4096 : w->is_null() ? 0 : get_int(j, "sliding_window", path, 1);
    if (window > 0 && window < c.max_position_embeddings)
      throw std::runtime_error(path + ": field \"sliding_window\" is " + std::to_string(window) + (w ? "" : " (the " + std::string(a.model_type) + " default)") +
                               ", below max_position_embeddings=" + std::to_string(c.max_position_embeddings) +
                               ": sliding-window attention is not supported (set it to null for full causal attention)");
  }
}

// Settings we do not implement, refused by name (transformers would honour them).
void refuse_unsupported(const Json& j, const Arch& a, const std::string& path) {
  if (const Json* act = j.find("hidden_act"); act && !(act->is_string() && act->str == "silu"))
    throw std::runtime_error(path + ": field \"hidden_act\" is " + json_text(*act) + ": only \"silu\" (SwiGLU) is implemented");
  if (get_bool(j, "mlp_bias", false, path)) throw std::runtime_error(path + ": field \"mlp_bias\"=true is not supported (MLP projections without bias only)");
  if (!a.has_attention_bias_field && get_bool(j, "attention_bias", false, path))
    throw std::runtime_error(path + ": field \"attention_bias\"=true is not a setting of " + a.model_type +
                             (a.qkv_bias_always ? " (its q/k/v projections always have biases, o_proj never)" : " (no projection biases)"));
  for (const char* f : {"attention_dropout", "hidden_dropout"})
    if (const Json* d = j.find(f); d && !(d->is_number() && d->num == 0))
      throw std::runtime_error(path + ": field \"" + f + "\" is " + json_text(*d) + ": dropout is not implemented (0 only)");
}

}  // namespace

QwenConfig parse_config(const std::string& text, const std::string& path) {
  Json j = parse_json(text, path);
  if (!j.is_object()) throw std::runtime_error(path + ": expected a JSON object");
  const Arch& arch = read_arch(j, path);
  QwenConfig c;
  c.model_type = arch.model_type;
  c.vocab_size = get_int(j, "vocab_size", path, 1);
  c.hidden_size = get_int(j, "hidden_size", path, 1);
  c.intermediate_size = get_int(j, "intermediate_size", path, 1);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", path, 1);
  c.num_attention_heads = get_int(j, "num_attention_heads", path, 1);
  const Json* kv = j.find("num_key_value_heads");
  c.num_key_value_heads = kv && !kv->is_null() ? get_int(j, "num_key_value_heads", path, 1) : c.num_attention_heads;
  const Json* hd = j.find("head_dim");
  if (hd && !hd->is_null()) {
    c.head_dim = get_int(j, "head_dim", path, 2);
  } else if (arch.head_dim_required) {
    c.head_dim = get_int(j, "head_dim", path, 2);  // throws: missing required field
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      throw std::runtime_error(path + ": no \"head_dim\", and hidden_size (" + std::to_string(c.hidden_size) + ") is not a multiple of num_attention_heads (" +
                               std::to_string(c.num_attention_heads) + ")");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.rms_norm_eps = j.find("rms_norm_eps") ? get_pos(j, "rms_norm_eps", path) : 1e-6;
  c.rope_theta = read_rope_theta(j, path);
  c.max_position_embeddings = j.find("max_position_embeddings") ? get_int(j, "max_position_embeddings", path, 1) : arch.max_pos_default;
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false, path);
  c.qk_norm = arch.qk_norm;
  const bool attention_bias = arch.has_attention_bias_field && get_bool(j, "attention_bias", false, path);
  c.qkv_bias = arch.qkv_bias_always || attention_bias;
  c.o_bias = attention_bias;
  if (c.head_dim % 2 != 0) throw std::runtime_error(path + ": field \"head_dim\" must be even for RoPE, got " + std::to_string(c.head_dim));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw std::runtime_error(path + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                             ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) + ")");
  refuse_unsupported(j, arch, path);
  refuse_sliding_window(j, arch, c, path);
  c.raw_json = text;
  return c;
}

std::string resolved_config_json(const QwenConfig& c) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"model_type\":\"%s\",\"vocab_size\":%lld,\"hidden_size\":%lld,\"intermediate_size\":%lld,\"num_hidden_layers\":%lld,"
                "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":%lld,\"rms_norm_eps\":%.17g,\"rope_theta\":%.17g,"
                "\"max_position_embeddings\":%lld,\"tie_word_embeddings\":%s,\"qk_norm\":%s,\"qkv_bias\":%s,\"o_bias\":%s}",
                c.model_type.c_str(), (long long)c.vocab_size, (long long)c.hidden_size, (long long)c.intermediate_size,
                (long long)c.num_hidden_layers, (long long)c.num_attention_heads, (long long)c.num_key_value_heads, (long long)c.head_dim,
                c.rms_norm_eps, c.rope_theta, (long long)c.max_position_embeddings, c.tie_word_embeddings ? "true" : "false",
                c.qk_norm ? "true" : "false", c.qkv_bias ? "true" : "false", c.o_bias ? "true" : "false");
  return buf;
}

std::string config_for_f32_weights(const std::string& text) {
  // A light scan of the (already validated) text: strings are skipped whole, depth counts braces and
  // brackets; a top-level "dtype"/"torch_dtype" key's string value is replaced, everything else kept.
  std::string out;
  out.reserve(text.size() + 16);
  int depth = 0;
  std::string last_key;
  bool want_value = false;
  for (size_t i = 0; i < text.size();) {
    const char ch = text[i];
    if (ch == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      const std::string tok = text.substr(i, j + 1 - i);
      i = j + 1;
      if (depth == 1 && want_value && (last_key == "\"dtype\"" || last_key == "\"torch_dtype\"")) {
        out += "\"float32\"";
      } else {
        out += tok;
      }
      if (depth == 1 && !want_value) last_key = tok;
      want_value = false;
      continue;
    }
    if (ch == '{' || ch == '[') depth++;
    if (ch == '}' || ch == ']') depth--;
    if (depth == 1 && ch == ':') want_value = true;
    if (depth == 1 && ch == ',') want_value = false;
    out += ch;
    i++;
  }
  return out;
}

QwenConfig load_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!file_exists(path)) throw std::runtime_error(path + ": file not found");
  return parse_config(read_file(path), path);
}

}  // namespace gl
