// safetensors, read and written here (no library): an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, then the raw little-endian
// data. The reader checks the header against the file before anything is read and reads element ranges
// with pread, so a rank touches only the bytes of its own shard. F32, BF16 and F16 convert to fp32.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"

namespace meshrun::trainer {

/// The element types read as weights; Other covers the rest of the format's types (I64, U8, F64, ...).
enum class TensorDType { kF32, kBF16, kF16, kOther };

/// "F32" -> F32 ...; anything else -> Other.
TensorDType parse_tensor_dtype(const std::string& name);
/// "F32", "BF16", "F16" or "other".
std::string to_string(TensorDType dtype);
/// Bytes per element; 0 for Other.
int element_size(TensorDType dtype);

/// One tensor's entry in a safetensors header.
struct SafetensorsTensor {
  std::string dtype_name;  // as the header spells it
  TensorDType dtype = TensorDType::kOther;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // absolute byte offsets in the file
  uint64_t end = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  /// Opens and validates `path`: header length and JSON, every entry's dtype/shape/offsets against the
  /// file size, and the tensors tiling the data section exactly (no overlap, gap or trailing bytes).
  /// Throws meshrun::Error naming the file and what is wrong.
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  /// nullptr when the file has no tensor of that name.
  const SafetensorsTensor* find(const std::string& name) const;
  /// Elements [first, first + count) of the flattened tensor, converted to fp32. Throws naming the file
  /// for a dtype other than F32/BF16/F16 or a short read.
  void read_f32(const std::string& name, int64_t first, int64_t count, float* dst) const;
  /// Data bytes read so far through read_f32.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  std::string path_;
  UniqueFd fd_;
  std::map<std::string, SafetensorsTensor> tensors_;
  mutable uint64_t bytes_read_ = 0;
};

/// fp32 -> bf16 with round-to-nearest-even (what torch's .to(bfloat16) does for numbers); NaN stays NaN.
uint16_t bf16_from_f32(float value);
/// bf16 bits -> fp32, exact.
float f32_from_bf16(uint16_t bits);
/// IEEE half bits -> fp32, exact (subnormals, infinities and NaN included).
float f32_from_f16(uint16_t bits);

/// The bytes that precede the data: length, header JSON (tensors in insertion order, __metadata__ first),
/// padded with spaces so the data starts 8-byte aligned. `header` maps names to {dtype, shape,
/// data_offsets} as in the format.
std::string safetensors_preamble(const nlohmann::ordered_json& header);

}  // namespace meshrun::trainer
