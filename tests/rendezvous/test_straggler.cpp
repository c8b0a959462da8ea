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
  const auto beat = [&](double slow, std::set<int> fresh = {0, 1}) {
    const std::vector<HostedRank> ranks = {rank(0, 0.10), rank(1, slow)};
    filter.update(ranks, fresh, 1.3);
    return filter.named(ranks, 1.3);
  };
  // A healthy pair whose noise crosses the threshold on single heartbeats: never named.
  for (double noise : {1.37, 1.1, 1.35, 1.2, 1.4, 1.0, 1.32, 1.25}) CHECK(beat(0.10 * noise).empty());
  // A rank really 1.5x slower: named on the second heartbeat in a row.
  CHECK(beat(0.15).empty());
  REQUIRE(beat(0.15).size() == 1);
  CHECK(filter.named({rank(0, 0.10), rank(1, 0.15)}, 1.3).front().rank == 1);
  // Dipping just under the threshold keeps it named; three heartbeats under 1.15x clear it.
  CHECK(beat(0.125).size() == 1);
  CHECK(beat(0.11).size() == 1);
  CHECK(beat(0.11).size() == 1);
  CHECK(beat(0.11).empty());
  // Heartbeats of another node (rank 1 not fresh) do not move rank 1's state.
  CHECK(beat(0.15, {0}).empty());
  CHECK(beat(0.15, {0}).empty());
  CHECK(beat(0.15, {0}).empty());
  CHECK(beat(0.15).empty());
  CHECK(beat(0.15).size() == 1);
}
