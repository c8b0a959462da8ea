// Route interface: which network this node uses to reach an address. The kernel picks the route: a
// connected UDP socket and getsockname() give the local address it would send from (no packet is sent),
// and getifaddrs() names the interface that holds it. The agent uses this to put its workers' Gloo and
// NCCL on the network that reaches the rendezvous (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, unless the
// user set them), and to tell the daemon its own address without asking DNS for its host name.
// Nothing here does a reverse lookup: an address given as an address stays one.
// The socket and getifaddrs primitives are common/net_address.hpp's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/net_address.hpp"

namespace meshrun::launcher {

/// Every IPv4 and IPv6 address of every interface that is up (LocalAddress: the address and the interface
/// that holds it).
std::vector<LocalAddress> list_local_interfaces();

/// The entry of `interfaces` holding the numeric `address` (compared as addresses, not as text).
std::optional<LocalAddress> interface_holding(const std::string& address, const std::vector<LocalAddress>& interfaces);

/// `host` itself when it is a numeric address, else what the resolver gives for it (a forward lookup of
/// a name the user gave; IPv4 and IPv6, duplicates removed). Empty when the name does not resolve.
std::vector<std::string> host_addresses(const std::string& host);

/// The interface and local address that reach `host` (a name or an address; the first of its addresses
/// with a route wins). nullopt with `error` set when none does.
std::optional<LocalAddress> route_interface(const std::string& host, std::string& error);

/// The interface the workers' collectives should use: the one holding `local_addr` (--local-addr) when
/// it is an address of this host, else the one that routes to the rendezvous host `endpoint_host`. A
/// loopback interface is only returned for a job whose nodes are all this one (`single_node`): other
/// nodes could not reach it. nullopt when there is nothing to say (the workers keep their own defaults).
std::optional<LocalAddress> workers_interface(const std::string& endpoint_host, const std::string& local_addr,
                                              bool single_node);

/// The wildcard address to listen on for clients that reach this host as `host`: "::" when `host` is, or
/// resolves to, an IPv6 address (the daemon makes "::" dual-stack: IPv4 clients are served too),
/// "0.0.0.0" otherwise.
std::string wildcard_address_for(const std::string& host);

/// The address other nodes should reach this one at when --local-addr is not given: the local address
/// of the route to `endpoint_host`, or nullopt when that is loopback or there is none (the caller then
/// falls back to the host name).
std::optional<std::string> own_address(const std::string& endpoint_host);

}  // namespace meshrun::launcher
