#include "launcher/net/route_interface.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <array>
#include <memory>
#include <utility>

#include "common/net_address.hpp"

namespace meshrun::launcher {
namespace {

// An address as its family and bytes, so "::1" and "0:0::1" compare equal; a "%scope" suffix is ignored.
struct RawAddress {
  int family = 0;
  std::array<unsigned char, 16> bytes{};
  bool operator==(const RawAddress&) const = default;
};

std::optional<RawAddress> raw_address(const std::string& text) {
  const std::string bare = text.substr(0, text.find('%'));
  RawAddress a;
  if (::inet_pton(AF_INET, bare.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET;
    return a;
  }
  if (::inet_pton(AF_INET6, bare.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET6;
    return a;
  }
  return std::nullopt;
}

using AddrInfoList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// getaddrinfo for `host`; with `numeric_only` it never asks a resolver (AI_NUMERICHOST).
AddrInfoList lookup(const std::string& host, bool numeric_only) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = numeric_only ? AI_NUMERICHOST : 0;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found);  // any port: a UDP connect only picks a route
  return AddrInfoList(rc == 0 ? found : nullptr, &::freeaddrinfo);
}

}  // namespace

std::vector<LocalAddress> list_local_interfaces() {
  std::vector<LocalAddress> out = list_local_addresses();
  std::erase_if(out, [](const LocalAddress& local) { return !local.up; });
  return out;
}

std::optional<LocalAddress> interface_holding(const std::string& address, const std::vector<LocalAddress>& interfaces) {
  const auto wanted = raw_address(address);
  if (!wanted) return std::nullopt;
  for (const auto& i : interfaces) {
    if (raw_address(i.address) == wanted) return i;
  }
  return std::nullopt;
}

std::vector<std::string> host_addresses(const std::string& host) {
  if (auto numeric = lookup(host, true)) return {host};
  auto found = lookup(host, false);
  std::vector<std::string> out;
  for (const addrinfo* ai = found.get(); ai != nullptr; ai = ai->ai_next) {
    std::string text = numeric_address(ai->ai_addr);
    if (!text.empty() && std::find(out.begin(), out.end(), text) == out.end()) out.push_back(std::move(text));
  }
  return out;
}

std::optional<LocalAddress> route_interface(const std::string& host, std::string& error) {
  const auto addresses = host_addresses(host);
  if (addresses.empty()) {
    error = "'" + host + "' does not resolve";
    return std::nullopt;
  }
  const auto interfaces = list_local_interfaces();
  for (const auto& address : addresses) {
    const auto source = route_source_address(address, error);
    if (!source) {
      error = "no route to " + address + ": " + error;
      continue;
    }
    if (auto held = interface_holding(*source, interfaces)) return held;
    error = "no interface holds " + *source + ", the source address of the route to " + address;
  }
  return std::nullopt;
}

std::optional<LocalAddress> workers_interface(const std::string& endpoint_host, const std::string& local_addr,
                                              bool single_node) {
  if (!local_addr.empty()) {
    const auto interfaces = list_local_interfaces();
    for (const auto& address : host_addresses(local_addr)) {
      const auto held = interface_holding(address, interfaces);
      if (held && (!held->loopback || single_node)) return held;
    }
    spdlog::debug("--local-addr {} is on no interface of this host: the workers' network is the route to {}",
                  local_addr, endpoint_host);
  }
  std::string error;
  auto route = route_interface(endpoint_host, error);
  if (!route) {
    spdlog::debug("no interface for the workers' network: {}", error);
    return std::nullopt;
  }
  if (route->loopback && !single_node) {
    spdlog::debug("the rendezvous {} is reached over loopback ({}), which other nodes cannot use", endpoint_host,
                  route->interface);
    return std::nullopt;
  }
  return route;
}

std::string wildcard_address_for(const std::string& host) {
  for (const auto& address : host_addresses(host)) {
    if (address.find(':') != std::string::npos) return "::";
  }
  return "0.0.0.0";
}

std::optional<std::string> own_address(const std::string& endpoint_host) {
  std::string error;
  const auto route = route_interface(endpoint_host, error);
  if (!route || route->loopback) return std::nullopt;
  return route->address;
}

}  // namespace meshrun::launcher
