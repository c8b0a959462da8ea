// The rendezvous message enums travel as the same JSON strings as before they were typed.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

using namespace meshrun;
using namespace meshrun::proto;
using nlohmann::json;

TEST_CASE("each enum keeps its wire name in both directions", "[messages]") {
  for (auto [value, name] : {std::pair{AwaitStatus::kWaiting, "waiting"}, std::pair{AwaitStatus::kAssigned, "assigned"},
                             std::pair{AwaitStatus::kFailed, "failed"}}) {
    CHECK(to_string(value) == name);
    CHECK(from_string<AwaitStatus>(name) == value);
  }
  for (auto [value, name] :
       {std::pair{HeartbeatAction::kContinue, "continue"}, std::pair{HeartbeatAction::kRestart, "restart"},
        std::pair{HeartbeatAction::kFail, "fail"}}) {
    CHECK(to_string(value) == name);
    CHECK(from_string<HeartbeatAction>(name) == value);
  }
  for (auto [value, name] :
       {std::pair{RestartCause::kNone, ""}, std::pair{RestartCause::kNodeLost, "node_lost"},
        std::pair{RestartCause::kWorkerFailed, "worker_failed"}, std::pair{RestartCause::kNodeLeft, "node_left"},
        std::pair{RestartCause::kScaleUp, "scale_up"}}) {
    CHECK(to_string(value) == name);
    CHECK(from_string<RestartCause>(name) == value);
  }
  for (auto [value, name] : {std::pair{RunState::kOpen, "open"}, std::pair{RunState::kClosed, "closed"},
                             std::pair{RunState::kFinished, "finished"}, std::pair{RunState::kFailed, "failed"}}) {
    CHECK(to_string(value) == name);
    CHECK(from_string<RunState>(name) == value);
  }
}

TEST_CASE("a heartbeat reply serialises to the same JSON as with string fields", "[messages]") {
  HeartbeatReply beat;
  beat.round = 2;
  beat.action = HeartbeatAction::kRestart;
  beat.reason = "b left";
  beat.cause = RestartCause::kNodeLeft;
  constexpr auto kNoProbe = R"("arrival_probe":{"first_seq":0,"group":"","last_seq":0})";
  constexpr auto kNoRecovery =
      R"("recovered_round":0,"recovery":{"complete":false,"detect_s":-1.0,"first_step_s":-1.0,"init_s":-1.0,)"
      R"("load_s":-1.0,"load_source":"","rendezvous_s":-1.0,"start_s":-1.0,"stop_s":-1.0,"total_s":-1.0},)";
  CHECK(json(beat).dump() == std::string(R"({"action":"restart",)") + kNoProbe +
                                 R"(,"cause":"node_left","reason":"b left",)" + kNoRecovery +
                                 R"("round":2,"server_unix_ns":0,"slow_nodes":"","stragglers":[],"waiting_nodes":0})");
  CHECK(json(HeartbeatReply{}).dump() ==
        std::string(R"({"action":"continue",)") + kNoProbe + R"(,"cause":"","reason":"",)" + kNoRecovery +
            R"("round":0,"server_unix_ns":0,"slow_nodes":"","stragglers":[],"waiting_nodes":0})");
  const auto back = json::parse(json(beat).dump()).get<HeartbeatReply>();
  CHECK(back.action == HeartbeatAction::kRestart);
  CHECK(back.cause == RestartCause::kNodeLeft);
}

TEST_CASE("missing enum members keep their defaults", "[messages]") {
  const auto beat = json::parse(R"({"round":1})").get<HeartbeatReply>();
  CHECK(beat.action == HeartbeatAction::kContinue);
  CHECK(beat.cause == RestartCause::kNone);
  CHECK(json::parse("{}").get<AwaitReply>().status == AwaitStatus::kWaiting);
}

TEST_CASE("an unknown enum string is refused with a clear protocol error", "[messages]") {
  CHECK_THROWS_MATCHES(json::parse(R"({"action":"explode"})").get<HeartbeatReply>(), ProtocolError,
                       Catch::Message("unknown heartbeat action 'explode' in a rendezvous message (known: "
                                      "'continue', 'restart', 'fail'; is the peer another meshrun version?)"));
  CHECK_THROWS_AS(json::parse(R"({"status":"pending"})").get<AwaitReply>(), ProtocolError);
  CHECK_THROWS_AS(json::parse(R"({"state":3})").get<RunStatus>(), ProtocolError);
  CHECK_THROWS_AS(from_string<RestartCause>("node_died"), ProtocolError);
  CHECK_THROWS_AS(json::parse(R"({"measure":"vibes"})").get<Straggler>(), ProtocolError);
  CHECK(json::parse(R"({"measure":"arrivals"})").get<Straggler>().measure == StragglerMeasure::kArrivals);
}
