// Poly1305 (RFC 8439, section 2.5): a one-time authenticator fast enough to cover every byte of a memory copy
// (a GiB in about a second on one core, where HMAC-SHA-256 here would take several). Its 32-byte key must
// never authenticate two messages: callers derive a fresh one per transfer (launcher/memory/peer_auth.hpp).
// Streaming: update() takes the bytes as they arrive, in pieces of any size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace meshrun {

using Poly1305Key = std::array<uint8_t, 32>;
using Poly1305Tag = std::array<uint8_t, 16>;

class Poly1305 {
 public:
  explicit Poly1305(const Poly1305Key& key);
  void update(const void* data, size_t bytes);
  void update(std::string_view data) { update(data.data(), data.size()); }
  /// The tag of every byte given; the object is spent after it.
  Poly1305Tag finish();

 private:
  void blocks(const uint8_t* m, size_t bytes, uint64_t high_bit);

  uint64_t r_[3];    // r in 44+44+42-bit limbs, clamped
  uint64_t h_[3]{};  // the accumulator, same limbs
  uint64_t pad_[2];  // s
  uint8_t buffer_[16]{};
  size_t buffered_ = 0;
};

}  // namespace meshrun
