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
