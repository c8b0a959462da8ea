// StepAccountant: one rank's attempt split into productive steps, recomputed steps and phases, from beats.
#include <catch2/catch.hpp>
#include <chrono>

#include "launcher/progress/step_accountant.hpp"

using namespace meshrun;
using namespace meshrun::launcher;
using namespace std::chrono_literals;

namespace {

using Clock = StepAccountant::Clock;
const Clock::time_point t0 = Clock::time_point{} + 100s;

proto::Beat step(int64_t n, const std::string& phase = proto::kTrainPhase) {
  proto::Beat b;
  b.step = n;
  b.phase = phase;
  return b;
}

/// The figures must tile [first step, counted]: nothing lost, nothing counted twice.
double covered(const proto::StepAccount& a) {
  return a.productive_s + a.recomputed_s + a.checkpoint_s + a.other_phases_s;
}

}  // namespace

TEST_CASE("step account: step intervals are productive, from the first step beat on", "[progress][goodput]") {
  StepAccountant acc;
  acc.on_beat(step(0, "load"), t0, std::nullopt);  // before the first step: the restart's ledger, not here
  acc.on_beat(step(1), t0 + 1s, std::nullopt);
  acc.on_beat(step(2), t0 + 2s, 1.0);
  acc.on_beat(step(4), t0 + 4s, 1.0);
  const auto a = acc.account(t0 + 4500ms);
  CHECK(a.first_step_age_s == Approx(3.5));
  CHECK(a.counted_age_s == Approx(0.5));  // the step under way is not counted yet
  CHECK(a.productive_s == Approx(3.0));
  CHECK(a.steps == 3);
  CHECK(a.last_step == 4);
  CHECK(covered(a) == Approx(a.first_step_age_s - a.counted_age_s));
}

TEST_CASE("step account: a checkpoint ended by a train beat of the same step is all checkpoint",
          "[progress][goodput]") {
  StepAccountant acc;
  acc.on_beat(step(1), t0, std::nullopt);
  acc.on_beat(step(2), t0 + 1s, std::nullopt);
  acc.on_beat(step(2, "checkpoint"), t0 + 1010ms, 1.0);
  const auto open = acc.account(t0 + 3s);  // an open phase accrues until the report
  CHECK(open.checkpoint_s == Approx(2.0));
  CHECK(open.counted_age_s == Approx(0.0));
  acc.on_beat(step(2), t0 + 6s, 1.0);  // meshrun-trainer: the save is done
  acc.on_beat(step(3), t0 + 7s, 1.0);
  const auto a = acc.account(t0 + 7s);
  CHECK(a.checkpoint_s == Approx(5.0));
  CHECK(a.productive_s == Approx(2.0));
  CHECK(covered(a) == Approx(7.0));
}

TEST_CASE("step account: a phase ended by the next step gives that step its median time", "[progress][goodput]") {
  StepAccountant acc;
  acc.on_beat(step(1), t0, std::nullopt);
  acc.on_beat(step(2), t0 + 1s, std::nullopt);
  acc.on_beat(step(2, "eval"), t0 + 1s, 1.0);
  acc.on_beat(step(3), t0 + 5s, 1.0);  // eval, then step 3 computed: 3 s of eval
  const auto a = acc.account(t0 + 5s);
  CHECK(a.other_phases_s == Approx(3.0));
  CHECK(a.productive_s == Approx(2.0));
  CHECK(a.checkpoint_s == 0);
}

TEST_CASE("step account: steps the run had finished before the restart are work lost", "[progress][goodput]") {
  StepAccountant acc(/*steps_done=*/12);
  acc.on_beat(step(10, "ready"), t0, std::nullopt);
  acc.on_beat(step(11), t0 + 1s, std::nullopt);
  acc.on_beat(step(12), t0 + 2s, 1.0);
  acc.on_beat(step(14), t0 + 4s, 1.0);  // 13 and 14 are new
  const auto a = acc.account(t0 + 4s);
  CHECK(a.recomputed_steps == 1);
  CHECK(a.steps == 2);
  CHECK(a.recomputed_s == Approx(1.0));
  CHECK(a.productive_s == Approx(2.0));
}

TEST_CASE("step account: closing ends an open phase at the workers' end, and later beats are ignored",
          "[progress][goodput]") {
  StepAccountant acc;
  acc.on_beat(step(1), t0, std::nullopt);
  acc.on_beat(step(2), t0 + 1s, std::nullopt);
  acc.on_beat(step(2, "checkpoint"), t0 + 1s, 1.0);
  acc.close(t0 + 3s);
  acc.on_beat(step(3), t0 + 9s, 1.0);
  const auto a = acc.account(t0 + 10s);
  CHECK(a.checkpoint_s == Approx(2.0));
  CHECK(a.counted_age_s == Approx(7.0));
  CHECK(a.productive_s == Approx(1.0));
}

TEST_CASE("step account: nothing before the first step beat", "[progress][goodput]") {
  StepAccountant acc;
  acc.on_beat(step(0, "load"), t0, std::nullopt);
  CHECK_FALSE(acc.started());
  const auto a = acc.account(t0 + 1s);
  CHECK(a.first_step_age_s == -1);
  CHECK(a.counted_age_s == -1);
}
