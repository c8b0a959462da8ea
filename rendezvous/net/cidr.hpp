// Cidr: one --allow rule ("10.0.0.0/8", "127.0.0.1", "::1/128") and the match against a peer address.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshrun::rendezvous {

class Cidr {
 public:
  /// Parses "ADDR[/BITS]"; throws UsageError naming the text when it is not a valid CIDR.
  static Cidr parse(std::string_view text);
  /// True when `address` (textual IPv4 or IPv6, IPv4-mapped IPv6 included) lies inside.
  bool contains(const std::string& address) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  bool v6_ = false;
  std::array<uint8_t, 16> bytes_{};
  int bits_ = 0;
};

/// True when `rules` is empty or any rule contains `address`.
bool allowed(const std::vector<Cidr>& rules, const std::string& address);

}  // namespace meshrun::rendezvous
