// The pure parts of progress tracking: the beat format, per-rank step times and the hang budget.
#include <catch2/catch.hpp>
#include <chrono>

#include "common/error.hpp"
#include "launcher/progress/attempt_clock.hpp"
#include "launcher/progress/hang_policy.hpp"
#include "launcher/progress/rank_tracker.hpp"
#include "proto/worker/progress_beat.hpp"

using namespace meshrun;
using namespace meshrun::launcher;
using namespace meshrun::proto;
using namespace std::chrono_literals;

TEST_CASE("beats: every documented field is read, unknown keys are ignored", "[progress]") {
  const Beat b = parse_beat("step=120 phase=eval loss=2.5 tokens_per_s=51200 compute_s=0.094 lr=3e-4\n");
  CHECK(b.step == 120);
  CHECK(b.phase == "eval");
  CHECK(b.loss == Approx(2.5));
  CHECK(b.tokens_per_s == Approx(51200));
  CHECK(b.compute_s == Approx(0.094));
  const Beat minimal = parse_beat("step=0");
  CHECK(minimal.phase == "train");
  CHECK_FALSE(minimal.loss.has_value());
}

TEST_CASE("beats: a malformed one is an error naming the field", "[progress]") {
  CHECK_THROWS_WITH(parse_beat("loss=1.0"), Catch::Contains("no step=N field"));
  CHECK_THROWS_WITH(parse_beat("step=-1"), Catch::Contains("step='-1' is not an integer >= 0"));
  CHECK_THROWS_WITH(parse_beat("step=3x"), Catch::Contains("step='3x'"));
  CHECK_THROWS_WITH(parse_beat("step=3 loss=nan"), Catch::Contains("loss='nan' is not a finite number"));
  CHECK_THROWS_WITH(parse_beat("step=3 phase=a/b"), Catch::Contains("phase='a/b'"));
  CHECK_THROWS_WITH(parse_beat("step=3 oops"), Catch::Contains("field 'oops' is not key=value"));
  CHECK_THROWS_AS(parse_beat(""), ProtocolError);
}

TEST_CASE("format_beat writes what parse_beat reads back", "[progress][beat]") {
  const Beat sent{.step = 42, .phase = "eval", .loss = 2.25, .tokens_per_s = 51200.5, .compute_s = 0.0931};
  CHECK(format_beat(sent) == "step=42 phase=eval loss=2.25 tokens_per_s=51200.5 compute_s=0.0931");
  const Beat got = parse_beat(format_beat(sent));
  CHECK(got.step == 42);
  CHECK(got.phase == "eval");
  CHECK(got.loss == 2.25);
  CHECK(got.tokens_per_s == 51200.5);
  CHECK(got.compute_s == 0.0931);
  Beat bare;
  bare.step = 7;
  CHECK(format_beat(bare) == "step=7");  // the train phase and absent numbers are left out
}

TEST_CASE("tracker: time per step is a median over the window, per step even when steps are skipped", "[progress]") {
  RankTracker t(7);
  const auto t0 = RankTracker::Clock::time_point{};
  t.on_beat(parse_beat("step=1"), t0);
  CHECK_FALSE(t.median_step_s().has_value());
  t.on_beat(parse_beat("step=2"), t0 + 100ms);
  t.on_beat(parse_beat("step=2 phase=eval"), t0 + 150ms);  // same step: no new interval
  t.on_beat(parse_beat("step=4"), t0 + 300ms);             // two steps in 150 ms
  t.on_beat(parse_beat("step=5"), t0 + 2300ms);            // one slow step does not move the median
  CHECK(t.intervals() == 3);
  CHECK(*t.median_step_s() == Approx(0.1));
  const auto s = t.summary(t0 + 2500ms, false);
  CHECK(s.rank == 7);
  CHECK(s.step == 5);
  CHECK(s.since_beat_s == Approx(0.2));
}

TEST_CASE("hang budget: nothing before beats or warm-up, floor + 2x median after, longer outside train", "[progress]") {
  HangPolicy policy;
  policy.floor_s = 10;
  policy.phase_s = 600;
  RankTracker t(0);
  const auto t0 = RankTracker::Clock::time_point{};
  CHECK_FALSE(policy.budget_s(t).has_value());  // a rank that never beats is never judged
  for (int step = 1; step <= HangPolicy::kWarmupSteps; ++step) {
    t.on_beat(parse_beat("step=" + std::to_string(step)), t0 + step * 1s);
    CHECK_FALSE(policy.budget_s(t).has_value());  // warming up
  }
  t.on_beat(parse_beat("step=4"), t0 + 4s);
  CHECK(*policy.budget_s(t) == Approx(12));
  t.on_beat(parse_beat("step=4 phase=checkpoint"), t0 + 5s);
  CHECK(*policy.budget_s(t) == Approx(600));
  policy.mode = HangPolicy::Mode::kFixed;
  policy.fixed_s = 5;
  t.on_beat(parse_beat("step=5"), t0 + 6s);
  CHECK(*policy.budget_s(t) == Approx(5));
  policy.mode = HangPolicy::Mode::kOff;
  CHECK_FALSE(policy.budget_s(t).has_value());
  CHECK_FALSE(policy.stopped_budget_s().has_value());
}

TEST_CASE("attempt clock: a node's marks are its last rank's, with load beats and without beats",
          "[progress][recovery]") {
  using namespace std::chrono_literals;
  using launcher::AttemptClock;
  const auto t0 = AttemptClock::Clock::time_point{} + 100s;
  const auto rank = [](int r, const std::string& phase, int64_t collectives) {
    proto::RankProgress p;
    p.rank = r;
    p.phase = phase;
    if (collectives > 0) p.collectives["0"] = collectives;
    return p;
  };
  SECTION("meshrun-trainer: load, ready, then steps") {
    AttemptClock clock(3, 2, t0);
    clock.observe({rank(0, "load", 0)}, t0 + 1s);
    auto m = clock.milestones(t0 + 1s);
    CHECK(m.round == 3);
    CHECK(m.spawned_age_s == Approx(1.0));
    CHECK(m.initialized_age_s == -1);  // rank 1 is not up yet
    clock.observe({rank(0, "ready", 0), rank(1, "load", 0)}, t0 + 2s);
    clock.observe({rank(0, "train", 0), rank(1, "ready", 0)}, t0 + 3s);
    CHECK_FALSE(clock.settled());
    clock.observe({rank(0, "train", 0), rank(1, "train", 0)}, t0 + 4s);
    CHECK(clock.settled());
    m = clock.milestones(t0 + 5s);
    CHECK(m.load_beats);
    CHECK(m.initialized_age_s == Approx(3.0));  // rank 1's first beat, at 2 s
    CHECK(m.loaded_age_s == Approx(2.0));       // rank 1 ready at 3 s
    CHECK(m.first_step_age_s == Approx(1.0));   // rank 1's first step at 4 s
  }
  SECTION("a script without beats: up at its first collective, a step at its second") {
    AttemptClock clock(1, 1, t0);
    clock.observe({rank(0, "", 1)}, t0 + 2s);
    clock.observe({rank(0, "", 2)}, t0 + 3s);
    const auto m = clock.milestones(t0 + 3s);
    CHECK_FALSE(m.load_beats);
    CHECK(m.initialized_age_s == Approx(1.0));
    CHECK(m.loaded_age_s == Approx(1.0));  // nothing to load: the load phase is empty
    CHECK(m.first_step_age_s == Approx(0.0));
  }
}
