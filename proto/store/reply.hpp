// The reply layouts of the TCPStore protocol, in one place: the daemon writes each reply with an encode_*
// function, the client reads it back with the matching decode_* one. Which query gets which reply is
// listed in tcpstore_protocol.hpp; the primitive encodings are in byte_codec.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "proto/store/byte_codec.hpp"
#include "proto/store/tcpstore_protocol.hpp"

namespace meshrun::proto {

/// A reply string longer than this (16 GiB) is a desynchronised stream, not data: the daemon refuses
/// values over --max-message-bytes, which is at most 4 GiB.
inline constexpr uint64_t kMaxReplyStringBytes = uint64_t{1} << 34;

// ---- Encoding: the daemon ----

/// CHECK: u8 CheckResponse.
inline std::string encode_status(CheckResponse status) { return std::string(1, static_cast<char>(status)); }
/// WAIT, BARRIER, CANCEL_WAIT: u8 WaitResponse.
inline std::string encode_status(WaitResponse status) { return std::string(1, static_cast<char>(status)); }

/// PING: the u32 nonce, echoed.
inline std::string encode_nonce(uint32_t nonce) {
  ByteWriter w;
  w.put_u32(nonce);
  return w.take();
}

/// GET, COMPARE_SET, MESHRUN: one string.
inline std::string encode_string(std::string_view value) {
  ByteWriter w;
  w.put_string(value);
  return w.take();
}

/// ADD, GETNUMKEYS, DELETE_KEY, QUEUE_LEN: one int64.
inline std::string encode_int64(int64_t value) {
  ByteWriter w;
  w.put_i64(value);
  return w.take();
}

/// MULTI_GET: one string per requested key, no count (the client knows how many keys it asked for).
inline std::string encode_strings(const std::vector<std::string>& values) {
  ByteWriter w;
  for (const auto& v : values) w.put_string(v);
  return w.take();
}

/// LIST_KEYS: a vector (u64 count, then the strings).
inline std::string encode_string_list(const std::vector<std::string>& values) {
  ByteWriter w;
  w.put_u64(values.size());
  for (const auto& v : values) w.put_string(v);
  return w.take();
}

/// QUEUE_POP: int64 queue length before the pop, then the popped value when there was one.
inline std::string encode_queue_pop(int64_t length_before, const std::optional<std::string>& popped) {
  ByteWriter w;
  w.put_i64(length_before);
  if (popped) w.put_string(*popped);
  return w.take();
}

// ---- Decoding: the client ----
// `in` is any source with `void read_exact(void* data, size_t size)`, which fills exactly `size` bytes
// or throws (it owns the socket and the deadline), and `std::string peer() const`, named in errors.

template <typename Status, typename Source>
Status decode_status(Source&& in) {
  uint8_t v = 0;
  in.read_exact(&v, sizeof v);
  return static_cast<Status>(v);
}

template <typename Source>
uint32_t decode_nonce(Source&& in) {
  uint32_t v = 0;
  in.read_exact(&v, sizeof v);
  return v;
}

template <typename Source>
int64_t decode_int64(Source&& in) {
  int64_t v = 0;
  in.read_exact(&v, sizeof v);
  return v;
}

template <typename Source>
std::string decode_string(Source&& in) {
  uint64_t len = 0;
  in.read_exact(&len, sizeof len);
  if (len > kMaxReplyStringBytes) throw ProtocolError("implausible string length from " + in.peer());
  std::string s(static_cast<size_t>(len), '\0');
  if (len > 0) in.read_exact(s.data(), s.size());
  return s;
}

/// MULTI_GET: `count` strings, as many as keys were asked for.
template <typename Source>
std::vector<std::string> decode_strings(Source&& in, size_t count) {
  std::vector<std::string> values;
  values.reserve(count);
  for (size_t i = 0; i < count; ++i) values.push_back(decode_string(in));
  return values;
}

/// LIST_KEYS.
template <typename Source>
std::vector<std::string> decode_string_list(Source&& in) {
  uint64_t count = 0;
  in.read_exact(&count, sizeof count);
  std::vector<std::string> values;
  for (uint64_t i = 0; i < count; ++i) values.push_back(decode_string(in));
  return values;
}

/// QUEUE_POP: the popped value, or nullopt when the queue was empty.
template <typename Source>
std::optional<std::string> decode_queue_pop(Source&& in) {
  if (decode_int64(in) <= 0) return std::nullopt;
  return decode_string(in);
}

}  // namespace meshrun::proto
