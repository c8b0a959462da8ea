// Route interface (launcher/net/): which local interface and address reach an address, found through
// the kernel's routing (UDP connect + getsockname) and getifaddrs. The routes used here are this host's
// own: loopback, and whatever address its interfaces hold. Multi-network cases are in
// tests/cluster/network_test.sh (network namespaces).
#include <catch2/catch.hpp>

#include "launcher/net/host_identity.hpp"
#include "launcher/net/route_interface.hpp"
#include "tests/support/skip.hpp"

using meshrun::LocalAddress;
using namespace meshrun::launcher;

namespace {

bool has_ipv6_loopback() { return interface_holding("::1", list_local_interfaces()).has_value(); }

// An address of a non-loopback interface of this host, or "" when it has none (a bare container).
std::string non_loopback_address() {
  for (const auto& i : list_local_interfaces()) {
    if (!i.loopback && i.address.rfind("fe80:", 0) != 0) return i.address;
  }
  return "";
}

}  // namespace

TEST_CASE("interface_holding compares addresses, not their text", "[route_interface]") {
  const std::vector<LocalAddress> interfaces = {
      {.interface = "lo", .address = "127.0.0.1", .loopback = true},
      {.interface = "eth0", .address = "10.1.2.3", .loopback = false},
      {.interface = "eth1", .address = "fd00:1::5", .loopback = false},
  };
  CHECK(interface_holding("10.1.2.3", interfaces).value().interface == "eth0");
  CHECK(interface_holding("fd00:1:0:0::5", interfaces).value().interface == "eth1");  // another spelling of fd00:1::5
  CHECK(interface_holding("FD00:1::5", interfaces).value().interface == "eth1");
  CHECK(interface_holding("fd00:1::5%eth1", interfaces).value().interface ==
        "eth1");  // a scope suffix is not the address
  CHECK(interface_holding("127.0.0.1", interfaces).value().loopback);
  CHECK_FALSE(interface_holding("10.1.2.4", interfaces));
  CHECK_FALSE(interface_holding("node0", interfaces));  // names are not looked up here
  CHECK_FALSE(interface_holding("10.1.2.3", {}));
}

TEST_CASE("an address is its own address: no resolver is asked", "[route_interface]") {
  CHECK(host_addresses("10.9.8.7") == std::vector<std::string>{"10.9.8.7"});
  CHECK(host_addresses("fd31::1") == std::vector<std::string>{"fd31::1"});
  CHECK(host_addresses("no-such-host.invalid").empty());  // .invalid never resolves (RFC 6761)
  const auto local = host_addresses("localhost");
  CHECK_FALSE(local.empty());
}

TEST_CASE("the route to a loopback address is the loopback interface", "[route_interface]") {
  std::string error;
  const auto v4 = route_interface("127.0.0.1", error);
  REQUIRE(v4);
  CHECK(v4->loopback);
  CHECK(v4->address == "127.0.0.1");
  if (has_ipv6_loopback()) {
    const auto v6 = route_interface("::1", error);
    REQUIRE(v6);
    CHECK(v6->loopback);
    CHECK(v6->address == "::1");
    CHECK(v6->interface == v4->interface);
  } else {
    MESHRUN_REPORT_SKIP("no IPv6 loopback on this host: the route to ::1");
  }
  CHECK_FALSE(route_interface("no-such-host.invalid", error));
  CHECK_THAT(error, Catch::Contains("does not resolve"));
}

TEST_CASE("this host's own address routes through loopback but belongs to its interface", "[route_interface]") {
  const std::string mine = non_loopback_address();
  if (mine.empty()) MESHRUN_SKIP_OR_FAIL("no non-loopback address on this host");
  std::string error;
  const auto route = route_interface(mine, error);
  REQUIRE(route);
  CHECK(route->address == mine);
  CHECK_FALSE(route->loopback);  // the interface that holds it (eth0, ...), not "lo"
  CHECK(route->interface == interface_holding(mine, list_local_interfaces()).value().interface);
  CHECK(own_address(mine) == mine);
  CHECK(is_local_host(mine));
}

TEST_CASE("the workers' network: loopback only when the whole job is on this node", "[route_interface]") {
  const auto single = workers_interface("127.0.0.1", "", /*single_node=*/true);
  REQUIRE(single);
  CHECK(single->loopback);
  CHECK_FALSE(workers_interface("127.0.0.1", "", /*single_node=*/false));  // other nodes cannot use it
  CHECK_FALSE(workers_interface("no-such-host.invalid", "", false));
  // --local-addr names the interface when it is one of ours; when it is not, the route decides.
  CHECK(workers_interface("127.0.0.1", "127.0.0.1", true).value().interface == single->interface);
  CHECK(workers_interface("127.0.0.1", "203.0.113.77", true).value().interface ==
        single->interface);  // TEST-NET-3: not ours
  const std::string mine = non_loopback_address();
  if (!mine.empty()) {
    const auto held = workers_interface("127.0.0.1", mine, false);
    REQUIRE(held);
    CHECK(held->address == mine);
  } else {
    MESHRUN_REPORT_SKIP("no non-loopback address on this host: --local-addr naming one of ours");
  }
  CHECK_FALSE(own_address("127.0.0.1"));  // no address other nodes could use: the caller uses the host name
}

TEST_CASE("the hosting agent listens on :: for an IPv6 endpoint, on 0.0.0.0 for an IPv4 one", "[route_interface]") {
  CHECK(wildcard_address_for("10.0.0.1") == "0.0.0.0");
  CHECK(wildcard_address_for("fd31::1") == "::");
  CHECK(wildcard_address_for("::1") == "::");
  CHECK(wildcard_address_for("no-such-host.invalid") == "0.0.0.0");
  CHECK(is_local_host("::1"));
  if (has_ipv6_loopback()) {
    CHECK(is_local_host("0:0::1"));  // loopback however it is spelled
  } else {
    MESHRUN_REPORT_SKIP("no IPv6 loopback on this host: ::1 spelled 0:0::1");
  }
  CHECK_FALSE(is_local_host("203.0.113.77"));
}
