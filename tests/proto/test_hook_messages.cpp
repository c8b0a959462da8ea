// proto/hook_messages: the agent's parser and formatter on the lines meshrun's Python hook really writes and
// reads (hook_lines.txt, checked against the hook by proto.hook_lines_capture), and round trips of every kind.
#include "proto/worker/hook_messages.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <string>

#include "common/error.hpp"

namespace meshrun::proto {
namespace {

std::map<std::string, std::string> fixture_lines() {
  std::ifstream in(MESHRUN_HOOK_LINES_FIXTURE);
  REQUIRE(in.good());
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    out[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return out;
}

HookMessage round_trip(const HookMessage& m) { return parse_hook_message(format_hook_message(m)); }

}  // namespace

TEST_CASE("the agent reads every line the Python hook writes as the hook means it", "[hook_messages]") {
  auto lines = fixture_lines();
  using Kind = HookMessage::Kind;

  const HookMessage hello = parse_hook_message(lines.at("hello"));
  CHECK(hello.kind == Kind::kHello);
  CHECK(hello.pid == 4242);
  CHECK(hello.recorder_on);
  CHECK_FALSE(parse_hook_message(lines.at("hello_off")).recorder_on);

  const HookMessage status = parse_hook_message(lines.at("status"));
  REQUIRE(status.kind == Kind::kStatus);
  CHECK(status.groups == std::map<std::string, HookMessage::Group>{{"0", {12, 11}}, {"pg:with:colons", {3, 3}}});
  CHECK(parse_hook_message(lines.at("status_empty")).groups.empty());

  const HookMessage clock = parse_hook_message(lines.at("clock"));
  CHECK(clock.kind == Kind::kClock);
  CHECK(clock.sent_ns == 1700000000000000000);
  CHECK(clock.remote_ns == 1700000000000123456);

  const HookMessage arrivals = parse_hook_message(lines.at("arrivals"));
  CHECK(arrivals.kind == Kind::kArrivals);
  CHECK(arrivals.arrivals == ArrivalAnswer{"group with spaces", 5, 9, 5, 1700000000000000000, 2000000});

  const HookMessage frames = parse_hook_message(lines.at("frames"));
  CHECK(frames.kind == Kind::kFrames);
  CHECK(frames.frames ==
        std::vector<std::string>{"/job/train.py:14 in save", "/usr/lib/python3.11/threading.py:320 in wait"});
  CHECK(frames.where == "save at train.py:14");

  const HookMessage dumped = parse_hook_message(lines.at("dumped"));
  CHECK(dumped.kind == Kind::kDumped);
  CHECK(dumped.text == "/tmp/meshrun-progress-x/dump 0.json");
  const HookMessage failed = parse_hook_message(lines.at("failed"));
  CHECK(failed.kind == Kind::kFailed);
  CHECK(failed.text == "OSError: [Errno 28] No space left on device");

  // What the agent writes of each, read back, is the same message (the trainer's reporter writes these).
  for (const char* name :
       {"hello", "hello_off", "status", "status_empty", "clock", "arrivals", "frames", "dumped", "failed"}) {
    const HookMessage m = parse_hook_message(lines.at(name));
    CHECK(round_trip(m) == m);
  }
}

TEST_CASE("the agent writes its requests byte for byte as the Python hook reads them", "[hook_messages]") {
  const auto lines = fixture_lines();
  using Kind = HookRequest::Kind;
  const HookRequest dump = HookRequest::dump("/tmp/meshrun-progress-x/dump 0.json");
  const HookRequest clock = HookRequest::clock(1700000000000000000);
  const HookRequest arrivals = HookRequest::arrivals(5, 9, "group with spaces");
  const HookRequest frames = HookRequest::frames();
  CHECK(dump.kind == Kind::kDump);
  CHECK(frames.kind == Kind::kFrames);
  CHECK(format_hook_request(dump) == lines.at("request_dump"));
  CHECK(format_hook_request(clock) == lines.at("request_clock"));
  CHECK(format_hook_request(arrivals) == lines.at("request_arrivals"));
  CHECK(format_hook_request(frames) == lines.at("request_frames"));
  for (const HookRequest& r : {dump, clock, arrivals, frames}) CHECK(parse_hook_request(format_hook_request(r)) == r);
}

TEST_CASE("a malformed hook line or request is refused with what is wrong", "[hook_messages]") {
  CHECK_FALSE(is_hook_message("step 3 train"));  // a progress beat
  CHECK_THROWS_AS(parse_hook_message("fr status 0:1"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_message("fr status 0:x:1"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_message("fr clock 1"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_message("fr arrivals 1 2 3 4 5"), ProtocolError);  // no group
  CHECK_THROWS_AS(parse_hook_message("fr frames [1, 2]"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_message("fr nonsense"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_request("dump"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_request("clock soon"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_request("arrivals 5 9"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_request("frames please"), ProtocolError);
  // A hello with fields this agent does not know yet still reads.
  CHECK(parse_hook_message("fr hello pid=7 fr=on gpu=0").pid == 7);
}

}  // namespace meshrun::proto
