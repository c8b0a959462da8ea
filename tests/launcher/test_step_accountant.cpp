// StepAccountant: one rank's attempt split into productive steps, recomputed steps, phases and stalls, from
// beats; CollectiveAccountant: the same from the collectives of a script that beats no steps.
#include <catch2/catch.hpp>
#include <chrono>

#include "launcher/progress/collective_accountant.hpp"
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
  return a.productive_s + a.recomputed_s + a.checkpoint_s + a.other_phases_s + a.stall_s;
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

TEST_CASE("step account: a step interval far longer than usual is a stall, less the step's usual time",
          "[progress][goodput]") {
  StepAccountant acc;
  acc.on_beat(step(1), t0, std::nullopt);
  acc.on_beat(step(2), t0 + 1s, std::nullopt);
  acc.on_beat(step(3), t0 + 2s, 1.0);
  acc.on_beat(step(4), t0 + 4s, 1.0);   // twice as long: a slow step, not a stall
  acc.on_beat(step(5), t0 + 12s, 1.0);  // 8 s: a wait the script named no phase for
  const auto a = acc.account(t0 + 12s);
  CHECK(a.stall_s == Approx(7.0));
  CHECK(a.productive_s == Approx(5.0));
  CHECK(covered(a) == Approx(12.0));
}

TEST_CASE("collective account: a script without beats is timed by its busiest group's rhythm, stalls apart",
          "[progress][goodput]") {
  using C = CollectiveAccountant;
  C acc;
  const auto at = [](double s) {
    return t0 + std::chrono::duration_cast<C::Clock::duration>(std::chrono::duration<double>(s));
  };
  acc.on_status({{"0", 1}}, at(0));  // the collective that set the job up
  CHECK_FALSE(acc.started());
  acc.on_status({{"0", 1}}, at(2.5));
  acc.on_status({{"0", 2}}, at(3));  // its second: the first step, dated halfway from the report before (at most
                                     // half the hook's report interval before it)
  const double half_report = std::chrono::duration<double>(C::kReportEvery).count() / 2;
  REQUIRE(acc.started());
  for (int i = 1; i <= 10; ++i) acc.on_status({{"0", 2 + 5 * i}, {"1", 1}}, at(3 + 0.5 * i));  // 5 per 0.5 s report
  acc.on_status({{"0", 52}}, at(8));   // unchanged: no completion, no gap
  acc.on_status({{"0", 57}}, at(14));  // 6 s later: a stall (a rank-0 save), less the usual 0.5 s
  acc.on_status({{"0", 62}}, at(14.5));
  const auto a = acc.account(at(15));
  CHECK(a.measure == proto::AccountMeasure::kCollectives);
  CHECK(a.first_step_age_s == Approx(12 + half_report));
  CHECK(a.counted_age_s == Approx(0.5));
  CHECK(acc.rhythm_s() == Approx(0.5));
  CHECK(a.stall_s == Approx(5.5));
  CHECK(a.productive_s == Approx(6 + half_report));
  CHECK(a.steps == 60);  // the busiest group's completions since the first step
  CHECK(covered(a) == Approx(a.first_step_age_s - a.counted_age_s));
  acc.close();
  acc.on_status({{"0", 100}}, at(20));  // after the workers ended: ignored
  CHECK(acc.account(at(20)).steps == 60);
}
