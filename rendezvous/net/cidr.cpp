#include "rendezvous/net/cidr.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

#include "common/error.hpp"

namespace meshrun::rendezvous {
namespace {

// Parses an address into 16 bytes; IPv4 (and IPv4-mapped IPv6) land in the first 4 bytes with v6=false.
bool parse_address(const std::string& text, std::array<uint8_t, 16>& out, bool& v6) {
  out.fill(0);
  in_addr a4{};
  if (::inet_pton(AF_INET, text.c_str(), &a4) == 1) {
    std::memcpy(out.data(), &a4, 4);
    v6 = false;
    return true;
  }
  in6_addr a6{};
  if (::inet_pton(AF_INET6, text.c_str(), &a6) == 1) {
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(&a6, kMapped, 12) == 0) {
      std::memcpy(out.data(), reinterpret_cast<const uint8_t*>(&a6) + 12, 4);
      v6 = false;
    } else {
      std::memcpy(out.data(), &a6, 16);
      v6 = true;
    }
    return true;
  }
  return false;
}

}  // namespace

Cidr Cidr::parse(std::string_view text) {
  Cidr c;
  c.text_ = std::string(text);
  const auto slash = text.find('/');
  const std::string addr(text.substr(0, slash));
  if (!parse_address(addr, c.bytes_, c.v6_)) {
    throw UsageError("--allow '" + c.text_ + "': '" + addr + "' is not an IPv4 or IPv6 address (example: 10.0.0.0/8)");
  }
  const int max_bits = c.v6_ ? 128 : 32;
  c.bits_ = max_bits;
  if (slash != std::string_view::npos) {
    const auto bits = text.substr(slash + 1);
    auto [ptr, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), c.bits_);
    if (bits.empty() || ec != std::errc() || ptr != bits.data() + bits.size() || c.bits_ < 0 || c.bits_ > max_bits) {
      throw UsageError("--allow '" + c.text_ + "': prefix length must be 0.." + std::to_string(max_bits));
    }
  }
  return c;
}

bool Cidr::contains(const std::string& address) const {
  std::array<uint8_t, 16> peer{};
  bool v6 = false;
  if (!parse_address(address, peer, v6) || v6 != v6_) return false;
  int bits = bits_;
  for (size_t i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((peer[i] & mask) != (bytes_[i] & mask)) return false;
  }
  return true;
}

bool allowed(const std::vector<Cidr>& rules, const std::string& address) {
  if (rules.empty()) return true;
  for (const auto& rule : rules) {
    if (rule.contains(address)) return true;
  }
  return false;
}

}  // namespace meshrun::rendezvous
