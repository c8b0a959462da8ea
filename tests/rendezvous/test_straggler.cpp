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

TEST_CASE("straggler alerts do not flap on noise: named after confirmation, cleared well under the threshold",
          "[straggler]") {
  StragglerFilter filter;
  int64_t step = 0;
  // One heartbeat: both ranks moved `steps` steps; rank 1's measure is `slow` (rank 0's 0.10).
  const auto beat = [&](double slow, int64_t steps = 10, std::set<int> fresh = {0, 1}) {
    step += steps;
    std::vector<HostedRank> ranks = {rank(0, 0.10), rank(1, slow)};
    for (auto& r : ranks) r.progress.step = step;
    filter.update(ranks, fresh, 1.3);
    return filter.named(ranks, 1.3);
  };
  // A healthy pair whose noise crosses the threshold on single heartbeats: never named.
  for (double noise : {1.37, 1.1, 1.35, 1.2, 1.4, 1.0, 1.32, 1.25}) CHECK(beat(0.10 * noise).empty());
  // Two heartbeats over, but within 20 steps (slow steps, few per heartbeat): not yet.
  CHECK(beat(0.15, 5).empty());
  CHECK(beat(0.15, 5).empty());
  CHECK(beat(0.15, 5).empty());
  CHECK(beat(0.15, 5).empty());
  REQUIRE(beat(0.15, 5).size() == 1);  // 20 steps after the streak began
  CHECK(filter.named({rank(0, 0.10), rank(1, 0.15)}, 1.3).front().rank == 1);
  // Dipping just under the threshold keeps it named; under 1.15x for 3 heartbeats and 20 steps clears it.
  CHECK(beat(0.125).size() == 1);
  CHECK(beat(0.11, 20).size() == 1);
  CHECK(beat(0.11, 0).size() == 1);  // early heartbeats (arrival answers): no new step, so no reading
  CHECK(beat(0.11, 0).size() == 1);
  CHECK(beat(0.11, 20).size() == 1);  // the second reading under, 20 steps on: still named
  CHECK(beat(0.11).empty());
  // Heartbeats of another node (rank 1 not fresh) do not move rank 1's state.
  for (int i = 0; i < 3; ++i) CHECK(beat(0.15, 10, {0}).empty());
  CHECK(beat(0.15).empty());
  CHECK(beat(0.15).empty());
  CHECK(beat(0.15).size() == 1);
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
    filter.update(ranks, {0, 1}, 1.3, probes, slow > 0.13 ? std::set<int>{1} : std::set<int>{});
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
