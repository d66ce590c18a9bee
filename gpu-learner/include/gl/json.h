// Minimal JSON reader: enough for config.json, safetensors headers and sharded index files.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gl {

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  bool is_null() const { return kind == Kind::Null; }
  bool is_number() const { return kind == Kind::Number; }
  bool is_string() const { return kind == Kind::String; }
  bool is_array() const { return kind == Kind::Array; }
  bool is_object() const { return kind == Kind::Object; }
  bool is_bool() const { return kind == Kind::Bool; }
  // Member lookup; nullptr when absent or when this is not an object.
  const Json* find(const std::string& key) const;
};

// Throws std::runtime_error("<what>: JSON parse error at byte N: ...") on malformed text.
Json parse_json(const std::string& text, const std::string& what);
std::string json_escape(const std::string& s);

}  // namespace gl
