#include "launcher/net/host_identity.hpp"

#include <unistd.h>

#include <cstdio>
#include <random>

#include "launcher/net/route_interface.hpp"

namespace meshrun::launcher {

std::string local_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  const std::string me = local_hostname();
  if (host == me || host == me.substr(0, me.find('.')) || me == host.substr(0, host.find('.'))) return true;
  // The endpoint's address (given, or what its name resolves to) is one of our interfaces' (compared as
  // addresses: "fd00::1" and "fd00:0::1" are the same).
  const auto interfaces = list_local_interfaces();
  for (const auto& address : host_addresses(host)) {
    if (interface_holding(address, interfaces)) return true;
  }
  return false;
}

std::string random_run_id() {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(dist(rd)));
  return buf;
}

}  // namespace meshrun::launcher
