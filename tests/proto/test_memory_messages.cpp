// The messages of copies in memory: the handover between an agent and its workers, and the copy port
// between agents. Each round-trips through its one formatter and one parser; the wire stays what the
// design names (field by field), so a worker or agent of this build reads the other's packets.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "proto/agents/copy_port_messages.hpp"
#include "proto/worker/memory_handover.hpp"

using meshrun::proto::CopyPortChallenge;
using meshrun::proto::CopyPortProof;
using meshrun::proto::CopyPortReply;
using meshrun::proto::CopyPortRequest;
using meshrun::proto::CopyShape;
using meshrun::proto::HandoverReply;
using meshrun::proto::HandoverRequest;
using nlohmann::json;

namespace {

HandoverRequest through_wire(const HandoverRequest& r) {
  return meshrun::proto::parse_handover_request(meshrun::proto::format_handover_request(r));
}
HandoverReply through_wire(const HandoverReply& r) {
  return meshrun::proto::parse_handover_reply(meshrun::proto::format_handover_reply(r));
}
template <typename Message>
Message through_frame(const Message& m) {
  return json::parse(json(m).dump()).get<Message>();
}

}  // namespace

TEST_CASE("memory handover: every request round-trips", "[proto][memory]") {
  const CopyShape shape{
      .world_size = 4, .layout = "FULL_SHARD", .slot_bytes = 1 << 20, .largest_slot_bytes = 1 << 21, .digest = 42};
  for (const auto& r :
       {HandoverRequest::hello(3, shape), HandoverRequest::begin(10), HandoverRequest::sealed(10, 1),
        HandoverRequest::commit(10), HandoverRequest::durable(10), HandoverRequest::restored(10, "memory (buddy)"),
        HandoverRequest::plan(), HandoverRequest::open(10), HandoverRequest::open(10, 2, 8)}) {
    INFO(meshrun::proto::format_handover_request(r));
    CHECK(through_wire(r) == r);
  }
  CHECK(HandoverRequest::commit(1).one_way());
  CHECK(HandoverRequest::restored(1, "storage").one_way());
  CHECK_FALSE(HandoverRequest::sealed(1, 0).one_way());
}

TEST_CASE("memory handover: every reply round-trips", "[proto][memory]") {
  for (const auto& r :
       {HandoverReply::granted(8192, 2), HandoverReply::refused("no room"), HandoverReply::busy("a copy in flight"),
        HandoverReply::lend(1), HandoverReply::kept(), HandoverReply::plan(12, {{10, 4}, {5, 8}}, ""),
        HandoverReply::plan(0, {}, "node 1 published no inventory"), HandoverReply::copy(10, 1),
        HandoverReply::copy(10, -1, 2, "node2"), HandoverReply::copy(10, 0, 0, "node0"),
        HandoverReply::error("say hello first")}) {
    INFO(meshrun::proto::format_handover_reply(r));
    CHECK(through_wire(r) == r);
  }
}

TEST_CASE("memory handover: the wire is the design's", "[proto][memory]") {
  const auto hello = json::parse(meshrun::proto::format_handover_request(HandoverRequest::hello(
      1, {.world_size = 2, .layout = "", .slot_bytes = 16384, .largest_slot_bytes = 0, .digest = 7})));
  CHECK(hello.at("op") == "hello");
  CHECK(hello.at("rank") == 1);
  CHECK(hello.at("slot_bytes") == 16384);
  CHECK(hello.at("digest") == 7);
  const auto copy = json::parse(meshrun::proto::format_handover_reply(HandoverReply::copy(5, -1, 3, "node3")));
  CHECK(copy == json{{"op", "copy"}, {"step", 5}, {"source", "node 3"}, {"host", "node3"}});
  const auto own = json::parse(meshrun::proto::format_handover_reply(HandoverReply::copy(5, 0)));
  CHECK(own == json{{"op", "copy"}, {"step", 5}, {"slot", 0}, {"source", "own"}});
  // A packet written by hand, as an older worker or a test sends it: missing fields keep their defaults.
  const auto open = meshrun::proto::parse_handover_request(R"({"op":"open","step":8})");
  CHECK(open == HandoverRequest::open(8));
}

TEST_CASE("memory handover: malformed packets name the problem", "[proto][memory]") {
  using meshrun::proto::parse_handover_reply;
  using meshrun::proto::parse_handover_request;
  CHECK_THROWS_AS(parse_handover_request("not json"), meshrun::ProtocolError);
  CHECK_THROWS_AS(parse_handover_request(R"({"step":1})"), meshrun::proto::UnknownHandoverOp);  // answered, served on
  // A field the request's kind does not use is not read, whatever it holds.
  CHECK(parse_handover_request(R"({"op":"plan","slot":"x"})") == HandoverRequest::plan());
  CHECK_THROWS_AS(parse_handover_request(R"({"op":"teleport"})"), meshrun::proto::UnknownHandoverOp);
  CHECK_THROWS_WITH(parse_handover_request(R"({"op":"begin","step":"ten"})"), Catch::Contains("malformed"));
  CHECK_THROWS_WITH(parse_handover_reply(R"({"op":"copy","step":1,"source":"node x"})"),
                    Catch::Contains("bad copy source"));
  CHECK_THROWS_AS(parse_handover_reply(R"({"op":"plan","candidates":[{"step":1}]})"), meshrun::ProtocolError);
}

TEST_CASE("copy port: every message round-trips", "[proto][memory]") {
  auto push = CopyPortRequest::push("run", 1, 10, 3, 4, 99, 8192);
  push.client_nonce = "ab";
  push.proof = "cd";
  CHECK(through_frame(push) == push);
  CHECK(through_frame(CopyPortRequest::fetch("run", 1, 10)) == CopyPortRequest::fetch("run", 1, 10));
  CHECK(through_frame(CopyPortRequest::fetch("run", 1, 10, 8)) == CopyPortRequest::fetch("run", 1, 10, 8));
  for (const auto& r : {CopyPortReply::go(), CopyPortReply::have(), CopyPortReply::ok(), CopyPortReply::ok(4096),
                        CopyPortReply::failed("no copy here"), CopyPortReply::refused()}) {
    INFO(json(r).dump());
    CHECK(through_frame(r) == r);
  }
  CHECK(through_frame(CopyPortChallenge{"n0"}) == CopyPortChallenge{"n0"});
  CHECK(through_frame(CopyPortProof{"p", false}) == CopyPortProof{"p", false});
  CHECK(through_frame(CopyPortProof{"", true}) == CopyPortProof{"", true});
}

TEST_CASE("copy port: the refusal says nothing, and odd frames name themselves", "[proto][memory]") {
  CHECK(json(CopyPortReply::refused()) == json{{"error", "refused"}});
  CHECK(json(CopyPortProof{"", true}) == json{{"error", "refused"}});
  // An answer with neither ok nor an error: the frame itself is the clue.
  const auto odd = json{{"what", 1}}.get<CopyPortReply>();
  CHECK(odd.kind == CopyPortReply::Kind::kError);
  CHECK_THAT(odd.error, Catch::Contains("what"));
  CHECK_THROWS_WITH(json({{"op", "steal"}}).get<CopyPortRequest>(), Catch::Contains("unknown op 'steal'"));
  CHECK_THROWS_AS(json({{"op", "fetch"}, {"rank", "one"}}).get<CopyPortRequest>(), meshrun::ProtocolError);
  CHECK_THROWS_AS(json::array().get<CopyPortReply>(), meshrun::ProtocolError);
}
