#include <catch2/catch.hpp>

#include "rendezvous/straggler.hpp"

using namespace meshrun;
using namespace meshrun::rendezvous;

namespace {
HostedRank rank(int r, double step_time, double compute = 0, const std::string& phase = "train") {
  proto::RankProgress p;
  p.rank = r;
  p.phase = phase;
  p.step_time_s = step_time;
  p.compute_s = compute;
  return HostedRank{"host-" + std::to_string(r / 2), p};
}
}  // namespace

TEST_CASE("stragglers: compute_s names the slow rank even when lockstep makes step times equal", "[straggler]") {
  const auto found = find_stragglers({rank(0, 0.2, 0.1), rank(1, 0.2, 0.1), rank(2, 0.2, 0.2), rank(3, 0.2, 0.1)}, 1.3);
  REQUIRE(found.size() == 1);
  CHECK(found[0].rank == 2);
  CHECK(found[0].host == "host-1");
  CHECK(found[0].seconds == Approx(0.2));
  CHECK(found[0].median_seconds == Approx(0.1));
}

TEST_CASE("stragglers: step time counts when no compute_s, and two ranks compare against the faster", "[straggler]") {
  const auto found = find_stragglers({rank(0, 0.10), rank(1, 0.15)}, 1.3);
  REQUIRE(found.size() == 1);
  CHECK(found[0].rank == 1);
  CHECK(find_stragglers({rank(0, 0.10), rank(1, 0.12)}, 1.3).empty());  // under the threshold
}

TEST_CASE("stragglers: nobody with one rank, threshold 0, or only ranks outside train", "[straggler]") {
  CHECK(find_stragglers({rank(0, 0.1)}, 1.3).empty());
  CHECK(find_stragglers({rank(0, 0.1), rank(1, 1.0)}, 0).empty());
  CHECK(find_stragglers({rank(0, 0.1), rank(1, 1.0, 0, "eval")}, 1.3).empty());
  auto hung = rank(1, 1.0);
  hung.progress.hung = true;
  CHECK(find_stragglers({rank(0, 0.1), hung}, 1.3).empty());
}

TEST_CASE("straggler alerts from beats: named when most readings of 5 s are slow, cleared when most are not",
          "[straggler]") {
  StragglerFilter filter;
  int64_t step = 0;
  TimePoint now{};
  // One heartbeat a second: both ranks moved `steps` steps; rank 1's measure is `ratio` times rank 0's 0.10.
  const auto beat = [&](double ratio, int64_t steps = 10, std::set<int> fresh = {0, 1}) {
    step += steps;
    // An early heartbeat (arrival answers: no new step) goes out between the regular ones, a second apart.
    now += steps > 0 ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(100);
    std::vector<HostedRank> ranks = {rank(0, 0.10), rank(1, 0.10 * ratio)};
    for (auto& r : ranks) r.progress.step = step;
    filter.update(ranks, fresh, 1.3, now);
    return filter.named(ranks, 1.3);
  };
  const auto healthy = [&](int beats) {
    for (int i = 0; i < beats; ++i) CHECK(beat(1.0).empty());
  };
  healthy(6);
  // A healthy rank on busy shared cores: single readings over the threshold, never most of 5 s.
  for (double noise : {1.37, 1.1, 1.42, 1.42, 1.0, 1.32, 1.05, 1.4, 1.1, 1.0}) CHECK(beat(noise).empty());
  healthy(6);
  // Three heartbeats at 1.42x (the scheduler served others first for 3 s): half the window, not most.
  for (int i = 0; i < 3; ++i) CHECK(beat(1.42).empty());
  healthy(6);
  // A rank limited to half a core, its readings as logged (two read fast when the quota's off-periods
  // missed its compute): named once 4 of the window's 6 are over.
  for (double slow : {1.44, 2.41, 2.18, 1.0, 1.0}) CHECK(beat(slow).empty());
  REQUIRE(beat(2.28).size() == 1);
  CHECK(filter.named({rank(0, 0.10), rank(1, 0.228)}, 1.3).front().rank == 1);
  // Early heartbeats (arrival answers) bring no new step: no reading, however many.
  for (int i = 0; i < 4; ++i) CHECK(beat(1.0, 0).size() == 1);
  // Named while most of the window is over the exit ratio (1.15x); cleared once most is under.
  CHECK(beat(1.25).size() == 1);
  CHECK(beat(1.1).size() == 1);
  CHECK(beat(1.1).empty());
  healthy(6);
  // Slow steps (2 a second): the window reaches back 20 steps (three healthy readings), and 4 slow of its 7
  // name it.
  for (int i = 0; i < 3; ++i) CHECK(beat(1.5, 2).empty());
  CHECK(beat(1.5, 2).size() == 1);
  for (int i = 0; i < 3; ++i) CHECK(beat(1.0).size() == 1);  // 3 healthy readings of 6: still named
  REQUIRE(beat(1.0).empty());
  healthy(6);
  // Heartbeats of another node (rank 1 not fresh) do not move rank 1's state. 8 s without a reading of rank 1
  // (a save, an evaluation) start its window afresh: three readings at 1.42x after it are not 5 s of them.
  for (int i = 0; i < 8; ++i) CHECK(beat(1.5, 10, {0}).empty());
  for (int i = 0; i < 3; ++i) CHECK(beat(1.42).empty());
  healthy(6);
  for (int i = 0; i < 8; ++i) CHECK(beat(1.5, 10, {0}).empty());
  for (int i = 0; i < 5; ++i) CHECK(beat(1.5).empty());  // a fresh window spans 5 s at its sixth reading
  CHECK(beat(1.5).size() == 1);
  // A restart from a checkpoint (the rank's step went back): it starts over, unnamed.
  step = 0;
  CHECK(beat(1.5).empty());
}

TEST_CASE("straggler alerts from beats: a window of slow steps reaches back 20 steps", "[straggler]") {
  StragglerFilter filter;
  int64_t step = 0;
  TimePoint now{};
  // One step per heartbeat, a second apart: 5 s are 5 steps, so 20 steps decide the window's length.
  const auto beat = [&](double ratio) {
    now += std::chrono::seconds(1);
    std::vector<HostedRank> ranks = {rank(0, 0.10), rank(1, 0.10 * ratio)};
    ++step;
    for (auto& r : ranks) r.progress.step = step;
    filter.update(ranks, {0, 1}, 1.3, now);
    return filter.named(ranks, 1.3);
  };
  for (int i = 0; i < 20; ++i) CHECK(beat(1.0).empty());
  // The window holds 21 readings: named at the 11th slow one, when most of them are (5 s alone: the 4th).
  for (int i = 0; i < 10; ++i) CHECK(beat(1.5).empty());
  CHECK(beat(1.5).size() == 1);
}

TEST_CASE("arrival-time stragglers: readings are probes, so heartbeats repeating one probe never clear",
          "[straggler]") {
  StragglerFilter filter;
  int64_t collectives = 0;
  // One heartbeat after `probes` counted probes: rank 1's compute per collective is `slow` (rank 0's 0.10).
  const auto beat = [&](double slow, int64_t probes) {
    collectives += 30;
    std::vector<HostedRank> ranks = {rank(0, 0.10), rank(1, 0.10)};
    ranks[0].progress.arrival_compute_s = 0.10;
    ranks[1].progress.arrival_compute_s = slow;
    for (auto& r : ranks) r.progress.collectives = {{"0", collectives}};
    // The last probes found rank 1 slow when its figure is (ArrivalTiming::over_lately).
    filter.update(ranks, {0, 1}, 1.3, TimePoint{}, probes, slow > 0.13 ? std::set<int>{1} : std::set<int>{});
    return filter.named(ranks, 1.3);
  };
  // Healthy probes: nobody.
  for (int i = 0; i < 6; ++i) CHECK(beat(0.10, 1).empty());
  // A figure over the threshold that the last probes each found over names it at once.
  const auto named = beat(0.2, 2);
  REQUIRE(named.size() == 1);
  CHECK(named.front().rank == 1);
  CHECK(named.front().measure == proto::StragglerMeasure::kArrivals);
  // Back to normal: cleared only after kClear new probes, however many heartbeats repeat one of them.
  for (int i = 0; i < 5; ++i) CHECK(beat(0.10, 3).size() == 1);
  CHECK(beat(0.10, 4).size() == 1);
  CHECK(beat(0.10, 5).empty());
}
