// ByteWriter / ByteReader: the primitive encodings of the TCPStore protocol (see tcpstore_protocol.hpp).
// The reader never allocates before it has checked that the bytes are there and within limits.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace meshrun::proto {

class ByteWriter {
 public:
  void put_u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void put_u32(uint32_t v) { put_raw(&v, sizeof v); }
  void put_u64(uint64_t v) { put_raw(&v, sizeof v); }
  void put_i64(int64_t v) { put_raw(&v, sizeof v); }
  void put_string(std::string_view s) {
    put_u64(s.size());
    out_.append(s.data(), s.size());
  }
  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void put_raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

/// Outcome of a read from a buffer that may hold only part of a message.
enum class ReadStatus { kOk, kNeedMore, kTooLarge };

class ByteReader {
 public:
  explicit ByteReader(std::string_view data) : data_(data) {}

  ReadStatus u8(uint8_t& v) { return raw(&v, sizeof v); }
  ReadStatus u32(uint32_t& v) { return raw(&v, sizeof v); }
  ReadStatus u64(uint64_t& v) { return raw(&v, sizeof v); }
  ReadStatus i64(int64_t& v) { return raw(&v, sizeof v); }
  /// Reads a u64-length-prefixed string of at most `max_len` bytes.
  ReadStatus string(std::string& v, size_t max_len) {
    uint64_t len = 0;
    if (auto s = u64(len); s != ReadStatus::kOk) return s;
    if (len > max_len) return ReadStatus::kTooLarge;
    if (remaining() < len) return ReadStatus::kNeedMore;
    v.assign(data_.data() + pos_, static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return ReadStatus::kOk;
  }
  /// Steps over a u64-length-prefixed string of at most `max_len` bytes without copying it.
  ReadStatus skip_string(size_t max_len) {
    uint64_t len = 0;
    if (auto s = u64(len); s != ReadStatus::kOk) return s;
    if (len > max_len) return ReadStatus::kTooLarge;
    if (remaining() < len) return ReadStatus::kNeedMore;
    pos_ += static_cast<size_t>(len);
    return ReadStatus::kOk;
  }
  size_t position() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  ReadStatus raw(void* p, size_t n) {
    if (remaining() < n) return ReadStatus::kNeedMore;
    std::memcpy(p, data_.data() + pos_, n);
    pos_ += n;
    return ReadStatus::kOk;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace meshrun::proto
