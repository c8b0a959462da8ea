#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "rendezvous/net/cidr.hpp"

using meshrun::rendezvous::Cidr;

TEST_CASE("flag --allow rules match peers", "[cidr]") {
  const auto net = Cidr::parse("10.200.0.0/24");
  CHECK(net.contains("10.200.0.7"));
  CHECK(net.contains("::ffff:10.200.0.7"));  // IPv4-mapped peers of a dual-stack socket
  CHECK_FALSE(net.contains("10.200.1.7"));
  CHECK(Cidr::parse("127.0.0.1").contains("127.0.0.1"));
  CHECK_FALSE(Cidr::parse("127.0.0.1").contains("127.0.0.2"));
  CHECK(Cidr::parse("0.0.0.0/0").contains("8.8.8.8"));
  CHECK(Cidr::parse("fd00::/8").contains("fd12::1"));
  CHECK_FALSE(Cidr::parse("fd00::/8").contains("10.0.0.1"));
  CHECK(meshrun::rendezvous::allowed({}, "1.2.3.4"));
}

TEST_CASE("bad --allow rules are usage errors that quote the rule", "[cidr]") {
  CHECK_THROWS_AS(Cidr::parse("10.0.0.0/33"), meshrun::UsageError);
  CHECK_THROWS_WITH(Cidr::parse("nonsense/8"), Catch::Contains("nonsense"));
  CHECK_THROWS_WITH(Cidr::parse("10.0.0.0/x"), Catch::Contains("prefix length"));
}
