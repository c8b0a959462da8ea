#include "common/endpoint.hpp"

#include <charconv>

#include "common/error.hpp"

namespace meshrun {

std::string Endpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

uint16_t parse_port(std::string_view text, std::string_view what) {
  unsigned value = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value > 65535) {
    throw UsageError(std::string(what) + ": '" + std::string(text) + "' is not a port number (0-65535)");
  }
  return static_cast<uint16_t>(value);
}

Endpoint parse_endpoint(std::string_view text, uint16_t default_port) {
  Endpoint ep{.host = {}, .port = default_port};
  if (text.empty()) throw UsageError("endpoint is empty: expected HOST[:PORT]");
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      throw UsageError("endpoint '" + std::string(text) + "': missing ']' after IPv6 address");
    }
    ep.host = std::string(text.substr(1, close - 1));
    auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw UsageError("endpoint '" + std::string(text) + "': expected ':' after ']'");
      ep.port = parse_port(rest.substr(1), "endpoint " + std::string(text));
    }
  } else {
    const auto colon = text.rfind(':');
    if (colon != std::string_view::npos && text.find(':') != colon) {
      ep.host = std::string(text);  // bare IPv6 literal without port
    } else if (colon != std::string_view::npos) {
      ep.host = std::string(text.substr(0, colon));
      ep.port = parse_port(text.substr(colon + 1), "endpoint " + std::string(text));
    } else {
      ep.host = std::string(text);
    }
  }
  if (ep.host.empty()) throw UsageError("endpoint '" + std::string(text) + "' has no host: expected HOST[:PORT]");
  return ep;
}

std::string strip_brackets(std::string host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

}  // namespace meshrun
