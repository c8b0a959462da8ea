// The collective record a worker writes for its agent: one formatter (meshrun-trainer's ledger) and one parser
// (the agent), which also reads the Python hook's own form of a frame.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "proto/worker/collective_dump.hpp"

using meshrun::proto::CollectiveDump;
using meshrun::proto::CollectiveEntry;
using meshrun::proto::RecorderState;

TEST_CASE("collective record: round-trips, groups, entries and frames", "[proto][hang]") {
  CollectiveDump dump;
  dump.pid = 4242;
  dump.groups["0"] = {{0, 1}, 5, 4};
  dump.groups["my:pg"] = {{}, 2, 2};
  CollectiveEntry e;
  e.group = "0";
  e.seq = 5;
  e.op = "all_reduce";
  e.sizes = "[[4]]";
  e.dtypes = "Float";
  e.created_unix_ms = 1795000000000;
  e.frames = {"train.py:88 in step", "train.py:120 in main"};
  dump.entries.push_back(e);
  e.seq = 4;
  e.retired = true;
  e.frames.clear();
  dump.entries.push_back(e);
  CHECK(meshrun::proto::parse_collective_dump(meshrun::proto::format_collective_dump(dump)) == dump);
}

TEST_CASE("collective record: a recorder off or without a group says only that", "[proto][hang]") {
  for (const auto state : {RecorderState::kOff, RecorderState::kNoProcessGroup}) {
    CollectiveDump dump;
    dump.recorder = state;
    dump.pid = 7;
    const auto back = meshrun::proto::parse_collective_dump(meshrun::proto::format_collective_dump(dump));
    CHECK(back == dump);
  }
  CHECK(meshrun::proto::parse_collective_dump(R"({"fr":"off"})").recorder == RecorderState::kOff);
}

TEST_CASE("collective record: the Python hook's frames, and malformed records named", "[proto][hang]") {
  const auto dump = meshrun::proto::parse_collective_dump(
      R"({"fr":"on","groups":{"0":{"ranks":[0,1],"last_enqueued":5,"last_completed":4}},
          "entries":[{"group":"0","seq":5,"op":"all_reduce","frames":[["/job/t.py",88,"step"]]}]})");
  REQUIRE(dump.entries.size() == 1);
  CHECK(dump.entries[0].frames == std::vector<std::string>{"/job/t.py:88 in step"});
  CHECK(dump.groups.at("0").last_completed == 4);
  // A recorder word this build does not know (a newer hook's) is read as on.
  CHECK(meshrun::proto::parse_collective_dump(R"({"fr":"maybe","groups":{},"entries":[]})").recorder ==
        RecorderState::kOn);
  CHECK_THROWS_AS(meshrun::proto::parse_collective_dump(R"({"fr":"on","groups":{}})"), meshrun::ProtocolError);
  CHECK_THROWS_AS(meshrun::proto::parse_collective_dump("{not json"), meshrun::ProtocolError);
}
