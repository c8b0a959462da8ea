// Numeric addresses and the route's source address (common/net_address): the routes used here are this
// host's own (loopback); routes between networks are in tests/cluster/network_test.sh (network namespaces).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>

#include "common/net_address.hpp"
#include "tests/support/skip.hpp"

using namespace meshrun;

namespace {

bool has_ipv6_loopback() {
  const auto addresses = list_local_addresses();
  return std::any_of(addresses.begin(), addresses.end(),
                     [](const LocalAddress& a) { return a.address == "::1" && a.up; });
}

}  // namespace

TEST_CASE("a socket address reads as its numeric text, other families as nothing", "[net_address]") {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  REQUIRE(::inet_pton(AF_INET, "10.1.2.3", &v4.sin_addr) == 1);
  CHECK(numeric_address(reinterpret_cast<const sockaddr*>(&v4)) == "10.1.2.3");
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  REQUIRE(::inet_pton(AF_INET6, "fd00:1:0:0::5", &v6.sin6_addr) == 1);
  CHECK(numeric_address(reinterpret_cast<const sockaddr*>(&v6)) == "fd00:1::5");  // the canonical spelling
  sockaddr_un unix_socket{};
  unix_socket.sun_family = AF_UNIX;
  CHECK(numeric_address(reinterpret_cast<const sockaddr*>(&unix_socket)).empty());
}

TEST_CASE("numeric addresses are told from names without a lookup", "[net_address]") {
  CHECK(is_numeric_address("10.0.0.1"));
  CHECK(is_numeric_address("fd00::1"));
  CHECK(is_numeric_address("::1"));
  CHECK_FALSE(is_numeric_address("node0"));
  CHECK_FALSE(is_numeric_address("localhost"));
  CHECK_FALSE(is_numeric_address("10.0.0.1:29400"));
  CHECK_FALSE(is_numeric_address(""));
}

TEST_CASE("this host's addresses include loopback, each numeric and flagged", "[net_address]") {
  const auto addresses = list_local_addresses();
  for (const auto& a : addresses) {
    CHECK_FALSE(a.interface.empty());
    CHECK(is_numeric_address(a.address));
    CHECK((a.family == AF_INET || a.family == AF_INET6));
    CHECK(a.family == (a.address.find(':') != std::string::npos ? AF_INET6 : AF_INET));
  }
  const auto lo =
      std::find_if(addresses.begin(), addresses.end(), [](const LocalAddress& a) { return a.address == "127.0.0.1"; });
  REQUIRE(lo != addresses.end());
  CHECK(lo->loopback);
  CHECK(lo->up);
}

TEST_CASE("the route to loopback starts at loopback, a name has no route here", "[net_address]") {
  std::string error;
  CHECK(route_source_address("127.0.0.1", error) == "127.0.0.1");
  if (has_ipv6_loopback()) {
    CHECK(route_source_address("::1", error) == "::1");
  } else {
    MESHRUN_REPORT_SKIP("no IPv6 loopback on this host: the route to ::1");
  }
  CHECK_FALSE(route_source_address("node0", error));  // names are not looked up here
  CHECK_THAT(error, Catch::Contains("not a numeric address"));
  error.clear();
  CHECK_FALSE(route_source_address("nonsense", error));
  CHECK(error == "'nonsense' is not a numeric address");
}
