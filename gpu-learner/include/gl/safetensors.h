// safetensors reader (F32/BF16/F16 -> fp32, single file or sharded index) and F32 writer.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gl {

struct TensorInfo {
  std::string file;            // absolute or dir-relative path of the shard holding it
  std::string dtype;           // "F32" | "BF16" | "F16"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; // absolute byte offsets in the file
};

// Index of all tensors of a checkpoint directory (model.safetensors or model.safetensors.index.json).
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& dir);
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Reads tensor `name` converted to fp32 into dst (numel floats); checks the shape against `expected`.
  void read(const std::string& name, const std::vector<int64_t>& expected, float* dst) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }

 private:
  void index_file(const std::string& path);
  std::string dir_;
  std::map<std::string, TensorInfo> tensors_;
};

struct TensorView {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;
};
// Writes an F32 safetensors file (tensors in the given order).
void write_safetensors_f32(const std::string& path, const std::vector<TensorView>& tensors);

std::string shape_str(const std::vector<int64_t>& s);
float bf16_to_f32(uint16_t h);
float f16_to_f32(uint16_t h);

}  // namespace gl
