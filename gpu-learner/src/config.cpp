#include "gl/config.h"

#include <cmath>
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
// rope_parameters {rope_type, rope_theta}. Only the default (unscaled) RoPE is implemented: any other
// type is refused by name rather than silently computed wrong.
double read_rope_theta(const Json& j, const std::string& path) {
  for (const char* field : {"rope_parameters", "rope_scaling"}) {
    const Json* r = j.find(field);
    if (!r || r->is_null()) continue;
    const std::string type = rope_type_of(*r, field, path);
    if (type != "default")
      throw std::runtime_error(path + ": field \"" + field + ".rope_type\" is \"" + type +
                               "\": this RoPE type is not implemented (only \"default\" RoPE)");
    if (std::string(field) == "rope_parameters" && r->find("rope_theta")) return get_pos(*r, "rope_theta", path + " rope_parameters");
  }
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

}  // namespace

QwenConfig parse_config(const std::string& text, const std::string& path) {
  Json j = parse_json(text, path);
  if (!j.is_object()) throw std::runtime_error(path + ": expected a JSON object");
  QwenConfig c;
  c.vocab_size = get_int(j, "vocab_size", path, 1);
  c.hidden_size = get_int(j, "hidden_size", path, 1);
  c.intermediate_size = get_int(j, "intermediate_size", path, 1);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", path, 1);
  c.num_attention_heads = get_int(j, "num_attention_heads", path, 1);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", path, 1);
  c.head_dim = get_int(j, "head_dim", path, 2);
  c.rms_norm_eps = get_pos(j, "rms_norm_eps", path);
  c.rope_theta = read_rope_theta(j, path);
  if (j.find("max_position_embeddings")) c.max_position_embeddings = get_int(j, "max_position_embeddings", path, 1);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false, path);
  c.attention_bias = get_bool(j, "attention_bias", false, path);
  if (c.head_dim % 2 != 0) throw std::runtime_error(path + ": field \"head_dim\" must be even for RoPE, got " + std::to_string(c.head_dim));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw std::runtime_error(path + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                             ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) + ")");
  if (const Json* act = j.find("hidden_act"); act && !(act->is_string() && act->str == "silu"))
    throw std::runtime_error(path + ": field \"hidden_act\" must be \"silu\" (Qwen3)");
  if (const Json* sw = j.find("use_sliding_window"); sw && sw->is_bool() && sw->b)
    throw std::runtime_error(path + ": field \"use_sliding_window\"=true is not supported (full causal attention only)");
  if (const Json* lt = j.find("layer_types"); lt && lt->is_array())
    for (const Json& t : lt->arr)
      if (!(t.is_string() && t.str == "full_attention"))
        throw std::runtime_error(path + ": field \"layer_types\" holds \"" + (t.is_string() ? t.str : std::string("?")) +
                                 "\": only \"full_attention\" layers are supported");
  c.raw_json = text;
  return c;
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
