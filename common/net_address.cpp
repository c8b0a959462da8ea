#include "common/net_address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common/unique_fd.hpp"

namespace meshrun {

std::string numeric_address(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

bool is_numeric_address(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

std::vector<LocalAddress> list_local_addresses() {
  std::vector<LocalAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> guard(list, &::freeifaddrs);
  for (const ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr) continue;
    const int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    out.push_back(LocalAddress{.interface = ifa->ifa_name,
                               .address = numeric_address(ifa->ifa_addr),
                               .family = family,
                               .up = (ifa->ifa_flags & IFF_UP) != 0,
                               .loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0});
  }
  return out;
}

std::optional<std::string> route_source_address(const std::string& address, std::string& error) {
  // AI_NUMERICHOST: never a resolver; unlike inet_pton it reads a "%scope" suffix into sin6_scope_id.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.c_str(), "9", &hints, &found) != 0) {  // any port: a UDP connect only picks a route
    error = "'" + address + "' is not a numeric address";
    return std::nullopt;
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> target(found, &::freeaddrinfo);
  UniqueFd fd(::socket(target->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    error = std::string("socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  // connect() on a UDP socket sends nothing: it only asks the kernel for the route and source address.
  if (::connect(fd.get(), target->ai_addr, target->ai_addrlen) != 0) {
    error = std::strerror(errno);
    return std::nullopt;
  }
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    error = std::string("getsockname: ") + std::strerror(errno);
    return std::nullopt;
  }
  return numeric_address(reinterpret_cast<const sockaddr*>(&local));
}

}  // namespace meshrun
