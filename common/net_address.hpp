// Numeric addresses and the route's source address: the text of a socket address, whether a host is written
// as an address, this host's interface addresses (getifaddrs), and the local address the kernel's route to an
// address starts from (a connected UDP socket + getsockname: no packet is sent). Nothing here asks a resolver.
// Shared by the launcher (launcher/net/) and the diagnostics (ping, check).
#pragma once

#include <optional>
#include <string>
#include <vector>

struct sockaddr;

namespace meshrun {

/// "10.0.0.1" / "fe80::1" for an IPv4 or IPv6 socket address; "" for other families.
std::string numeric_address(const sockaddr* sa);

/// True for a numeric IPv4 or IPv6 address (no lookup needed). Strict (inet_pton): no "%scope" suffix.
bool is_numeric_address(const std::string& host);

/// One IPv4 or IPv6 address of one of this host's interfaces.
struct LocalAddress {
  std::string interface;  // "eth0"
  std::string address;    // numeric: "10.0.0.2", "fd00::2"
  int family = 0;         // AF_INET or AF_INET6
  bool up = false;        // IFF_UP
  bool loopback = false;  // IFF_LOOPBACK: only this host can reach it
};

/// Every IPv4 and IPv6 address of every interface of this host, up or not, in getifaddrs order; empty when
/// getifaddrs fails.
std::vector<LocalAddress> list_local_addresses();

/// The local address the kernel would send from to reach the numeric `address` (UDP connect + getsockname:
/// no packet is sent; an IPv6 "%scope" suffix is honoured). nullopt with `error` set when there is no route
/// (`error` is then the reason alone, e.g. "Network is unreachable": callers say what they tried to reach)
/// or `address` is not numeric.
std::optional<std::string> route_source_address(const std::string& address, std::string& error);

}  // namespace meshrun
