#include "diagnostics/ping/resolve.hpp"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "common/net_address.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::diagnostics {
namespace {

// One asynchronous lookup (glibc getaddrinfo_a). It lives on the heap because a lookup that timed
// out and could not be cancelled still writes into it from glibc's resolver thread.
struct Lookup {
  std::string host;
  addrinfo hints{};
  gaicb request{};
};

}  // namespace

bool is_loopback_address(const std::string& address) {
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, address.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

std::vector<std::string> resolve_host(const std::string& host, Duration timeout) {
  using proto::ConnectError;
  using proto::ConnectFailure;
  auto lookup = std::make_unique<Lookup>();
  lookup->host = host;
  lookup->hints.ai_family = AF_UNSPEC;
  lookup->hints.ai_socktype = SOCK_STREAM;
  lookup->request.ar_name = lookup->host.c_str();
  lookup->request.ar_request = &lookup->hints;
  gaicb* list[1] = {&lookup->request};
  if (const int rc = ::getaddrinfo_a(GAI_NOWAIT, list, 1, nullptr); rc != 0) {
    throw ConnectError(ConnectFailure::kResolve, "cannot resolve host '" + host + "': " + ::gai_strerror(rc));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = EAI_INPROGRESS;
  while ((status = ::gai_error(&lookup->request)) == EAI_INPROGRESS) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= Duration::zero()) break;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec wait{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    const gaicb* const pending[1] = {&lookup->request};
    ::gai_suspend(pending, 1, &wait);
  }
  if (status == EAI_INPROGRESS) {
    if (::gai_cancel(&lookup->request) != EAI_CANCELED) {
      // NOTE: still running inside glibc; leaking this one small block is the price of not hanging.
      (void)lookup.release();
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", to_seconds(timeout));
    throw ConnectError(ConnectFailure::kResolve, "cannot resolve host '" + host +
                                                     "': the resolver did not answer within " + secs +
                                                     " s (check /etc/resolv.conf and the DNS server; an IP "
                                                     "address avoids DNS)");
  }
  if (status != 0) {
    throw ConnectError(ConnectFailure::kResolve, "cannot resolve host '" + host + "': " + ::gai_strerror(status) +
                                                     " (check the name, /etc/hosts or DNS; an IP address avoids DNS)");
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> found(lookup->request.ar_result, &::freeaddrinfo);
  std::vector<std::string> out;
  for (const addrinfo* ai = found.get(); ai != nullptr; ai = ai->ai_next) {
    std::string text = numeric_address(ai->ai_addr);
    if (!text.empty() && std::find(out.begin(), out.end(), text) == out.end()) out.push_back(std::move(text));
  }
  if (out.empty()) throw ConnectError(ConnectFailure::kResolve, "host '" + host + "' resolves to no IPv4/IPv6 address");
  return out;
}

}  // namespace meshrun::diagnostics
