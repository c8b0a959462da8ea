#include <catch2/catch.hpp>

#include "proto/byte_codec.hpp"
#include "proto/request.hpp"

using namespace meshrun::proto;

namespace {
Request decode_all(const std::string& bytes) {
  Request out;
  auto result = decode_request(bytes, Limits{}, out);
  REQUIRE(result.status == DecodeStatus::kComplete);
  REQUIRE(result.consumed == bytes.size());
  return out;
}
}  // namespace

TEST_CASE("every query type survives an encode/decode round trip", "[codec]") {
  std::vector<Request> requests = {
      {QueryType::kValidate, {}, {}, kValidationMagic},
      {QueryType::kSet, {"/k"}, {"value"}, 0},
      {QueryType::kCompareSet, {"/k"}, {"old", "new"}, 0},
      {QueryType::kGet, {"/k"}, {}, 0},
      {QueryType::kAdd, {"/counter"}, {}, -42},
      {QueryType::kCheck, {"/a", "/b"}, {}, 0},
      {QueryType::kWait, {"/a"}, {}, 0},
      {QueryType::kGetNumKeys, {}, {}, 0},
      {QueryType::kDeleteKey, {"/k"}, {}, 0},
      {QueryType::kAppend, {"/k"}, {"more"}, 0},
      {QueryType::kMultiGet, {"/a", "/b", "/c"}, {}, 0},
      {QueryType::kMultiSet, {"/a", "/b"}, {"1", "2"}, 0},
      {QueryType::kCancelWait, {}, {}, 0},
      {QueryType::kPing, {}, {}, 1234},
      {QueryType::kQueuePush, {"/q"}, {"item"}, 0},
      {QueryType::kQueuePop, {"/q"}, {}, 0},
      {QueryType::kQueueLen, {"/q"}, {}, 0},
      {QueryType::kListKeys, {}, {}, 0},
      {QueryType::kBarrier, {"/b"}, {}, 4},
      {QueryType::kMeshrun, {}, {R"({"op":"hello"})"}, 0},
  };
  for (const auto& r : requests) {
    INFO(query_name(static_cast<uint8_t>(r.type)));
    const auto decoded = decode_all(encode_request(r));
    CHECK(decoded.type == r.type);
    CHECK(decoded.keys == r.keys);
    CHECK(decoded.values == r.values);
    CHECK(decoded.number == r.number);
  }
}

TEST_CASE("the wire bytes match PyTorch's TCPStore client", "[codec]") {
  // Captured from torch 2.15: set("k", "v") -> 01 | u64 2 | "/k" | u64 1 | "v"
  const std::string expected("\x01\x02\0\0\0\0\0\0\0/k\x01\0\0\0\0\0\0\0v", 20);
  CHECK(encode_request({QueryType::kSet, {"/k"}, {"v"}, 0}) == expected);
  // validate: 00 | CE F7 85 3C
  CHECK(encode_request({QueryType::kValidate, {}, {}, kValidationMagic}) == std::string("\x00\xCE\xF7\x85\x3C", 5));
}

TEST_CASE("a request split at every byte needs more, then completes", "[codec]") {
  const auto bytes = encode_request({QueryType::kMultiSet, {"/a", "/bb"}, {"1", "22"}, 0});
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    Request out;
    auto result = decode_request(std::string_view(bytes).substr(0, cut), Limits{}, out);
    INFO("cut at " << cut);
    CHECK(result.status == DecodeStatus::kNeedMore);
  }
  CHECK(decode_all(bytes).keys.size() == 2);
}

TEST_CASE("two pipelined requests decode one at a time", "[codec]") {
  const auto a = encode_request({QueryType::kPing, {}, {}, 7});
  const auto b = encode_request({QueryType::kGet, {"/x"}, {}, 0});
  Request out;
  auto first = decode_request(a + b, Limits{}, out);
  REQUIRE(first.status == DecodeStatus::kComplete);
  CHECK(first.consumed == a.size());
  CHECK(out.type == QueryType::kPing);
}

TEST_CASE("malformed and oversized requests are rejected before allocating", "[codec]") {
  Limits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 32;
  limits.max_key_count = 3;
  Request out;
  SECTION("unknown query type") {
    auto r = decode_request(std::string(1, '\x7f'), limits, out);
    CHECK(r.status == DecodeStatus::kMalformed);
    CHECK_THAT(r.error, Catch::Contains("unknown query type 127"));
  }
  SECTION("key longer than the limit, even if its bytes never arrive") {
    ByteWriter w;
    w.put_u8(static_cast<uint8_t>(QueryType::kGet));
    w.put_u64(uint64_t{1} << 40);  // a terabyte key
    auto r = decode_request(w.bytes(), limits, out);
    CHECK(r.status == DecodeStatus::kMalformed);
    CHECK_THAT(r.error, Catch::Contains("limit"));
  }
  SECTION("value over the limit") {
    auto r = decode_request(encode_request({QueryType::kSet, {"/k"}, {std::string(33, 'x')}, 0}), limits, out);
    CHECK(r.status == DecodeStatus::kMalformed);
  }
  SECTION("too many keys") {
    auto r = decode_request(encode_request({QueryType::kCheck, {"a", "b", "c", "d"}, {}, 0}), limits, out);
    CHECK(r.status == DecodeStatus::kMalformed);
    CHECK_THAT(r.error, Catch::Contains("key count 4"));
  }
}
