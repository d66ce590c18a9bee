#include "gl/json.h"

#include <cstdlib>
#include <stdexcept>

namespace gl {

const Json* Json::find(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &it->second;
}

namespace {

struct Parser {
  const std::string& s;
  const std::string& what;
  size_t i = 0;
  int depth = 0;

  [[noreturn]] void fail(const std::string& msg) {
    throw std::runtime_error(what + ": JSON parse error at byte " + std::to_string(i) + ": " + msg);
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
  }
  bool lit(const char* w) {
    size_t n = 0;
    while (w[n]) n++;
    if (s.compare(i, n, w) == 0) { i += n; return true; }
    return false;
  }
  static void utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
    else { out += char(0xF0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3F)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
  }
  uint32_t hex4() {
    if (i + 4 > s.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
      char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad \\u escape");
    }
    return v;
  }
  std::string str() {
    if (s[i] != '"') fail("expected string");
    i++;
    std::string out;
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      char c = s[i++];
      if (c == '"') break;
      if (c != '\\') { out += c; continue; }
      if (i >= s.size()) fail("unterminated escape");
      char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            i += 2;
            uint32_t lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: fail(std::string("bad escape \\") + e);
      }
    }
    return out;
  }
  Json value() {
    if (++depth > 256) fail("nesting too deep");
    ws();
    if (i >= s.size()) fail("unexpected end of input");
    Json v;
    char c = s[i];
    if (c == '{') {
      v.kind = Json::Kind::Object;
      i++;
      ws();
      if (i < s.size() && s[i] == '}') { i++; depth--; return v; }
      while (true) {
        ws();
        if (i >= s.size() || s[i] != '"') fail("expected object key");
        std::string k = str();
        ws();
        if (i >= s.size() || s[i] != ':') fail("expected ':'");
        i++;
        v.obj[k] = value();
        ws();
        if (i < s.size() && s[i] == ',') { i++; continue; }
        if (i < s.size() && s[i] == '}') { i++; break; }
        fail("expected ',' or '}'");
      }
    } else if (c == '[') {
      v.kind = Json::Kind::Array;
      i++;
      ws();
      if (i < s.size() && s[i] == ']') { i++; depth--; return v; }
      while (true) {
        v.arr.push_back(value());
        ws();
        if (i < s.size() && s[i] == ',') { i++; continue; }
        if (i < s.size() && s[i] == ']') { i++; break; }
        fail("expected ',' or ']'");
      }
    } else if (c == '"') {
      v.kind = Json::Kind::String;
      v.str = str();
    } else if (lit("true")) { v.kind = Json::Kind::Bool; v.b = true; }
    else if (lit("false")) { v.kind = Json::Kind::Bool; v.b = false; }
    else if (lit("null")) { v.kind = Json::Kind::Null; }
    else if (c == '-' || (c >= '0' && c <= '9')) {
      const char* start = s.c_str() + i;
      char* endp = nullptr;
      v.kind = Json::Kind::Number;
      v.num = std::strtod(start, &endp);
      if (endp == start) fail("bad number");
      i += size_t(endp - start);
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    depth--;
    return v;
  }
};

}  // namespace

Json parse_json(const std::string& text, const std::string& what) {
  Parser p{text, what};
  Json v = p.value();
  p.ws();
  if (p.i != text.size()) p.fail("trailing characters");
  return v;
}

std::string json_escape(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if ((unsigned char)c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += c;
  }
  return o + "\"";
}

}  // namespace gl
