// GoodputLedger: a run's wall time split into productive training and badput by cause, from its restarts
// and the agents' step accounts. Times on a fake clock; each case checks the parts sum to the wall time.
#include <catch2/catch.hpp>
#include <chrono>

#include "proto/rendezvous/goodput.hpp"
#include "proto/rules/goodput_ledger.hpp"

using namespace meshrun;
using meshrun::proto::GoodputLedger;
using namespace std::chrono_literals;

namespace {

const TimePoint t0 = TimePoint{} + 1000s;

/// Milestones whose account started `first` before `at` and counts until `counted` before it.
proto::AttemptMilestones beaten(int64_t round, double first, double counted, double productive, double checkpoint = 0,
                                double recomputed = 0) {
  proto::AttemptMilestones m;
  m.round = round;
  m.first_step_age_s = first;
  m.steps.first_step_age_s = first;
  m.steps.counted_age_s = counted;
  m.steps.productive_s = productive;
  m.steps.checkpoint_s = checkpoint;
  m.steps.recomputed_s = recomputed;
  return m;
}

}  // namespace

TEST_CASE("goodput: start-up, steps, checkpoints and shutdown sum to the wall time", "[goodput]") {
  GoodputLedger ledger(t0);
  // First step 5 s in; by t0+60 s the account covers 50 s: 45 s of steps, 5 s of checkpoints.
  ledger.milestones(0, beaten(0, 55, 5, 45, 5), t0 + 60s);
  const auto live = ledger.report(t0 + 60s, false);
  CHECK(live.startup_s == Approx(5));
  CHECK(live.productive_s == Approx(45));
  CHECK(live.checkpoint_s == Approx(5));
  CHECK(live.in_progress_s == Approx(5));  // the step under way
  CHECK(proto::accounted_s(live) == Approx(live.wall_s));
  const auto end = ledger.report(t0 + 62s, true);
  CHECK(end.shutdown_s == Approx(7));
  CHECK(end.in_progress_s == 0);
  CHECK(end.ratio == Approx(45.0 / 62));
  CHECK(proto::accounted_s(end) == Approx(62));
}

TEST_CASE("goodput: a restart counts from its fault to the next first step, the cut step is work lost", "[goodput]") {
  GoodputLedger ledger(t0);
  ledger.milestones(0, beaten(0, 38, 1, 37), t0 + 40s);  // first step at 2 s, counted until 39 s
  ledger.restarted(1, proto::RestartCause::kWorkerFailed, t0 + 39500ms);
  ledger.milestones(0, beaten(0, 50, 0, 48), t0 + 52s);  // a late report of the old round: ignored
  // Round 1: first step at 45 s; 2 s of steps done again, then 3 s of new ones.
  ledger.milestones(1, beaten(1, 5, 0, 3, 0, 2), t0 + 50s);
  const auto r = ledger.report(t0 + 50s, true);
  CHECK(r.restarts == 1);
  CHECK(r.restarts_s == Approx(5.5));  // 39.5 s -> 45 s
  CHECK(r.work_lost_s == Approx(0.5 + 2));
  CHECK(r.productive_s == Approx(40));
  CHECK(proto::accounted_s(r) == Approx(r.wall_s));
}

TEST_CASE("goodput: a hang's wait runs from the last step counted to the verdict", "[goodput]") {
  GoodputLedger ledger(t0);
  ledger.milestones(0, beaten(0, 19, 9, 10), t0 + 20s);  // steps until 11 s, then nothing
  ledger.restarted(1, proto::RestartCause::kHung, t0 + 30s);
  const auto r = ledger.report(t0 + 30s, false);
  CHECK(r.hang_wait_s == Approx(19));
  CHECK(r.work_lost_s == 0);
  CHECK(proto::accounted_s(r) == Approx(30));
}

TEST_CASE("goodput: a node lost between heartbeats: the restart starts after the steps others counted", "[goodput]") {
  GoodputLedger ledger(t0);
  ledger.milestones(0, beaten(0, 20, 0, 20), t0 + 21s);           // counted until 21 s
  ledger.restarted(1, proto::RestartCause::kNodeLost, t0 + 20s);  // its last heartbeat was at 20 s
  const auto r = ledger.report(t0 + 25s, false);
  CHECK(r.restarts_s == Approx(4));
  CHECK(proto::accounted_s(r) == Approx(25));
}

TEST_CASE("goodput: with neither step beats nor collectives the running time is untold, and goodput unknown",
          "[goodput]") {
  GoodputLedger ledger(t0);
  proto::AttemptMilestones m;
  m.round = 0;
  m.first_step_age_s = 7;  // up 3 s in: a worker whose account has nothing to time it by
  m.steps.measure = proto::AccountMeasure::kNone;
  ledger.milestones(0, m, t0 + 10s);
  const auto r = ledger.report(t0 + 30s, true);
  CHECK(r.startup_s == Approx(3));
  CHECK(r.untold_s == Approx(27));
  CHECK(r.productive_s == 0);
  CHECK_THAT(proto::describe(r),
             Catch::StartsWith("goodput unknown for 00:00:30 (no step beats, and too few collectives"));
  CHECK(proto::describe(r).find("0.0 %") == std::string::npos);
}

TEST_CASE("goodput: a script without step beats is timed by its collectives, stalls apart", "[goodput]") {
  GoodputLedger ledger(t0);
  proto::AttemptMilestones m;
  m.round = 0;
  m.steps.measure = proto::AccountMeasure::kCollectives;
  m.steps.first_step_age_s = 27;  // 3 s in
  m.steps.counted_age_s = 1;      // until 29 s
  m.steps.productive_s = 21;
  m.steps.stall_s = 5;
  m.steps.steps = 210;
  ledger.milestones(0, m, t0 + 30s);
  const auto r = ledger.report(t0 + 30s, true);
  CHECK(r.productive_s == Approx(21));
  CHECK(r.stall_s == Approx(5));
  CHECK(r.shutdown_s == Approx(1));
  CHECK(proto::accounted_s(r) == Approx(30));
  CHECK(r.measure == proto::AccountMeasure::kCollectives);
  CHECK_THAT(proto::describe(r), Catch::StartsWith("goodput 70.0 % of 00:00:30 (timed by its collectives: no step "
                                                   "beats); badput: stalls 5.0s, start-up 3.0s, shutdown 1.0s"));
}

TEST_CASE("goodput: the account counted furthest is the reference, and two faults in a row", "[goodput]") {
  GoodputLedger ledger(t0);
  ledger.milestones(0, beaten(0, 10, 2, 8), t0 + 11s);  // node a: until 9 s
  ledger.milestones(0, beaten(0, 9, 0, 9), t0 + 10s);   // node b: until 10 s, the furthest
  ledger.milestones(0, beaten(0, 10, 3, 7), t0 + 11s);  // node a again: until 8 s
  ledger.restarted(1, proto::RestartCause::kNodeLost, t0 + 12s);
  ledger.restarted(2, proto::RestartCause::kNodeLost, t0 + 15s);  // during the first restart
  const auto r = ledger.report(t0 + 20s, false);
  CHECK(r.productive_s == Approx(9));
  CHECK(r.restarts == 2);
  CHECK(r.restarts_s == Approx(3 + 5));  // the second restart has no first step yet: all of it so far
  CHECK(proto::accounted_s(r) == Approx(20));
}

TEST_CASE("goodput: idle hot spares are node-seconds beside the split", "[goodput]") {
  GoodputLedger ledger(t0);
  ledger.spares(2, t0 + 10s);
  ledger.spares(1, t0 + 20s);
  const auto r = ledger.report(t0 + 30s, false);
  CHECK(r.spare_node_s == Approx(2 * 10 + 1 * 10));
  CHECK(proto::accounted_s(r) == Approx(30));
  CHECK(proto::describe(r).find("hot spares idle 30s (node-seconds)") != std::string::npos);
}

TEST_CASE("goodput: the one-line summary names the causes, largest first", "[goodput]") {
  proto::GoodputReport r;
  r.wall_s = 3723;
  r.productive_s = 3466;
  r.ratio = r.productive_s / r.wall_s;
  r.restarts_s = 130;
  r.restarts = 3;
  r.checkpoint_s = 62;
  r.startup_s = 41;
  r.shutdown_s = 0.01;  // too small to name
  CHECK(proto::describe(r) ==
        "goodput 93.1 % of 01:02:03; badput: restarts 2m10s (3), checkpoints 1m02s, start-up 41s");
}

TEST_CASE("goodput: phases are told apart by name", "[goodput]") {
  CHECK(proto::phase_kind("train") == proto::PhaseKind::kTrain);
  CHECK(proto::phase_kind("") == proto::PhaseKind::kTrain);
  CHECK(proto::phase_kind("checkpoint") == proto::PhaseKind::kCheckpoint);
  CHECK(proto::phase_kind("save_ckpt") == proto::PhaseKind::kCheckpoint);
  CHECK(proto::phase_kind("load") == proto::PhaseKind::kCheckpoint);
  CHECK(proto::phase_kind("eval") == proto::PhaseKind::kOther);
}
