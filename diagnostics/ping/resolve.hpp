// Name resolution with a deadline. getaddrinfo() has no timeout of its own, and a broken resolver
// would otherwise hang `meshrun ping` / `meshrun check`, which must always finish quickly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "common/net_address.hpp"  // is_numeric_address, numeric_address: the numeric side of resolving

namespace meshrun::diagnostics {

/// Every address `host` resolves to (numeric text, e.g. "10.0.0.5" or "fe80::1"), in resolver order,
/// duplicates removed. Throws proto::ConnectError(kResolve) when the name does not resolve, or when
/// the resolver has not answered after `timeout` (the message says which).
std::vector<std::string> resolve_host(const std::string& host, Duration timeout);

/// True for 127.0.0.0/8 and ::1 (and v4-mapped loopback).
bool is_loopback_address(const std::string& address);

}  // namespace meshrun::diagnostics
