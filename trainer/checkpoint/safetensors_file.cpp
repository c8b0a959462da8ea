#include "trainer/checkpoint/safetensors_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "common/error.hpp"
#include "common/pread_full.hpp"

namespace meshrun::trainer {
namespace {

using nlohmann::json;

// Real headers are a few hundred bytes per tensor; anything near this is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100ULL << 20;

void pread_all(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  const ssize_t r = pread_full(fd, dst, n, offset);
  if (r < 0) throw Error("cannot read " + path + ": " + std::strerror(errno));
  if (static_cast<size_t>(r) < n) {
    throw Error(path + " is truncated (reading bytes " + std::to_string(offset) + ".." + std::to_string(offset + n) +
                ")");
  }
}

SafetensorsTensor parse_entry(const std::string& name, const json& entry, uint64_t data_start, uint64_t file_size,
                              const std::string& path) {
  const auto bad = [&](const std::string& what) {
    return Error(path + ": the header entry of tensor '" + name + "' " + what + " (a damaged or unfinished file?)");
  };
  if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
      !entry["shape"].is_array() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
      entry["data_offsets"].size() != 2) {
    throw bad("lacks dtype, shape or data_offsets");
  }
  SafetensorsTensor t;
  t.dtype_name = entry["dtype"].get<std::string>();
  t.dtype = parse_tensor_dtype(t.dtype_name);
  uint64_t numel = 1;
  for (const auto& d : entry["shape"]) {
    if (!d.is_number_unsigned() || __builtin_mul_overflow(numel, d.get<uint64_t>(), &numel) ||
        numel > static_cast<uint64_t>(INT64_MAX)) {
      throw bad("has a shape that is not a list of non-negative integers of a representable size");
    }
    t.shape.push_back(d.get<int64_t>());
  }
  for (const auto& o : entry["data_offsets"]) {
    if (!o.is_number_unsigned()) throw bad("has data_offsets that are not non-negative integers");
  }
  const auto first = entry["data_offsets"][0].get<uint64_t>();
  const auto last = entry["data_offsets"][1].get<uint64_t>();
  if (first > last || last > file_size - data_start) {
    throw bad("points at data bytes " + std::to_string(first) + ".." + std::to_string(last) + ", but the file has " +
              std::to_string(file_size - data_start));
  }
  t.begin = data_start + first;
  t.end = data_start + last;
  const uint64_t size = static_cast<uint64_t>(element_size(t.dtype));
  if (size > 0 && t.end - t.begin != numel * size) {
    throw bad("holds " + std::to_string(t.end - t.begin) + " bytes, but shape " + entry["shape"].dump() + " of " +
              t.dtype_name + " needs " + std::to_string(numel * size));
  }
  return t;
}

// The tensors must tile the data section exactly, as the reference implementation requires: no overlap
// (two tensors sharing bytes), no gap, nothing after the last.
void check_tiling(const std::map<std::string, SafetensorsTensor>& tensors, uint64_t data_start, uint64_t file_size,
                  const std::string& path) {
  std::vector<std::pair<const std::string*, const SafetensorsTensor*>> order;
  for (const auto& [name, t] : tensors) order.emplace_back(&name, &t);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
  });
  uint64_t next = data_start;
  const std::string* previous = nullptr;
  for (const auto& [name, t] : order) {
    if (t->begin != next) {
      throw Error(path + ": tensor '" + *name + "' starts at data byte " + std::to_string(t->begin - data_start) +
                  (previous != nullptr ? ", but '" + *previous + "' ends at " + std::to_string(next - data_start)
                                       : std::string(", not at 0")) +
                  " (overlapping or misplaced tensors: a damaged file?)");
    }
    next = t->end;
    previous = name;
  }
  if (next != file_size) {
    throw Error(path + ": " + std::to_string(file_size - next) +
                " bytes follow the last tensor's data (a damaged file, or two files joined?)");
  }
}

}  // namespace

TensorDType parse_tensor_dtype(const std::string& name) {
  if (name == "F32") return TensorDType::kF32;
  if (name == "BF16") return TensorDType::kBF16;
  if (name == "F16") return TensorDType::kF16;
  return TensorDType::kOther;
}

std::string to_string(TensorDType dtype) {
  switch (dtype) {
    case TensorDType::kF32: return "F32";
    case TensorDType::kBF16: return "BF16";
    case TensorDType::kF16: return "F16";
    case TensorDType::kOther: break;
  }
  return "other";
}

int element_size(TensorDType dtype) {
  switch (dtype) {
    case TensorDType::kF32: return 4;
    case TensorDType::kBF16:
    case TensorDType::kF16: return 2;
    case TensorDType::kOther: break;
  }
  return 0;
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_.valid()) throw Error("cannot open " + path_ + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) throw Error("cannot stat " + path_ + ": " + std::strerror(errno));
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) throw Error(path_ + " is not a safetensors file: " + std::to_string(file_size) + " bytes");
  unsigned char len_bytes[8];
  pread_all(fd_.get(), len_bytes, sizeof(len_bytes), 0, path_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8) {
    throw Error(path_ + " is not a safetensors file (or is truncated): its header length field says " +
                std::to_string(header_len) + " bytes in a " + std::to_string(file_size) + "-byte file");
  }
  std::string text(header_len, '\0');
  pread_all(fd_.get(), text.data(), text.size(), 8, path_);
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    throw Error(path_ + ": the safetensors header is not a JSON object (a damaged file?)");
  const uint64_t data_start = 8 + header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    tensors_.emplace(it.key(), parse_entry(it.key(), it.value(), data_start, file_size, path_));
  }
  check_tiling(tensors_, data_start, file_size, path_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::read_f32(const std::string& name, int64_t first, int64_t count, float* dst) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) throw Error(path_ + " has no tensor '" + name + "'");
  const int size = element_size(t->dtype);
  if (size == 0) {
    throw Error(path_ + ": tensor '" + name + "' is " + t->dtype_name +
                "; meshrun-trainer reads F32, BF16 and F16 weights");
  }
  if (first < 0 || count < 0 || first + count > t->numel())
    throw Error("read of elements [" + std::to_string(first) + ", " + std::to_string(first + count) + ") of " + name +
                " (" + std::to_string(t->numel()) + " elements) in " + path_);
  const uint64_t offset = t->begin + static_cast<uint64_t>(first) * static_cast<uint64_t>(size);
  const size_t n = static_cast<size_t>(count);
  bytes_read_ += n * static_cast<size_t>(size);
  if (t->dtype == TensorDType::kF32) {  // x86 is little-endian: straight into place
    pread_all(fd_.get(), dst, n * sizeof(float), offset, path_);
    return;
  }
  std::vector<uint16_t> half(n);
  pread_all(fd_.get(), half.data(), n * sizeof(uint16_t), offset, path_);
  const bool bf16 = t->dtype == TensorDType::kBF16;
  for (size_t i = 0; i < n; ++i) dst[i] = bf16 ? f32_from_bf16(half[i]) : f32_from_f16(half[i]);
}

uint16_t bf16_from_f32(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  // NaN stays a quiet NaN with its sign and upper payload (torch writes the canonical 0x7FC0 instead).
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f32_from_bf16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out = 0;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

float f32_from_f16(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  uint32_t wide = 0;
  if (exponent == 0x1F) {
    wide = sign | 0x7F800000 | (mantissa << 13);  // inf / NaN
  } else if (exponent != 0) {
    wide = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa != 0) {
    // Subnormal: exact in fp32 as mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    std::memcpy(&wide, &magnitude, sizeof(wide));
    wide |= sign;
  } else {
    wide = sign;
  }
  float out = 0;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

std::string safetensors_preamble(const nlohmann::ordered_json& header) {
  std::string text = header.dump();
  text.append((8 - (text.size() + 8) % 8) % 8, ' ');  // length field + header: a multiple of 8
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace meshrun::trainer
