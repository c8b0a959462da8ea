// This host's network interfaces and addresses (getifaddrs), classified the way multi-node jobs care
// about: loopback (unreachable from other nodes), private (RFC 1918 / ULA: the usual cluster network),
// link-local, public. Also the NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME matching rules.
#pragma once

#include <string>
#include <vector>

#include "common/net_address.hpp"  // LocalAddress, list_local_addresses, route_source_address

namespace meshrun::diagnostics {

/// "loopback", "private" (10/8, 172.16/12, 192.168/16, fc00::/7), "link-local" (169.254/16, fe80::/10)
/// or "public"; "" when `address` is not numeric.
std::string address_scope(const std::string& address);

/// Every interface name (with or without addresses), from /sys/class/net or getifaddrs.
std::vector<std::string> list_interface_names();

/// The interfaces NCCL would consider for NCCL_SOCKET_IFNAME=`spec`: comma-separated prefixes,
/// "=" in front for exact names, "^" in front to exclude instead of select.
std::vector<std::string> nccl_ifname_matches(const std::string& spec, const std::vector<std::string>& names);

/// The interfaces named by GLOO_SOCKET_IFNAME=`spec` (comma-separated exact names) that exist.
std::vector<std::string> gloo_ifname_matches(const std::string& spec, const std::vector<std::string>& names);

}  // namespace meshrun::diagnostics
