// Endpoint: a "HOST[:PORT]" pair as users write it on the command line ("[::1]:29400" for IPv6).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meshrun {

struct Endpoint {
  std::string host;
  uint16_t port = 0;

  /// "host:port", with brackets around IPv6 literals.
  std::string to_string() const;
};

/// Parses "HOST", "HOST:PORT", "[V6]" or "[V6]:PORT"; a missing port becomes `default_port`.
/// Throws UsageError naming the text when it is malformed.
Endpoint parse_endpoint(std::string_view text, uint16_t default_port);

/// "[fd00::1]" -> "fd00::1": a bracketed IPv6 address as in an endpoint, where the brackets only separate
/// it from a port; anything else is returned as it is.
std::string strip_brackets(std::string host);

/// Parses a port number 0..65535; throws UsageError that names `what` when it is not one.
uint16_t parse_port(std::string_view text, std::string_view what);

}  // namespace meshrun
