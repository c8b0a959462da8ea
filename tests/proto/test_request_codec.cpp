#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "proto/store/byte_codec.hpp"
#include "proto/store/request.hpp"

using namespace meshrun::proto;

namespace {
Request decode_all(const std::string& bytes) {
  Request out;
  auto result = decode_request(bytes, Limits{}, out);
  REQUIRE(result.status == DecodeStatus::kComplete);
  REQUIRE(result.consumed == bytes.size());
  return out;
}

// tests/proto/pytorch_wire.txt: the bytes PyTorch's TCPStore client sends per operation ("NAME HEX" per
// line), captured from the pinned torch by pytorch_wire_capture.py (ctest proto.pytorch_wire_capture checks
// the file is still what that torch sends).
std::map<std::string, std::string> pytorch_captures() {
  std::ifstream in(MESHRUN_PYTORCH_WIRE_FIXTURE);
  REQUIRE(in.good());
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, hex, bytes;
    fields >> name >> hex;
    REQUIRE(hex.size() % 2 == 0);
    for (size_t i = 0; i < hex.size(); i += 2)
      bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    out[name] = bytes;
  }
  return out;
}

// Decodes `bytes` as a sequence of whole requests.
std::vector<Request> decode_sequence(const std::string& bytes) {
  std::vector<Request> out;
  std::string_view rest(bytes);
  while (!rest.empty()) {
    Request r;
    const auto result = decode_request(rest, Limits{}, r);
    INFO(result.error);
    REQUIRE(result.status == DecodeStatus::kComplete);
    rest.remove_prefix(result.consumed);
    out.push_back(std::move(r));
  }
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

TEST_CASE("every request PyTorch's TCPStore client sends decodes and re-encodes byte for byte", "[codec]") {
  // What each captured operation must be, written from the client call (keys get the client's "/").
  const std::map<std::string, std::vector<Request>> expected = {
      {"connect", {{QueryType::kValidate, {}, {}, kValidationMagic}, {QueryType::kPing, {}, {}, 0}}},
      {"set", {{QueryType::kSet, {"/k"}, {"v"}, 0}}},
      {"get", {{QueryType::kWait, {"/k"}, {}, 0}, {QueryType::kGet, {"/k"}, {}, 0}}},
      {"compare_set", {{QueryType::kCompareSet, {"/k"}, {"v", "w"}, 0}}},
      {"add", {{QueryType::kAdd, {"/n"}, {}, 5}}},
      {"check", {{QueryType::kCheck, {"/k", "/n"}, {}, 0}}},
      {"wait", {{QueryType::kWait, {"/k"}, {}, 0}}},
      {"wait_timeout", {{QueryType::kWait, {"/absent"}, {}, 0}, {QueryType::kCancelWait, {}, {}, 0}}},
      {"num_keys", {{QueryType::kGetNumKeys, {}, {}, 0}}},
      {"delete_key", {{QueryType::kDeleteKey, {"/k"}, {}, 0}}},
      {"append", {{QueryType::kAppend, {"/a"}, {"x"}, 0}}},
      {"multi_get", {{QueryType::kWait, {"/m1", "/m2"}, {}, 0}, {QueryType::kMultiGet, {"/m1", "/m2"}, {}, 0}}},
      {"multi_set", {{QueryType::kMultiSet, {"/m1", "/m2"}, {"1", "2"}, 0}}},
      {"queue_push", {{QueryType::kQueuePush, {"/q"}, {"item"}, 0}}},
      {"queue_pop", {{QueryType::kQueuePop, {"/q"}, {}, 0}}},
      {"queue_pop_blocking", {{QueryType::kWait, {"/q"}, {}, 0}, {QueryType::kQueuePop, {"/q"}, {}, 0}}},
      {"queue_len", {{QueryType::kQueueLen, {"/q"}, {}, 0}}},
      {"list_keys", {{QueryType::kListKeys, {}, {}, 0}}},
      {"barrier", {{QueryType::kBarrier, {"/b"}, {}, 1}}},
  };
  const auto captured = pytorch_captures();
  std::set<QueryType> covered;
  for (const auto& [name, requests] : expected) {
    INFO("operation " << name);
    REQUIRE(captured.count(name) == 1);
    std::string encoded;
    for (const auto& r : requests) encoded += encode_request(r);
    CHECK(encoded == captured.at(name));
    const auto decoded = decode_sequence(captured.at(name));
    REQUIRE(decoded.size() == requests.size());
    for (size_t i = 0; i < decoded.size(); ++i) {
      CHECK(decoded[i].type == requests[i].type);
      CHECK(decoded[i].keys == requests[i].keys);
      CHECK(decoded[i].values == requests[i].values);
      CHECK(decoded[i].number == requests[i].number);
      covered.insert(decoded[i].type);
    }
  }
  CHECK(captured.size() == expected.size());
  // Every TCPStore query type is in some capture (MESHRUN is ours; PyTorch never sends it).
  for (uint8_t t = 0; t <= static_cast<uint8_t>(QueryType::kBarrier); ++t) {
    INFO("query type " << query_name(t));
    CHECK(covered.count(static_cast<QueryType>(t)) == 1);
  }
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

TEST_CASE("a request with 100k keys decodes under the default limits, and only once it is whole", "[codec]") {
  Request wait{QueryType::kWait, {}, {}, 0};
  for (int i = 0; i < 100'000; ++i) wait.keys.push_back("rank/" + std::to_string(i));
  const std::string bytes = encode_request(wait);
  Request out;
  out.keys = {"untouched"};
  // Every prefix asks for more and leaves `out` alone (it is measured, not parsed, until complete).
  for (size_t cut : {size_t{1}, size_t{9}, bytes.size() / 2, bytes.size() - 1}) {
    CHECK(decode_request(bytes.substr(0, cut), Limits{}, out).status == DecodeStatus::kNeedMore);
  }
  CHECK(out.keys == std::vector<std::string>{"untouched"});
  const auto whole = decode_request(bytes, Limits{}, out);
  REQUIRE(whole.status == DecodeStatus::kComplete);
  CHECK(whole.consumed == bytes.size());
  CHECK(out.keys == wait.keys);
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
