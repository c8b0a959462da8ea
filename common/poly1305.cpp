#include "common/poly1305.hpp"

#include <algorithm>
#include <cstring>

// The 64-bit-limb arithmetic of Poly1305 (h = (h + block) * r mod 2^130 - 5) with three limbs of 44, 44 and
// 42 bits, so every product fits an unsigned __int128 and the carries stay simple.
namespace meshrun {
namespace {

constexpr uint64_t kMask44 = 0xfffffffffffULL;
constexpr uint64_t kMask42 = 0x3ffffffffffULL;

uint64_t load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

Poly1305::Poly1305(const Poly1305Key& key) {
  const uint64_t t0 = load64(&key[0]);
  const uint64_t t1 = load64(&key[8]);
  // r &= 0x0ffffffc0ffffffc0ffffffc0fffffff (the clamp), split into limbs.
  r_[0] = t0 & 0xffc0fffffffULL;
  r_[1] = ((t0 >> 44) | (t1 << 20)) & 0xfffffc0ffffULL;
  r_[2] = (t1 >> 24) & 0x00ffffffc0fULL;
  pad_[0] = load64(&key[16]);
  pad_[1] = load64(&key[24]);
}

void Poly1305::blocks(const uint8_t* m, size_t bytes, uint64_t high_bit) {
  __extension__ using u128 = unsigned __int128;  // GCC and Clang on 64-bit targets
  const uint64_t r0 = r_[0], r1 = r_[1], r2 = r_[2];
  const uint64_t s1 = r1 * (5 << 2), s2 = r2 * (5 << 2);  // 2^130 = 5 (mod p), shifted to the limbs' weights
  uint64_t h0 = h_[0], h1 = h_[1], h2 = h_[2];
  for (; bytes >= 16; m += 16, bytes -= 16) {
    const uint64_t t0 = load64(m);
    const uint64_t t1 = load64(m + 8);
    h0 += t0 & kMask44;
    h1 += ((t0 >> 44) | (t1 << 20)) & kMask44;
    h2 += ((t1 >> 24) & kMask42) | high_bit;
    const u128 d0 = static_cast<u128>(h0) * r0 + static_cast<u128>(h1) * s2 + static_cast<u128>(h2) * s1;
    u128 d1 = static_cast<u128>(h0) * r1 + static_cast<u128>(h1) * r0 + static_cast<u128>(h2) * s2;
    u128 d2 = static_cast<u128>(h0) * r2 + static_cast<u128>(h1) * r1 + static_cast<u128>(h2) * r0;
    uint64_t c = static_cast<uint64_t>(d0 >> 44);
    h0 = static_cast<uint64_t>(d0) & kMask44;
    d1 += c;
    c = static_cast<uint64_t>(d1 >> 44);
    h1 = static_cast<uint64_t>(d1) & kMask44;
    d2 += c;
    c = static_cast<uint64_t>(d2 >> 42);
    h2 = static_cast<uint64_t>(d2) & kMask42;
    h0 += c * 5;
    c = h0 >> 44;
    h0 &= kMask44;
    h1 += c;
  }
  h_[0] = h0;
  h_[1] = h1;
  h_[2] = h2;
}

void Poly1305::update(const void* data, size_t bytes) {
  const auto* m = static_cast<const uint8_t*>(data);
  constexpr uint64_t kFullBlock = 1ULL << 40;  // the 2^128 bit each full 16-byte block carries
  if (buffered_ > 0) {
    const size_t take = std::min(bytes, sizeof buffer_ - buffered_);
    std::memcpy(buffer_ + buffered_, m, take);
    buffered_ += take;
    m += take;
    bytes -= take;
    if (buffered_ < sizeof buffer_) return;
    blocks(buffer_, sizeof buffer_, kFullBlock);
    buffered_ = 0;
  }
  const size_t whole = bytes & ~static_cast<size_t>(15);
  blocks(m, whole, kFullBlock);
  std::memcpy(buffer_, m + whole, bytes - whole);
  buffered_ = bytes - whole;
}

Poly1305Tag Poly1305::finish() {
  if (buffered_ > 0) {  // the last, short block: its 1 byte appended by hand, no high bit
    buffer_[buffered_] = 1;
    std::memset(buffer_ + buffered_ + 1, 0, sizeof buffer_ - buffered_ - 1);
    blocks(buffer_, sizeof buffer_, 0);
    buffered_ = 0;
  }
  uint64_t h0 = h_[0], h1 = h_[1], h2 = h_[2];
  // Carry fully, twice round.
  uint64_t c = h1 >> 44;
  h1 &= kMask44;
  for (int round = 0; round < 2; ++round) {
    h2 += c;
    c = h2 >> 42;
    h2 &= kMask42;
    h0 += c * 5;
    c = h0 >> 44;
    h0 &= kMask44;
    h1 += c;
    c = h1 >> 44;
    h1 &= kMask44;
  }
  h2 += c;
  // g = h + 5 - 2^130: taken instead of h when it is not negative (h >= p), without a branch.
  uint64_t g0 = h0 + 5;
  c = g0 >> 44;
  g0 &= kMask44;
  uint64_t g1 = h1 + c;
  c = g1 >> 44;
  g1 &= kMask44;
  uint64_t g2 = h2 + c - (1ULL << 42);
  const uint64_t take_g = (g2 >> 63) - 1;  // all ones when g2 did not borrow
  h0 = (h0 & ~take_g) | (g0 & take_g);
  h1 = (h1 & ~take_g) | (g1 & take_g);
  h2 = (h2 & ~take_g) | (g2 & take_g);
  // h + s mod 2^128.
  const uint64_t t0 = pad_[0], t1 = pad_[1];
  h0 += t0 & kMask44;
  c = h0 >> 44;
  h0 &= kMask44;
  h1 += (((t0 >> 44) | (t1 << 20)) & kMask44) + c;
  c = h1 >> 44;
  h1 &= kMask44;
  h2 += ((t1 >> 24) & kMask42) + c;
  h2 &= kMask42;
  Poly1305Tag tag{};
  store64(&tag[0], h0 | (h1 << 44));
  store64(&tag[8], (h1 >> 20) | (h2 << 24));
  return tag;
}

}  // namespace meshrun
