#include "gl/safetensors.h"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include "gl/engine.h"
#include "gl/json.h"

namespace gl {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); i++) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, u;
  if (exp == 0) {
    if (man == 0) u = sign;
    else {  // subnormal: normalise
      int e = -1;
      do { e++; man <<= 1; } while (!(man & 0x400));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3FF) << 13;
    }
  } else if (exp == 31) u = sign | 0x7F800000u | man << 13;
  else u = sign | (exp + 127 - 15) << 23 | man << 13;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static size_t dtype_size(const std::string& d) {
  if (d == "F32") return 4;
  if (d == "BF16" || d == "F16") return 2;
  return 0;
}

SafetensorsReader::SafetensorsReader(const std::string& dir) : dir_(dir) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (file_exists(single)) {
    index_file(single);
  } else if (file_exists(index)) {
    Json j = parse_json(read_file(index), index);
    const Json* wm = j.find("weight_map");
    if (!wm || !wm->is_object()) throw std::runtime_error(index + ": missing \"weight_map\" object");
    std::map<std::string, bool> files;
    for (auto& kv : wm->obj) {
      if (!kv.second.is_string()) throw std::runtime_error(index + ": weight_map[\"" + kv.first + "\"] must be a file name");
      files[kv.second.str] = true;
    }
    for (auto& f : files) index_file(dir + "/" + f.first);
  } else {
    throw std::runtime_error(dir + ": neither model.safetensors nor model.safetensors.index.json found");
  }
}

void SafetensorsReader::index_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error(path + ": cannot open");
  const uint64_t fsize = uint64_t(f.tellg());
  if (fsize < 8) throw std::runtime_error(path + ": truncated safetensors file (" + std::to_string(fsize) + " bytes, no header)");
  f.seekg(0);
  unsigned char b[8];
  f.read(reinterpret_cast<char*>(b), 8);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
  if (hlen > fsize - 8 || hlen > (uint64_t(100) << 20))
    throw std::runtime_error(path + ": bad safetensors header length " + std::to_string(hlen) + " (file has " +
                             std::to_string(fsize) + " bytes): truncated file or not a safetensors file");
  std::string header(hlen, '\0');
  f.read(&header[0], std::streamsize(hlen));
  if (!f) throw std::runtime_error(path + ": cannot read header");
  Json j = parse_json(header, path + " (safetensors header)");
  if (!j.is_object()) throw std::runtime_error(path + ": safetensors header is not a JSON object");
  const uint64_t data0 = 8 + hlen;
  for (auto& kv : j.obj) {
    if (kv.first == "__metadata__") continue;
    const Json& t = kv.second;
    const std::string where = path + ": tensor \"" + kv.first + "\"";
    const Json *dt = t.find("dtype"), *sh = t.find("shape"), *off = t.find("data_offsets");
    if (!dt || !dt->is_string() || !sh || !sh->is_array() || !off || !off->is_array() || off->arr.size() != 2)
      throw std::runtime_error(where + ": malformed entry (needs dtype, shape, data_offsets)");
    TensorInfo ti;
    ti.file = path;
    ti.dtype = dt->str;
    uint64_t numel = 1;
    for (auto& d : sh->arr) {
      if (!d.is_number() || d.num < 0) throw std::runtime_error(where + ": bad shape entry");
      ti.shape.push_back(int64_t(d.num));
      numel *= uint64_t(d.num);
    }
    if (!off->arr[0].is_number() || !off->arr[1].is_number()) throw std::runtime_error(where + ": bad data_offsets");
    ti.begin = data0 + uint64_t(off->arr[0].num);
    ti.end = data0 + uint64_t(off->arr[1].num);
    const size_t es = dtype_size(ti.dtype);
    if (ti.end < ti.begin) throw std::runtime_error(where + ": data_offsets end before begin");
    if (es && ti.end - ti.begin != numel * es)
      throw std::runtime_error(where + ": byte size " + std::to_string(ti.end - ti.begin) + " does not match shape " +
                               shape_str(ti.shape) + " x " + ti.dtype + " (" + std::to_string(numel * es) + " bytes)");
    if (ti.end > fsize)
      throw std::runtime_error(where + ": data ends at byte " + std::to_string(ti.end) + " but the file has only " +
                               std::to_string(fsize) + " bytes (truncated file)");
    tensors_[kv.first] = ti;
  }
}

void SafetensorsReader::read(const std::string& name, const std::vector<int64_t>& expected, float* dst) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::runtime_error(dir_ + ": tensor \"" + name + "\" missing (expected shape " + shape_str(expected) + ")");
  const TensorInfo& ti = it->second;
  if (ti.shape != expected)
    throw std::runtime_error(ti.file + ": tensor \"" + name + "\" has shape " + shape_str(ti.shape) + ", expected " + shape_str(expected));
  const size_t es = dtype_size(ti.dtype);
  if (!es) throw std::runtime_error(ti.file + ": tensor \"" + name + "\" has unsupported dtype " + ti.dtype + " (F32, BF16, F16 supported)");
  const uint64_t n = (ti.end - ti.begin) / es;
  std::ifstream f(ti.file, std::ios::binary);
  if (!f) throw std::runtime_error(ti.file + ": cannot open");
  f.seekg(std::streamoff(ti.begin));
  if (es == 4) {
    f.read(reinterpret_cast<char*>(dst), std::streamsize(n * 4));  // little-endian host assumed (x86/arm64)
  } else {
    std::vector<uint16_t> tmp(n);
    f.read(reinterpret_cast<char*>(tmp.data()), std::streamsize(n * 2));
    if (ti.dtype == "BF16") for (uint64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(tmp[i]);
    else for (uint64_t i = 0; i < n; i++) dst[i] = f16_to_f32(tmp[i]);
  }
  if (!f) throw std::runtime_error(ti.file + ": tensor \"" + name + "\": short read (truncated file)");
}

void write_safetensors_f32(const std::string& path, const std::vector<TensorView>& tensors) {
  std::string h = "{";
  uint64_t off = 0;
  for (size_t i = 0; i < tensors.size(); i++) {
    uint64_t numel = 1;
    for (auto d : tensors[i].shape) numel *= uint64_t(d);
    std::string shp = "[";
    for (size_t k = 0; k < tensors[i].shape.size(); k++) shp += (k ? "," : "") + std::to_string(tensors[i].shape[k]);
    shp += "]";
    h += (i ? "," : "") + json_escape(tensors[i].name) + ":{\"dtype\":\"F32\",\"shape\":" + shp +
         ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + numel * 4) + "]}";
    off += numel * 4;
  }
  h += "}";
  while ((8 + h.size()) % 8) h += ' ';
  AtomicWriter w(path);  // streamed tensor by tensor: never a second copy of the weights in memory
  const uint64_t hl = h.size();
  w.write(&hl, 8);  // little-endian host (x86, arm64)
  w.write(h.data(), h.size());
  for (auto& t : tensors) {
    uint64_t numel = 1;
    for (auto d : t.shape) numel *= uint64_t(d);
    w.write(t.data, numel * 4);
  }
  w.commit();
}

}  // namespace gl
