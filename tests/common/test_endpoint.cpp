#include <catch2/catch.hpp>

#include "common/endpoint.hpp"
#include "common/error.hpp"

using meshrun::parse_endpoint;
using meshrun::UsageError;

TEST_CASE("endpoints parse as users write them", "[endpoint]") {
  SECTION("host only takes the default port") {
    auto ep = parse_endpoint("node0", 29400);
    CHECK(ep.host == "node0");
    CHECK(ep.port == 29400);
  }
  SECTION("host and port") {
    auto ep = parse_endpoint("10.0.0.1:1234", 29400);
    CHECK(ep.host == "10.0.0.1");
    CHECK(ep.port == 1234);
    CHECK(ep.to_string() == "10.0.0.1:1234");
  }
  SECTION("bracketed IPv6 with and without port") {
    CHECK(parse_endpoint("[::1]:5", 7).port == 5);
    CHECK(parse_endpoint("[::1]", 7).port == 7);
    CHECK(parse_endpoint("[::1]", 7).host == "::1");
    CHECK(parse_endpoint("[::1]:5", 7).to_string() == "[::1]:5");
  }
  SECTION("bare IPv6 literal") { CHECK(parse_endpoint("fe80::1", 9).host == "fe80::1"); }
}

TEST_CASE("malformed endpoints are refused with the text named", "[endpoint]") {
  CHECK_THROWS_AS(parse_endpoint("", 1), UsageError);
  CHECK_THROWS_WITH(parse_endpoint("host:99999", 1), Catch::Contains("host:99999"));
  CHECK_THROWS_WITH(parse_endpoint("host:abc", 1), Catch::Contains("not a port"));
  CHECK_THROWS_WITH(parse_endpoint(":80", 1), Catch::Contains("no host"));
  CHECK_THROWS_WITH(parse_endpoint("[::1", 1), Catch::Contains("]"));
}
