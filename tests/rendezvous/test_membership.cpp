// Rendezvous rounds driven by a FakeClock: no sleeps, every deadline is advanced explicitly.
#include <catch2/catch.hpp>

#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "proto/worker/progress_beat.hpp"
#include "rendezvous/http/metrics.hpp"
#include "rendezvous/membership.hpp"

using namespace meshrun;
using meshrun::rendezvous::Membership;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {
proto::JoinRequest node(const std::string& host, int min_nodes, int max_nodes, int workers = 2, int rank = -1) {
  proto::JoinRequest r;
  r.run_id = "job";
  r.host = host;
  r.addr = host;
  r.local_world_size = workers;
  r.min_nodes = min_nodes;
  r.max_nodes = max_nodes;
  r.requested_rank = rank;
  r.last_call_timeout_s = 5;
  r.join_timeout_s = 60;
  r.keep_alive_timeout_s = 3;
  r.pid = 100;
  return r;
}
}  // namespace

TEST_CASE("a fixed-size round closes when every node joined and ranks are consistent", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  const auto b = m.join(node("host-b", 2, 2, 3));
  CHECK(m.poll("job", b).status == proto::AwaitStatus::kWaiting);
  CHECK(m.poll("job", b).missing_ranks == std::vector<int>{1});
  const auto a = m.join(node("host-a", 2, 2, 2));
  const auto ra = m.poll("job", a);
  const auto rb = m.poll("job", b);
  REQUIRE(ra.status == proto::AwaitStatus::kAssigned);
  REQUIRE(rb.status == proto::AwaitStatus::kAssigned);
  // Sorted by host: host-a is node 0 with ranks 0-1, host-b node 1 with ranks 2-4.
  CHECK(ra.assignment.group_rank == 0);
  CHECK(rb.assignment.group_rank == 1);
  CHECK(ra.assignment.rank_offset == 0);
  CHECK(rb.assignment.rank_offset == 2);
  CHECK(ra.assignment.world_size == 5);
  CHECK(rb.assignment.group_world_size == 2);
}

TEST_CASE("requested node ranks are honoured and duplicates name both hosts", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("host-a", 2, 2, 1, 1));
  CHECK_THROWS_WITH(m.join(node("host-c", 2, 2, 1, 1)),
                    Catch::Contains("node rank 1") && Catch::Contains("host-a") && Catch::Contains("host-c"));
  CHECK(m.status("job").at(0).duplicate_ranks.size() == 1);
  const auto b = m.join(node("host-b", 2, 2, 1, 0));
  CHECK(m.poll("job", a).assignment.group_rank == 1);
  CHECK(m.poll("job", b).assignment.group_rank == 0);
}

TEST_CASE("an elastic round closes after the last call once min nodes joined", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("a", 2, 4));
  clock.advance(seconds(1));
  const auto b = m.join(node("b", 2, 4));
  m.tick();
  CHECK(m.poll("job", a).status == proto::AwaitStatus::kWaiting);
  clock.advance(seconds(4));  // last call is 5 s after the second join
  m.tick();
  CHECK(m.poll("job", a).status == proto::AwaitStatus::kWaiting);
  clock.advance(seconds(2));
  m.tick();
  CHECK(m.poll("job", b).status == proto::AwaitStatus::kAssigned);
  CHECK(m.poll("job", b).assignment.group_world_size == 2);
}

TEST_CASE("a node that joins a closed round waits and is admitted at the next round", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("a", 1, 2));
  clock.advance(seconds(6));
  m.tick();
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  const auto late = m.join(node("z", 1, 2));
  CHECK(m.poll("job", late).status == proto::AwaitStatus::kWaiting);
  auto hb = m.heartbeat("job", a);
  CHECK(hb.action == proto::HeartbeatAction::kRestart);
  CHECK_THAT(hb.reason, Catch::Contains("z") && Catch::Contains("waiting"));
  CHECK(hb.round == 1);
  const auto a2 = m.join(node("a", 1, 2));  // the survivor re-joins
  CHECK(m.poll("job", a2).status == proto::AwaitStatus::kAssigned);
  CHECK(m.poll("job", late).status == proto::AwaitStatus::kAssigned);
  CHECK(m.poll("job", late).assignment.group_world_size == 2);
}

TEST_CASE("a silent node is declared dead and survivors re-rendezvous", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("a", 1, 2));
  const auto b = m.join(node("b", 1, 2));
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  for (int i = 0; i < 3; ++i) {
    clock.advance(seconds(1));
    CHECK(m.heartbeat("job", a).action == proto::HeartbeatAction::kContinue);  // only a keeps beating
    m.tick();
  }
  clock.advance(milliseconds(500));
  m.heartbeat("job", a);
  m.tick();
  const auto hb = m.heartbeat("job", a);
  CHECK(hb.action == proto::HeartbeatAction::kRestart);
  CHECK_THAT(hb.reason, Catch::Contains("node 1") && Catch::Contains("b") && Catch::Contains("dead"));
  const auto a2 = m.join(node("a", 1, 2));
  CHECK(m.poll("job", a2).status == proto::AwaitStatus::kAssigned);  // the only survivor is back: close at once
  CHECK(m.poll("job", a2).assignment.world_size == 2);
  (void)b;
}

TEST_CASE("when fewer than min nodes survive a death the run fails naming the dead node", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("a", 2, 2));
  const auto b = m.join(node("b", 2, 2));
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  clock.advance(seconds(2));
  m.heartbeat("job", a);
  clock.advance(seconds(2));
  m.heartbeat("job", a);
  m.tick();
  const auto hb = m.heartbeat("job", a);
  CHECK(hb.action == proto::HeartbeatAction::kFail);
  CHECK_THAT(hb.reason, Catch::Contains("b (pid 100) is dead") && Catch::Contains("fewer than the minimum of 2"));
  CHECK(m.poll("job", b).status == proto::AwaitStatus::kFailed);
}

TEST_CASE("a worker failure reported by one node restarts every node", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("a", 2, 2));
  const auto b = m.join(node("b", 2, 2));
  m.report_failure("job", b, "rank 3 exited with code 3");
  const auto hb = m.heartbeat("job", a);
  CHECK(hb.action == proto::HeartbeatAction::kRestart);
  CHECK_THAT(hb.reason, Catch::Contains("rank 3 exited with code 3"));
  const auto a2 = m.join(node("a", 2, 2));
  const auto b2 = m.join(node("b", 2, 2));
  CHECK(m.poll("job", a2).assignment.round == 1);
  CHECK(m.poll("job", b2).status == proto::AwaitStatus::kAssigned);
}

TEST_CASE("a join that cannot complete times out with who joined and which ranks are missing", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  auto req = node("host-a", 3, 3);
  req.join_timeout_s = 10;
  const auto a = m.join(req);
  m.set_awaiting("job", a, true);
  clock.advance(seconds(11));
  m.tick();
  const auto reply = m.poll("job", a);
  CHECK(reply.status == proto::AwaitStatus::kFailed);
  CHECK_THAT(reply.reason,
             Catch::Contains("1/3") && Catch::Contains("host-a") && Catch::Contains("missing node rank(s): 1, 2"));
}

TEST_CASE("inconsistent joins are refused with the fix in the message", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  m.join(node("a", 2, 2));
  CHECK_THROWS_WITH(m.join(node("b", 3, 3)), Catch::Contains("same --nnodes"));
  CHECK_THROWS_WITH(m.join(node("b", 2, 2, 1, 5)), Catch::Contains("out of range"));
  auto bad = node("b", 2, 2);
  bad.run_id = "";
  CHECK_THROWS_WITH(m.join(bad), Catch::Contains("--rdzv-id"));
}

TEST_CASE("runs are independent and finish when every node left", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  auto other = node("x", 1, 1);
  other.run_id = "other";
  const auto x = m.join(other);
  const auto a = m.join(node("a", 1, 1));
  CHECK(m.poll("other", x).assignment.world_size == 2);
  CHECK(m.poll("job", a).assignment.world_size == 2);
  m.leave("job", a, "done", true);
  CHECK(m.take_finished_runs() == std::vector<std::string>{"job"});
  CHECK_FALSE(m.has_run("job"));
  CHECK(m.has_run("other"));
}

TEST_CASE("heartbeats tell survivors why the round restarted", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("a", 1, 3));
  const auto b = m.join(node("b", 1, 3));
  clock.advance(seconds(6));
  m.tick();
  m.report_failure("job", b, "rank 2 exited with code 1");
  m.join(node("c", 1, 3));  // a later event must not replace the restart's reason
  const auto hb = m.heartbeat("job", a);
  CHECK(hb.action == proto::HeartbeatAction::kRestart);
  CHECK(hb.cause == proto::RestartCause::kWorkerFailed);
  CHECK_THAT(hb.reason, Catch::Contains("rank 2 exited with code 1"));
}

TEST_CASE("a survivor that never re-joins after a restart is declared lost", "[membership]") {
  // Silent since before the restart (killed with its workers, whose peers failed first): lost once its
  // keep-alive passed since its last heartbeat, not after the stop grace that live survivors get.
  FakeClock clock;
  Membership m(clock);
  auto a_req = node("a", 2, 2);
  auto b_req = node("b", 2, 2);
  const auto a = m.join(a_req);
  m.join(b_req);
  clock.advance(seconds(1));
  m.report_failure("job", a, "boom");
  const auto a2 = m.join(a_req);  // a re-joins, b is dead and never comes back
  m.set_awaiting("job", a2, true);
  clock.advance(seconds(1));
  m.tick();
  CHECK(m.poll("job", a2).status == proto::AwaitStatus::kWaiting);  // 2 s since b's last sign: within 3 s
  clock.advance(milliseconds(1100));
  m.tick();
  const auto reply = m.poll("job", a2);
  CHECK(reply.status == proto::AwaitStatus::kFailed);
  CHECK_THAT(reply.reason, Catch::Contains("b/100") && Catch::Contains("did not re-join"));
}

TEST_CASE("a survivor heard after the restart has the stop grace to re-join", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  auto a_req = node("a", 2, 2);
  auto b_req = node("b", 2, 2);
  const auto a = m.join(a_req);
  const auto b = m.join(b_req);
  m.report_failure("job", a, "boom");
  const auto a2 = m.join(a_req);
  m.set_awaiting("job", a2, true);
  m.heartbeat("job", b);  // b is alive, stopping its workers (then partitioned away)
  clock.advance(seconds(20));
  m.tick();
  CHECK(m.poll("job", a2).status == proto::AwaitStatus::kWaiting);  // inside keep-alive + stop grace
  m.heartbeat("job", b);                                            // still alive: the window restarts
  clock.advance(seconds(20));
  m.tick();
  CHECK(m.poll("job", a2).status == proto::AwaitStatus::kWaiting);
  clock.advance(seconds(20));
  m.tick();
  const auto reply = m.poll("job", a2);
  CHECK(reply.status == proto::AwaitStatus::kFailed);
  CHECK_THAT(reply.reason, Catch::Contains("b/100") && Catch::Contains("did not re-join"));
}

TEST_CASE("a spare takes the node rank of a lost node at once, survivors keep theirs", "[membership][spares]") {
  FakeClock clock;
  Membership m(clock);
  std::map<std::string, std::string> ids;
  for (const char* host : {"a", "b", "c", "d"}) ids[host] = m.join(node(host, 2, 3, 1));
  // Three nodes are the world (--nnodes 2:3): a, b, c; d waits as a spare.
  REQUIRE(m.poll("job", ids["c"]).status == proto::AwaitStatus::kAssigned);
  CHECK(m.poll("job", ids["d"]).status == proto::AwaitStatus::kWaiting);
  auto s = m.status("job").at(0);
  REQUIRE(s.waiting.size() == 1);
  CHECK(s.waiting.at(0).host == "d");
  const int b_rank = m.poll("job", ids["b"]).assignment.group_rank;
  const int c_rank = m.poll("job", ids["c"]).assignment.group_rank;
  // b dies: a and c beat, b stays silent past its keep-alive. A spare waits, so no scale-up before.
  clock.advance(seconds(2));
  CHECK(m.heartbeat("job", ids["a"]).action == proto::HeartbeatAction::kContinue);
  m.heartbeat("job", ids["c"]);
  m.set_awaiting("job", ids["d"], true);
  clock.advance(milliseconds(1500));
  m.tick();
  CHECK(m.heartbeat("job", ids["a"]).cause == proto::RestartCause::kNodeLost);
  // The survivors re-join (any order): the round closes with the spare the moment they are back.
  const auto c2 = m.join(node("c", 2, 3, 1));
  const auto a2 = m.join(node("a", 2, 3, 1));
  const auto d = m.poll("job", ids["d"]);
  REQUIRE(d.status == proto::AwaitStatus::kAssigned);
  CHECK(d.assignment.group_world_size == 3);
  CHECK(d.assignment.group_rank == b_rank);
  CHECK(m.poll("job", c2).assignment.group_rank == c_rank);
  CHECK(m.poll("job", a2).assignment.group_rank == 3 - b_rank - c_rank);
  s = m.status("job").at(0);
  CHECK(s.waiting.empty());
}

TEST_CASE("a survivor whose workers failed too is waited for before spares fill the round", "[membership][spares]") {
  FakeClock clock;
  Membership m(clock);
  std::map<std::string, std::string> ids;
  for (const char* host : {"a", "b", "c", "d", "e"}) ids[host] = m.join(node(host, 2, 3, 1));
  REQUIRE(m.poll("job", ids["a"]).status == proto::AwaitStatus::kAssigned);
  const int c_rank = m.poll("job", ids["c"]).assignment.group_rank;
  for (const char* spare : {"d", "e"}) m.set_awaiting("job", ids[spare], true);
  // b is killed (the daemon sees its agent's connection close); a's and c's workers fail at once (their
  // peer vanished) and both report it.
  m.connection_closed("job", ids["b"]);
  for (const char* host : {"a", "c"}) {
    proto::FailureReport failure;
    failure.host = host;
    failure.unix_ms = 1'000'000;
    m.record_failure("job", ids[host], failure, 1'000'000);
  }
  m.report_failure("job", ids["a"], "rank 0 exited with code 1");
  // a is back first: with the two spares the round would have its three nodes, but c is alive and due.
  const auto a2 = m.join(node("a", 2, 3, 1));
  CHECK(m.poll("job", a2).status == proto::AwaitStatus::kWaiting);
  const auto c2 = m.join(node("c", 2, 3, 1));
  const auto c = m.poll("job", c2);
  REQUIRE(c.status == proto::AwaitStatus::kAssigned);
  CHECK(c.assignment.group_rank == c_rank);  // the survivor kept its place; one spare took b's
  CHECK(m.status("job").at(0).spares == 1);
}

TEST_CASE("a connected survivor not heard since the restart keeps its place from the spares", "[membership][spares]") {
  FakeClock clock;
  Membership m(clock);
  std::map<std::string, std::string> ids;
  for (const char* host : {"a", "b", "c", "d", "e"}) ids[host] = m.join(node(host, 2, 3, 1));
  REQUIRE(m.poll("job", ids["a"]).status == proto::AwaitStatus::kAssigned);
  const int a_rank = m.poll("job", ids["a"]).assignment.group_rank;
  for (const char* spare : {"d", "e"}) m.set_awaiting("job", ids[spare], true);
  // b is killed; c's worker fails first and c restarts the job before a's worker noticed anything.
  m.connection_closed("job", ids["b"]);
  m.report_failure("job", ids["c"], "rank 2 exited with code 1");
  m.tick();
  // The two spares make the minimum and, with c, the maximum: neither the last call nor the spares may
  // close the round while a is connected and within its keep-alive.
  CHECK(m.poll("job", ids["d"]).status == proto::AwaitStatus::kWaiting);
  const auto c2 = m.join(node("c", 2, 3, 1));
  m.tick();
  CHECK(m.poll("job", c2).status == proto::AwaitStatus::kWaiting);
  const auto a2 = m.join(node("a", 2, 3, 1));
  const auto a = m.poll("job", a2);
  REQUIRE(a.status == proto::AwaitStatus::kAssigned);
  CHECK(a.assignment.group_rank == a_rank);
  CHECK(m.status("job").at(0).spares == 1);
}

TEST_CASE("a survivor is not waited for once its connection closed nor past its keep-alive", "[membership][spares]") {
  FakeClock clock;
  Membership m(clock);
  std::map<std::string, std::string> ids;
  for (const char* host : {"a", "b", "c", "d"}) ids[host] = m.join(node(host, 2, 3, 1));
  REQUIRE(m.poll("job", ids["a"]).status == proto::AwaitStatus::kAssigned);
  m.set_awaiting("job", ids["d"], true);
  m.report_failure("job", ids["a"], "rank 0 exited with code 1");
  const auto a2 = m.join(node("a", 2, 3, 1));
  m.tick();
  CHECK(m.poll("job", a2).status == proto::AwaitStatus::kWaiting);  // b and c may be alive
  m.connection_closed("job", ids["b"]);                             // b's agent is gone
  CHECK(m.poll("job", a2).status == proto::AwaitStatus::kWaiting);  // c is still connected
  // c neither re-joins nor beats: past its keep-alive (3 s) it no longer holds the round back.
  clock.advance(milliseconds(3100));
  m.set_awaiting("job", ids["d"], true);
  m.set_awaiting("job", a2, true);
  m.tick();
  REQUIRE(m.poll("job", a2).status == proto::AwaitStatus::kAssigned);
  CHECK(m.poll("job", a2).assignment.group_world_size == 2);
}

TEST_CASE("a spare still waiting when the run ends is told it finished", "[membership][spares]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("a", 1, 1, 1));
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  const auto b = m.join(node("b", 1, 1, 1));
  REQUIRE(m.poll("job", b).spare);
  m.leave("job", a, "done", true);
  const auto reply = m.poll("job", b);
  CHECK(reply.status == proto::AwaitStatus::kFinished);
  CHECK_THAT(reply.reason, Catch::Contains("run 'job' finished"));
  CHECK(m.poll("other", b).status == proto::AwaitStatus::kFailed);  // never known: still an error
}

TEST_CASE("a node lost or failing after another's workers ended well ends the run well, and its spare with it",
          "[membership][spares]") {
  for (const bool lost : {true, false}) {
    INFO((lost ? "lost: killed after the last step" : "left with a failure after the last step"));
    FakeClock clock;
    Membership m(clock);
    const auto a = m.join(node("a", 2, 2, 1));
    const auto b = m.join(node("b", 2, 2, 1));
    REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
    REQUIRE(m.poll("job", b).status == proto::AwaitStatus::kAssigned);
    const auto spare = m.join(node("c", 2, 2, 1));
    REQUIRE(m.poll("job", spare).spare);
    m.set_awaiting("job", spare, true);
    m.leave("job", a, "all workers exited 0", true);  // a's workers ended well: the job's work is done
    if (lost) {
      clock.advance(seconds(60));  // b is killed before it could leave: silent past its keep-alive
      m.tick();
    } else {
      m.leave("job", b, "rank 1 failed with exit code 1 at exit", false);
    }
    const auto reply = m.poll("job", spare);
    CHECK(reply.status == proto::AwaitStatus::kFinished);  // never "fewer than the minimum of 2"
    CHECK(m.status("job").empty());
  }
}

TEST_CASE("status keeps a run's restarts with their causes, the latest ones and a count by cause", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  auto a = m.join(node("host-a", 1, 1));
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  CHECK(m.status("job").at(0).restarts.empty());
  const int kRestarts = static_cast<int>(proto::kMaxRestartRecords) + 2;
  for (int i = 0; i < kRestarts; ++i) {
    m.report_failure("job", a, "rank 0 hung " + std::to_string(i),
                     i == 0 ? proto::RestartCause::kWorkerFailed : proto::RestartCause::kHung);
    clock.advance(seconds(1));
    a = m.join(node("host-a", 1, 1));  // the survivor is back: the round closes at once
    REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  }
  const auto s = m.status("job").at(0);
  REQUIRE(s.restarts.size() == proto::kMaxRestartRecords);
  CHECK(s.restarts.back().round == kRestarts);
  CHECK(s.restarts.back().cause == proto::RestartCause::kHung);
  CHECK_THAT(s.restarts.back().reason, Catch::Contains("rank 0 hung " + std::to_string(kRestarts - 1)));
  CHECK(s.restarts.back().since_s == Approx(1.0));
  CHECK(s.restarts_by_cause.at("worker_failed") == 1);
  CHECK(s.restarts_by_cause.at("hung") == kRestarts - 1);
}

TEST_CASE("a hang noticed on one node names the rank of another node that got less far", "[membership][rootcause]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("host-a", 2, 2));
  const auto b = m.join(node("host-b", 2, 2));
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  REQUIRE(m.poll("job", b).status == proto::AwaitStatus::kAssigned);
  const auto ranks = [](int first, int64_t step0, int64_t step1, double silent1) {
    proto::RankProgress r0, r1;
    r0.rank = first;
    r0.step = step0;
    r0.phase = r1.phase = "train";
    r1.rank = first + 1;
    r1.step = step1;
    r1.since_beat_s = silent1;
    return std::vector<proto::RankProgress>{r0, r1};
  };
  // Node b's rank 3 blocked before beating step 42; every other rank beat 42 and now waits for it.
  m.heartbeat("job", a, ranks(0, 42, 42, 0.5));
  m.heartbeat("job", b, ranks(2, 42, 41, 9.0));
  clock.advance(seconds(1));
  // Node a's agent notices first (its budget ran out first) and reports its own rank 0, at step 42.
  proto::FailureReport hang;
  hang.rank = 0;
  hang.host = "host-a";
  hang.cause = proto::RestartCause::kHung;
  hang.step = 42;
  hang.unix_ms = 1'000'000;
  m.record_failure("job", a, hang, 1'000'000);
  const auto failures = m.status("job").at(0).failures;
  REQUIRE(failures.size() == 2);
  CHECK(failures[0].rank == 3);  // the root cause: the rank that got less far, dated at its last beat
  CHECK(failures[0].host == "host-b");
  CHECK(failures[0].local_rank == 1);
  CHECK(failures[0].step == 41);
  CHECK(failures[0].unix_ms == 1'000'000 - 10'000);  // 1 s since b's heartbeat + 9 s its beat was old then
  CHECK_THAT(failures[0].exit, Catch::Contains("the lowest step in the job") &&
                                   Catch::Contains("rank 0 on host-a was found hung at step 42"));
  CHECK(failures[1].rank == 0);
  // Node b's agent then reports rank 3 itself, with its stack: one entry, its details, the earlier time.
  hang.rank = 3;
  hang.host = "host-b";
  hang.step = 41;
  hang.unix_ms = 1'000'500;
  hang.traceback = {"    block_forever (job.py:30)"};
  m.record_failure("job", b, hang, 1'000'500);
  const auto merged = m.status("job").at(0).failures;
  REQUIRE(merged.size() == 2);
  CHECK(merged[0].rank == 3);
  CHECK(merged[0].unix_ms == 1'000'000 - 10'000);
  CHECK(merged[0].traceback == std::vector<std::string>{"    block_forever (job.py:30)"});
}

TEST_CASE("hangs are counted by the verdict's kind for status and /metrics", "[membership][rootcause]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("host-a", 1, 1));
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  proto::FailureReport hang;
  hang.cause = proto::RestartCause::kHung;
  hang.hang_kind = "never_entered";
  m.record_failure("job", a, hang, 1'000'000);
  hang.hang_kind = "stopped";
  m.record_failure("job", a, hang, 1'000'100);
  hang.hang_kind = "";  // an agent that sends no kind: judged from beats alone
  m.record_failure("job", a, hang, 1'000'200);
  proto::FailureReport crash;  // not a hang: not counted
  m.record_failure("job", a, crash, 1'000'300);
  const auto s = m.status("job").at(0);
  CHECK(s.hangs_by_kind == std::map<std::string, int64_t>{{"beats", 1}, {"never_entered", 1}, {"stopped", 1}});
  CHECK(nlohmann::json(s).at("hangs_by_kind").at("stopped") == 1);
  // The same counts in /metrics, rendered from the status as the live view does.
  rendezvous::http::LiveSnapshot snapshot;
  snapshot.status.runs = m.status("job");
  const std::string metrics = rendezvous::http::prometheus_text(snapshot, 0);
  CHECK_THAT(metrics, Catch::Contains("# TYPE meshrun_hangs_total counter"));
  for (const char* kind : {"beats", "never_entered", "stopped"}) {
    CHECK_THAT(metrics, Catch::Contains(std::string("meshrun_hangs_total{run=\"job\",kind=\"") + kind + "\"} 1"));
  }
  CHECK_THAT(metrics, !Catch::Contains("kind=\"\"}"));
  hang.hang_kind = "mismatch";
  CHECK(nlohmann::json(hang).get<proto::FailureReport>().hang_kind == "mismatch");
}

TEST_CASE("heartbeats carry arrival probes out and answers in: a slow rank without beats is named",
          "[membership][straggler]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("host-a", 2, 2, 1));
  const auto b = m.join(node("host-b", 2, 2, 1));
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  REQUIRE(m.poll("job", b).status == proto::AwaitStatus::kAssigned);
  const int rank_a = m.poll("job", a).assignment.rank_offset;
  // Rank `rank` completed `done` collectives of group 0; with `probe`, its answer: it computes `own` s per
  // collective and the slowest 0.03 s, so it enters each that much earlier than the slowest.
  const auto progress = [](int rank, int64_t done, const proto::ArrivalProbe& probe, double own) {
    proto::RankProgress p;
    p.rank = rank;
    p.collectives = {{"0", done}};
    if (!probe.group.empty()) {
      const auto n = probe.last_seq - probe.first_seq + 1;
      p.arrivals = proto::ArrivalBlock{.group = probe.group,
                                       .first_seq = probe.first_seq,
                                       .last_seq = probe.last_seq,
                                       .count = n,
                                       .mean_unix_s = 1.795e9 - (0.03 - own),
                                       .span_s = 0.03 * static_cast<double>(n - 1),
                                       .uncertainty_s = 1e-5};
    }
    return std::vector<proto::RankProgress>{p};
  };
  proto::ArrivalProbe probe;
  int64_t done = 10;
  std::vector<proto::Straggler> named;
  for (int beat = 0; beat < 40 && named.empty(); ++beat) {
    clock.advance(seconds(1));
    done += 30;
    // Host a's rank computes 1.5x: 30 ms per collective against 20 ms. Host a's clock reading is shown.
    m.heartbeat("job", a, progress(rank_a, done, probe, 0.03), proto::ClockReading{true, 7.0, 0.001});
    const auto reply = m.heartbeat("job", b, progress(1 - rank_a, done, probe, 0.02));
    probe = reply.arrival_probe;
    named = reply.stragglers;
  }
  REQUIRE(named.size() == 1);
  CHECK(named[0].rank == rank_a);
  CHECK(named[0].host == "host-a");
  CHECK(named[0].measure == proto::StragglerMeasure::kArrivals);
  CHECK(named[0].seconds / named[0].median_seconds == Approx(1.5).epsilon(0.05));
  const auto status = m.status("job").at(0);
  const auto& node_a = status.nodes.at(0).host == "host-a" ? status.nodes.at(0) : status.nodes.at(1);
  CHECK(node_a.clock.measured);
  CHECK(node_a.clock.offset_s == Approx(7.0));
  CHECK(node_a.ranks.at(0).arrival_compute_s == Approx(0.03).epsilon(0.05));
  // What became of the probes: each answered whole and precisely, so each counted (and shown in /metrics).
  CHECK(status.arrival_probes.counted >= 2);
  CHECK(status.arrival_probes.imprecise + status.arrival_probes.partial + status.arrival_probes.abandoned == 0);
  rendezvous::http::LiveSnapshot snapshot;
  snapshot.status.runs = m.status("job");
  const std::string metrics = rendezvous::http::prometheus_text(snapshot, 0);
  CHECK_THAT(metrics, Catch::Contains("# TYPE meshrun_arrival_probes_total counter"));
  CHECK_THAT(metrics, Catch::Contains("meshrun_arrival_probes_total{run=\"job\",outcome=\"counted\"} " +
                                      std::to_string(status.arrival_probes.counted)));
  CHECK_THAT(metrics, Catch::Contains("meshrun_arrival_probes_total{run=\"job\",outcome=\"abandoned\"} 0"));
  // An older daemon's status, without the tally, still reads (zeros).
  nlohmann::json older = status;
  older.erase("arrival_probes");
  CHECK(older.get<proto::RunStatus>().arrival_probes.counted == 0);
  CHECK(nlohmann::json(status).at("arrival_probes").at("counted") == status.arrival_probes.counted);
}

TEST_CASE("no arrival probe while the alert is off, or while the beats' compute_s measures every rank",
          "[membership][straggler]") {
  enum class Case { kNoBeats, kAlertOff, kComputeBeats };
  for (const Case c : {Case::kNoBeats, Case::kAlertOff, Case::kComputeBeats}) {
    INFO("case " << static_cast<int>(c));
    FakeClock clock;
    Membership m(clock);
    auto request = [&](const std::string& host) {
      auto r = node(host, 2, 2, 1);
      if (c == Case::kAlertOff) r.straggler_threshold = 0;
      return r;
    };
    const auto a = m.join(request("host-a"));
    const auto b = m.join(request("host-b"));
    REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
    REQUIRE(m.poll("job", b).status == proto::AwaitStatus::kAssigned);
    const int rank_a = m.poll("job", a).assignment.rank_offset;
    const auto progress = [&](int rank, int64_t done) {
      proto::RankProgress p;
      p.rank = rank;
      p.collectives = {{"0", done}};
      if (c == Case::kComputeBeats) {
        p.step = done;
        p.phase = proto::kTrainPhase;
        p.compute_s = 0.02;
      }
      return std::vector<proto::RankProgress>{p};
    };
    int probes = 0;
    for (int beat = 0, done = 10; beat < 10; ++beat, done += 30) {
      clock.advance(seconds(1));
      m.heartbeat("job", a, progress(rank_a, done));
      probes += m.heartbeat("job", b, progress(1 - rank_a, done)).arrival_probe.group.empty() ? 0 : 1;
    }
    CHECK((probes > 0) == (c == Case::kNoBeats));
  }
}

TEST_CASE("a restart is timed phase by phase, from the fault to every node's first step", "[membership][recovery]") {
  FakeClock clock;
  Membership m(clock);
  std::map<std::string, std::string> ids;
  for (const char* host : {"a", "b", "c", "d"}) ids[host] = m.join(node(host, 2, 3, 1));
  REQUIRE(m.poll("job", ids["a"]).status == proto::AwaitStatus::kAssigned);
  m.set_awaiting("job", ids["d"], true);  // the spare
  clock.advance(milliseconds(9500));
  for (const char* host : {"a", "b", "c"}) m.heartbeat("job", ids[host]);
  // b is killed with its workers at 9.9 s (its agent's connection closes); a's worker fails at once (its
  // peer vanished), reported at 10.0 s.
  clock.advance(milliseconds(400));
  m.connection_closed("job", ids["b"]);
  clock.advance(milliseconds(100));
  proto::FailureReport failure;
  failure.rank = 0;
  failure.host = "a";
  failure.unix_ms = 1'000'000 - 100;
  m.record_failure("job", ids["a"], failure, 1'000'000);
  clock.advance(milliseconds(600));
  m.report_failure("job", ids["a"], "rank 0 exited with code 1");  // after a stops its workers
  clock.advance(milliseconds(400));
  m.join(node("a", 2, 3, 1));
  clock.advance(milliseconds(500));  // 11.5 s
  const auto c2 = m.join(node("c", 2, 3, 1));
  // With the spare in, the round has its three nodes: it closes at once, without waiting for dead b.
  REQUIRE(m.poll("job", c2).status == proto::AwaitStatus::kAssigned);
  auto s = m.status("job").at(0);
  CHECK_THAT(s.restarts.back().replaced, Catch::Contains("d (pid 100) took node rank"));
  CHECK_FALSE(s.restarts.back().recovery.complete);
  CHECK(s.restarts.back().recovery.rendezvous_s == Approx(0.0));
  CHECK(s.restarts.back().recovery.start_s == -1);
  // Every node reports its workers' milestones as ages at 14.0 s.
  clock.advance(milliseconds(2500));
  proto::AttemptMilestones done{.round = 1,
                                .spawned_age_s = 1.3,
                                .initialized_age_s = 0.5,
                                .loaded_age_s = 0.3,
                                .first_step_age_s = 0.1,
                                .load_beats = true,
                                .load_source = proto::LoadSource::kMemoryBuddy,
                                .steps = {}};
  proto::HeartbeatReply reply;
  const auto nodes = m.status("job").at(0).nodes;
  for (const auto& n : nodes) reply = m.heartbeat("job", n.node_id, {}, {}, done);
  s = m.status("job").at(0);
  const auto& l = s.restarts.back().recovery;
  CHECK(l.complete);
  CHECK(l.detect_s == Approx(0.1));  // 9.9 -> 10.0
  CHECK(l.stop_s == Approx(1.5));    // -> 11.5, c (the last survivor) re-joined and the round closed
  CHECK(l.rendezvous_s == Approx(0.0));
  CHECK(l.start_s == Approx(1.2));
  CHECK(l.init_s == Approx(0.8));
  CHECK(l.load_s == Approx(0.2));
  CHECK(l.first_step_s == Approx(0.2));
  CHECK(l.total_s == Approx(4.0));
  CHECK(reply.recovered_round == 1);
  CHECK(reply.recovery.total_s == Approx(4.0));
  CHECK_THAT(proto::describe(l), Catch::StartsWith("4.0 s from the fault to the first step: detect 0.1 s, stop 1.5 s"));
  CHECK(l.load_source == proto::LoadSource::kMemoryBuddy);
  CHECK_THAT(proto::describe(l), Catch::Contains("load 0.2 s from memory (buddy)"));
}

TEST_CASE("a hang verdict's suspect makes way for a spare and waits as one, unless it asked not to",
          "[membership][spares]") {
  for (const bool evict : {true, false}) {
    FakeClock clock;
    Membership m(clock);
    std::map<std::string, proto::JoinRequest> req;
    std::map<std::string, std::string> ids;
    for (const char* host : {"a", "b", "c", "d"}) {
      req[host] = node(host, 2, 3, 1);
      req[host].evict_suspects = evict;
      ids[host] = m.join(req[host]);
    }
    REQUIRE(m.poll("job", ids["c"]).status == proto::AwaitStatus::kAssigned);
    const int b_rank = m.poll("job", ids["b"]).assignment.group_rank;
    // b's agent reports its rank as the verdict's culprit; a's agent then reports the hang.
    proto::FailureReport hang;
    hang.rank = b_rank;
    hang.host = "b";
    hang.cause = proto::RestartCause::kHung;
    hang.hang_kind = "never_entered";
    hang.unix_ms = 1'000;
    m.record_failure("job", ids["b"], hang, 1'000);
    m.report_failure("job", ids["a"], "rank 1 never entered all_reduce #7", proto::RestartCause::kHung);
    INFO("evict " << evict);
    CHECK((m.status("job").at(0).last_event.find("makes way for a spare") != std::string::npos) == evict);
    m.heartbeat("job", ids["c"]);  // c is alive, stopping its workers: the round waits for it
    const auto a2 = m.join(req["a"]);
    const auto b2 = m.join(req["b"]);
    const auto c2 = m.join(req["c"]);
    if (evict) {
      REQUIRE(m.poll("job", a2).status == proto::AwaitStatus::kAssigned);
      const auto d = m.poll("job", ids["d"]);
      REQUIRE(d.status == proto::AwaitStatus::kAssigned);
      CHECK(d.assignment.group_rank == b_rank);  // the spare took the suspect's rank
      const auto b = m.poll("job", b2);
      CHECK(b.status == proto::AwaitStatus::kWaiting);
      CHECK(b.spare);  // ... which waits as a spare now
      CHECK(m.status("job").at(0).spares == 1);
    } else {
      // Kept: every survivor is back and keeps its rank; the spare waits again.
      REQUIRE(m.poll("job", c2).status == proto::AwaitStatus::kAssigned);
      CHECK(m.poll("job", b2).assignment.group_rank == b_rank);
      CHECK(m.poll("job", ids["d"]).spare);
      CHECK(m.status("job").at(0).spares == 1);
    }
  }
}

TEST_CASE("the goodput ledger: the daemon splits a run's wall time, and the last node's leave carries it",
          "[membership][goodput]") {
  FakeClock clock;
  Membership m(clock);
  const auto a = m.join(node("host-a", 2, 2, 1));
  clock.advance(seconds(1));
  const auto b = m.join(node("host-b", 2, 2, 1));
  REQUIRE(m.poll("job", a).status == proto::AwaitStatus::kAssigned);
  CHECK(m.poll("job", a).assignment.steps_done == -1);
  // At 10 s both nodes have beaten step 20; their accounts: first step at 3 s, 7 s of steps counted until 10 s.
  clock.advance(seconds(9));
  proto::RankProgress at20;
  at20.step = 20;
  at20.phase = "train";
  proto::AttemptMilestones round0;
  round0.round = 0;
  round0.first_step_age_s = 7;
  round0.steps.first_step_age_s = 7;
  round0.steps.counted_age_s = 0;
  round0.steps.productive_s = 7;
  m.heartbeat("job", a, {at20}, {}, round0);
  m.heartbeat("job", b, {at20}, {}, round0);
  clock.advance(seconds(1));  // 11 s: a worker on b fails; both re-join
  m.report_failure("job", b, "worker 1 failed");
  clock.advance(seconds(1));
  const auto a1 = m.join(node("host-a", 2, 2, 1));
  const auto b1 = m.join(node("host-b", 2, 2, 1));
  const auto assigned = m.poll("job", a1);
  REQUIRE(assigned.status == proto::AwaitStatus::kAssigned);
  CHECK(assigned.assignment.steps_done == 20);  // the steps after the checkpoint are done again: work lost
  // At 20 s: the first step after the restart at 14 s, 2 s of steps done again, 4 s of new ones.
  clock.advance(seconds(8));
  proto::AttemptMilestones round1;
  round1.round = 1;
  round1.first_step_age_s = 6;
  round1.steps.first_step_age_s = 6;
  round1.steps.counted_age_s = 0;
  round1.steps.recomputed_s = 2;
  round1.steps.productive_s = 4;
  m.heartbeat("job", a1, {}, {}, round1);
  const auto live = m.status("job").at(0).goodput;
  CHECK(live.wall_s == Approx(20));
  CHECK(proto::accounted_s(live) == Approx(live.wall_s));
  clock.advance(seconds(1));
  round1.first_step_age_s = round1.steps.first_step_age_s = 7;  // the same marks, a second later
  round1.steps.counted_age_s = 1;
  const auto first = m.leave("job", a1, "done", true, round1);
  REQUIRE(first);
  CHECK_FALSE(first->ended);
  const auto last = m.leave("job", b1, "done", true, round1);
  REQUIRE(last);
  CHECK(last->ended);
  CHECK(last->wall_s == Approx(21));
  CHECK(last->startup_s == Approx(3));
  CHECK(last->productive_s == Approx(11));
  CHECK(last->work_lost_s == Approx(1 + 2));  // the step cut at 10 -> 11 s, and the recomputed steps
  CHECK(last->restarts == 1);
  CHECK(last->restarts_s == Approx(3));  // 11 s -> 14 s
  CHECK(last->shutdown_s == Approx(1));
  CHECK(proto::accounted_s(*last) == Approx(21));
  CHECK_FALSE(m.has_run("job"));
}

TEST_CASE("a client cannot make the daemon hold a node, a round or a join past its limits", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  auto forever = node("host-a", 1, 1);
  forever.keep_alive_timeout_s = 1e9;  // never declared dead
  CHECK_THROWS_WITH(m.join(forever), Catch::Contains("keep_alive timeout") && Catch::Contains("allows 0 to 3600"));
  auto nan_join = node("host-a", 1, 1);
  nan_join.join_timeout_s = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(m.join(nan_join), Catch::Contains("join_timeout"));
  auto long_call = node("host-a", 1, 2);
  long_call.last_call_timeout_s = -1;
  CHECK_THROWS_WITH(m.join(long_call), Catch::Contains("last_call_timeout"));
  CHECK_NOTHROW(m.join(node("host-a", 1, 1)));  // the defaults users get are well within
}

TEST_CASE("the daemon holds at most 10,000 runs, and says so to the next", "[membership]") {
  FakeClock clock;
  Membership m(clock);
  for (int i = 0; i < 10000; ++i) {
    auto r = node("host", 2, 2);
    r.run_id = "run-" + std::to_string(i);
    m.join(r);
  }
  auto next = node("host", 2, 2);
  next.run_id = "one-too-many";
  CHECK_THROWS_WITH(m.join(next), Catch::Contains("holds 10000 runs") && Catch::Contains("another daemon"));
  auto existing = node("host-b", 2, 2);
  existing.run_id = "run-7";
  CHECK_NOTHROW(m.join(existing));  // the runs it holds are served as before
}

namespace {
/// `seats` nodes of one worker each ("a", "b", ...) and a spare ("s"), --replace-slow-nodes; `slow` hosts compute
/// twice as long per step.
struct SlowNodeRun {
  FakeClock clock;
  Membership m{clock};
  std::vector<std::string> seated;
  std::map<std::string, proto::JoinRequest> req;
  std::map<std::string, std::string> ids;
  std::map<std::string, int> rank;
  std::map<std::string, double> compute_s;
  int64_t step = 0;

  SlowNodeRun(bool replace, bool spare, const std::vector<std::string>& slow, int seats = 3) {
    for (int i = 0; i < seats; ++i) seated.push_back(std::string(1, static_cast<char>('a' + i)));
    std::vector<std::string> hosts = seated;
    if (spare) hosts.push_back("s");
    for (const auto& host : hosts) {
      req[host] = node(host, seats, seats, 1);
      req[host].slow_nodes.replace = replace;
      ids[host] = m.join(req[host]);
      compute_s[host] = std::find(slow.begin(), slow.end(), host) != slow.end() ? 0.2 : 0.1;
    }
    for (const auto& host : seated) rank[host] = m.poll("job", ids[host]).assignment.rank_offset;
  }
  /// One second: every seated node beats ten new steps. Returns the first reply that is not "continue", if any;
  /// else the last node's.
  proto::HeartbeatReply second() {
    clock.advance(seconds(1));
    step += 10;
    proto::HeartbeatReply reply;
    for (const auto& host : seated) {
      proto::RankProgress p;
      p.rank = rank[host];
      p.step = step;
      p.phase = "train";
      p.compute_s = compute_s[host];
      p.step_time_s = 0.025;
      reply = m.heartbeat("job", ids[host], {p});
      if (reply.action != proto::HeartbeatAction::kContinue) return reply;
    }
    if (ids.count("s")) m.set_awaiting("job", ids["s"], true);
    return reply;
  }
};
}  // namespace

TEST_CASE(
    "replacing slow nodes: a node slow for a minute makes way for the spare, which takes its rank, and it "
    "is not taken back, not even as a spare, until its cool-down is over",
    "[membership][slow_node]") {
  SlowNodeRun run(true, true, {"b"});
  std::optional<proto::HeartbeatReply> restart;
  int seconds_run = 0;
  while (!restart && seconds_run < 120) {
    if (auto reply = run.second(); reply.action != proto::HeartbeatAction::kContinue) restart = reply;
    ++seconds_run;
  }
  REQUIRE(restart);
  CHECK(restart->cause == proto::RestartCause::kSlowNode);
  CHECK(seconds_run >= 60);  // named slow without a break for after_s (60 s), from a few seconds in
  CHECK(seconds_run < 70);
  CHECK_THAT(restart->reason, Catch::StartsWith("node " + std::to_string(run.rank["b"]) +
                                                " (b, pid 100) evicted for "
                                                "a spare: its ranks ran 2.0x slower than the job's median for"));
  auto status = run.m.status("job").at(0);
  REQUIRE(status.evictions.size() == 1);
  CHECK(status.slow_node_evictions == 1);
  CHECK(status.evictions[0].host == "b");
  CHECK(status.evictions[0].slowdown == Approx(2.0));
  CHECK(status.evictions[0].recovery_s == Approx(proto::kDefaultRecoveryS));  // no restart before this one
  CHECK(status.evictions[0].redo_s == Approx(seconds_run).margin(1.5));       // beats, no checkpoint: all of it
  CHECK(status.restarts_by_cause.at("slow_node") == 1);
  // The survivors and the evicted node re-join: the spare takes b's rank; b waits, not even as a spare.
  const auto a2 = run.m.join(run.req["a"]);
  const auto c2 = run.m.join(run.req["c"]);
  const auto b2 = run.m.join(run.req["b"]);
  REQUIRE(run.m.poll("job", a2).status == proto::AwaitStatus::kAssigned);
  const auto spare = run.m.poll("job", run.ids["s"]);
  REQUIRE(spare.status == proto::AwaitStatus::kAssigned);
  CHECK(spare.assignment.group_rank == run.rank["b"]);
  auto b = run.m.poll("job", b2);
  CHECK(b.status == proto::AwaitStatus::kWaiting);
  CHECK_FALSE(b.spare);
  CHECK(b.cooldown_s == Approx(1800).margin(1));
  status = run.m.status("job").at(0);
  CHECK(status.spares == 0);
  REQUIRE(status.waiting.size() == 1);
  CHECK(status.waiting[0].cooldown_s > 1790);
  CHECK_THAT(status.restarts.back().replaced, Catch::Contains("s (pid 100) took node rank"));
  // While it cools down the round has room for nobody, and no scale-up admits it; after, it is a spare again.
  run.ids = {{"a", a2}, {"b", run.ids["s"]}, {"c", c2}};  // the seats: the spare beats as the new b
  run.compute_s["b"] = 0.1;
  for (int i = 0; i < 1810; i += 10) {
    run.clock.advance(seconds(9));
    run.m.set_awaiting("job", b2, true);
    REQUIRE(run.second().action == proto::HeartbeatAction::kContinue);
  }
  b = run.m.poll("job", b2);
  CHECK(b.spare);
  CHECK(b.cooldown_s == 0);
  CHECK(run.m.status("job").at(0).spares == 1);
  CHECK(run.m.status("job").at(0).evictions.at(0).cooldown_s == 0);
  // /metrics counts the evictions and shows the last one's figures.
  rendezvous::http::LiveSnapshot snapshot;
  snapshot.status.runs = run.m.status("job");
  const std::string metrics = rendezvous::http::prometheus_text(snapshot, 0);
  CHECK_THAT(metrics, Catch::Contains("meshrun_slow_node_evictions_total{run=\"job\"} 1"));
  CHECK_THAT(metrics, Catch::Contains("meshrun_slow_node_eviction_slowdown{run=\"job\",host=\"b\"} 2"));
}

TEST_CASE(
    "replacing slow nodes: the slow node stays with no spare or with two nodes slow, said once, and "
    "without --replace-slow-nodes nothing is evicted",
    "[membership][slow_node]") {
  struct Case {
    const char* name;
    bool replace;
    bool spare;
    std::vector<std::string> slow;
    const char* note;  // "" : none expected
  };
  for (const Case& c : {Case{"no spare", true, false, {"b"}, "but no spare waits: it keeps its seat"},
                        Case{"two slow", true, true, {"a", "b"}, "2 nodes are named slow at once"},
                        Case{"off", false, true, {"b"}, ""}}) {
    INFO(c.name);
    // Two slow of three would be the median: four seats, so that the two are named.
    SlowNodeRun run(c.replace, c.spare, c.slow, c.slow.size() > 1 ? 4 : 3);
    std::string note;
    for (int i = 0; i < 120; ++i) {
      const auto reply = run.second();
      REQUIRE(reply.action == proto::HeartbeatAction::kContinue);
      if (!reply.slow_nodes.empty()) note = reply.slow_nodes;
    }
    const auto status = run.m.status("job").at(0);
    CHECK(status.slow_node_evictions == 0);
    CHECK(status.round == 0);
    if (*c.note) {
      CHECK_THAT(note, Catch::Contains(c.note));
      CHECK(status.slow_nodes == note);
    } else {
      CHECK(note.empty());
    }
    if (c.slow.size() < 2) continue;
    // One of the two recovers: the other counts as slow alone only from then, for the whole minute, before the rule
    // weighs it (here: four minutes of work since the round began make the restart cost more than it would save).
    run.compute_s["a"] = 0.1;
    int alone = 0;
    for (; alone < 120; ++alone) {
      REQUIRE(run.second().action == proto::HeartbeatAction::kContinue);
      if (run.m.status("job").at(0).slow_nodes.find("a restart costs about") != std::string::npos) break;
    }
    CHECK(alone >= 60);
    CHECK(alone < 70);
    CHECK_THAT(run.m.status("job").at(0).slow_nodes, Catch::EndsWith("it keeps its seat"));
  }
}
