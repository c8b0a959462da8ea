#include <catch2/catch.hpp>

#include "rendezvous/arrival_timing.hpp"
#include "rendezvous/straggler.hpp"

using namespace meshrun;
using namespace meshrun::rendezvous;

namespace {

constexpr double kT0 = 1'795'000'000.0;  // unix seconds

HostedRank beatless(int rank, int64_t completed) {
  proto::RankProgress p;
  p.rank = rank;
  p.collectives = {{"0", completed}};
  return HostedRank{"node" + std::to_string(rank), p};
}

// Rank `r`'s answer to `probe` in a lockstep job: `count` collectives, each preceded by `compute` seconds
// of the slowest rank's work; a rank computing `own` seconds waits (slowest - own) in each, so it enters
// each collective that much earlier than the slowest.
proto::ArrivalBlock answer(const proto::ArrivalProbe& probe, double own, double slowest, double uncertainty = 1e-5) {
  const auto count = probe.last_seq - probe.first_seq + 1;
  const double mean_entry = kT0 + slowest * static_cast<double>(count) / 2 - (slowest - own);
  return proto::ArrivalBlock{.group = probe.group,
                             .first_seq = probe.first_seq,
                             .last_seq = probe.last_seq,
                             .count = count,
                             .mean_unix_s = mean_entry,
                             .span_s = slowest * static_cast<double>(count - 1),
                             .uncertainty_s = uncertainty};
}

// Runs `t` through one probe per entry of `per_probe` (each rank's compute in it, the slowest's as the cadence),
// from collective `completed` on (updated).
void run_probe_sequence(ArrivalTiming& t, FakeClock& clock, const std::vector<std::vector<double>>& per_probe,
                        int64_t& completed, double uncertainty = 1e-5) {
  const size_t world = per_probe.front().size();
  std::vector<HostedRank> ranks;
  for (size_t r = 0; r < world; ++r) ranks.push_back(beatless(static_cast<int>(r), completed));
  t.update(ranks, static_cast<int>(world), clock.now());  // learns the group; probes start after what ran so far
  for (const auto& compute : per_probe) {
    const double slowest = *std::max_element(compute.begin(), compute.end());
    clock.advance(ArrivalTiming::kProbeEvery);
    completed += 100;
    for (auto& r : ranks) r = beatless(r.progress.rank, completed);
    t.update(ranks, static_cast<int>(world), clock.now());
    const auto probe = t.probe();
    REQUIRE_FALSE(probe.group.empty());
    CHECK(probe.last_seq == completed);
    for (size_t r = 0; r < ranks.size(); ++r)
      ranks[r].progress.arrivals = answer(probe, compute[r], slowest, uncertainty);
    t.update(ranks, static_cast<int>(world), clock.now());
  }
}

// Runs `t` through `probes` probes with the same compute per rank.
void run_probes(ArrivalTiming& t, FakeClock& clock, const std::vector<double>& compute, int probes,
                double uncertainty = 1e-5) {
  int64_t completed = 10;
  run_probe_sequence(t, clock, std::vector<std::vector<double>>(static_cast<size_t>(probes), compute), completed,
                     uncertainty);
}

// Two ranks seen at collective 10, then at 110 a probe later: the probe [11, 110] is open.
std::vector<HostedRank> open_probe(ArrivalTiming& t, FakeClock& clock) {
  std::vector<HostedRank> ranks = {beatless(0, 10), beatless(1, 10)};
  t.update(ranks, 2, clock.now());
  clock.advance(ArrivalTiming::kProbeEvery);
  ranks = {beatless(0, 110), beatless(1, 110)};
  t.update(ranks, 2, clock.now());
  REQUIRE(t.probe().first_seq == 11);
  return ranks;
}

}  // namespace

TEST_CASE("arrival timing: the rank the others wait for computes 1.5x, on any clock offset", "[straggler]") {
  ArrivalTiming t;
  FakeClock clock;
  run_probes(t, clock, {0.030, 0.020}, 3);
  CHECK(t.compute_s(0) == Approx(0.030).epsilon(0.02));
  CHECK(t.compute_s(1) == Approx(0.020).epsilon(0.02));
  CHECK(t.tally().imprecise == 0);
  CHECK(t.tally().counted == 3);
}

TEST_CASE("arrival timing: probes tile the group's history, one at a time, after the warm-up", "[straggler]") {
  ArrivalTiming t;
  FakeClock clock;
  std::vector<HostedRank> ranks = {beatless(0, 50), beatless(1, 48)};
  t.update(ranks, 2, clock.now());
  CHECK(t.probe().group.empty());  // what ran before (set-up, first steps) is never probed
  clock.advance(ArrivalTiming::kProbeEvery);
  ranks = {beatless(0, 90), beatless(1, 91)};
  t.update(ranks, 2, clock.now());
  CHECK(t.probe().group == "0");
  CHECK(t.probe().first_seq == 49);  // after the least completed of the first look
  CHECK(t.probe().last_seq == 90);   // what every rank completed
  const auto first = t.probe();
  ranks[0].progress.arrivals = answer(first, 0.02, 0.02);
  ranks[1].progress.arrivals = answer(first, 0.02, 0.02);
  clock.advance(std::chrono::seconds(1));
  ranks[0].progress.collectives["0"] = ranks[1].progress.collectives["0"] = 120;
  t.update(ranks, 2, clock.now());
  CHECK(t.probe().group.empty());  // answered; the next one waits for kProbeEvery
  clock.advance(ArrivalTiming::kProbeEvery);
  t.update(ranks, 2, clock.now());
  CHECK(t.probe().first_seq == 91);
  CHECK(t.probe().last_seq == 120);
}

TEST_CASE("arrival timing: a probe counts only when all ranks answered it whole and precisely", "[straggler]") {
  FakeClock clock;
  SECTION("offsets too uncertain for the collectives' pace") {
    ArrivalTiming t;
    run_probes(t, clock, {0.030, 0.020}, 2, 0.005);  // 5 ms per collective of 30 ms: > 10 %
    CHECK(t.compute_s(0) == 0);
    CHECK(t.tally().imprecise == 2);
  }
  SECTION("a rank's recorder lost part of the range") {
    ArrivalTiming t;
    auto ranks = open_probe(t, clock);
    ranks[0].progress.arrivals = answer(t.probe(), 0.03, 0.03);
    ranks[1].progress.arrivals = answer(t.probe(), 0.02, 0.03);
    ranks[1].progress.arrivals.count -= 1;
    t.update(ranks, 2, clock.now());
    CHECK(t.compute_s(0) == 0);
    CHECK(t.probe().group.empty());  // dropped: a newer range is asked next
    CHECK(t.tally().partial == 1);
    CHECK(t.tally().counted == 0);
  }
  SECTION("a rank never answers: the probe is given up") {
    ArrivalTiming t;
    auto ranks = open_probe(t, clock);
    ranks[0].progress.arrivals = answer(t.probe(), 0.03, 0.03);
    clock.advance(ArrivalTiming::kGiveUpAfter + std::chrono::seconds(1));
    ranks[0].progress.collectives["0"] = ranks[1].progress.collectives["0"] = 400;
    t.update(ranks, 2, clock.now());
    CHECK(t.probe().first_seq == 111);  // a fresh probe at once
    CHECK(t.probe().last_seq == 400);
    CHECK(t.tally().abandoned == 1);
  }
  SECTION("a new round forgets the figures and the open probe, not the run's tally") {
    ArrivalTiming t;
    int64_t completed = 10;
    run_probe_sequence(t, clock, {{0.030, 0.020}, {0.030, 0.020}}, completed);
    clock.advance(ArrivalTiming::kProbeEvery);
    completed += 100;
    t.update({beatless(0, completed), beatless(1, completed)}, 2, clock.now());
    REQUIRE_FALSE(t.probe().group.empty());  // a third one, open
    t.start_over();
    CHECK(t.probe().group.empty());
    CHECK(t.compute_s(0) == 0);
    CHECK(t.tally().counted == 2);
    CHECK(t.tally().abandoned == 1);  // the probe open when the round ended
  }
}

TEST_CASE("stragglers: ranks without beats are judged on their arrival figures", "[straggler]") {
  auto make = [](int rank, double arrival_compute, int64_t completed) {
    proto::RankProgress p;
    p.rank = rank;
    p.collectives = {{"0", completed}};
    p.arrival_compute_s = arrival_compute;
    return HostedRank{"node" + std::to_string(rank), p};
  };
  const auto found = find_stragglers({make(0, 0.030, 100), make(1, 0.020, 100)}, 1.3);
  REQUIRE(found.size() == 1);
  CHECK(found[0].rank == 0);
  CHECK(found[0].measure == proto::StragglerMeasure::kArrivals);
  CHECK(found[0].median_seconds == Approx(0.020));

  // One rank reports compute_s and the other does not: the measure all share (arrivals) is used.
  auto beating = make(1, 0.020, 100);
  beating.progress.phase = "train";
  beating.progress.compute_s = 0.5;
  CHECK(find_stragglers({make(0, 0.030, 100), beating}, 1.3).at(0).measure == proto::StragglerMeasure::kArrivals);

  // Named at the first reading over once the last probes found the rank slow (over_lately), not
  // before; cleared after kClear probes under the exit ratio and kSteps collectives.
  StragglerFilter filter;
  filter.update({make(0, 0.030, 95), make(1, 0.020, 95)}, {0, 1}, 1.3, TimePoint{}, 1, {});
  CHECK(filter.named({make(0, 0.030, 95), make(1, 0.020, 95)}, 1.3).empty());
  filter.update({make(0, 0.030, 100), make(1, 0.020, 100)}, {0, 1}, 1.3, TimePoint{}, 2, {0});
  const auto named = filter.named({make(0, 0.030, 100), make(1, 0.020, 100)}, 1.3);
  REQUIRE(named.size() == 1);
  CHECK(named[0].rank == 0);
  filter.update({make(0, 0.021, 110), make(1, 0.020, 110)}, {0, 1}, 1.3, TimePoint{}, 3);
  filter.update({make(0, 0.021, 115), make(1, 0.020, 115)}, {0, 1}, 1.3, TimePoint{}, 4);
  filter.update({make(0, 0.021, 120), make(1, 0.020, 120)}, {0, 1}, 1.3, TimePoint{}, 5);
  CHECK(filter.named({make(0, 0.021, 120), make(1, 0.020, 120)}, 1.3).size() == 1);  // 10 collectives only
  filter.update({make(0, 0.021, 140), make(1, 0.020, 140)}, {0, 1}, 1.3, TimePoint{}, 6);
  CHECK(filter.named({make(0, 0.021, 140), make(1, 0.020, 140)}, 1.3).empty());
}

TEST_CASE("arrival timing: a lead that passes between healthy ranks is never over lately, a slow rank is",
          "[straggler]") {
  FakeClock clock;
  SECTION("busy cores: the lead alternates, one probe at a time over the threshold") {
    ArrivalTiming t;
    int64_t completed = 10;
    run_probe_sequence(t, clock, {{0.027, 0.020}, {0.020, 0.027}, {0.027, 0.020}}, completed);
    CHECK(t.over_lately(1.3).empty());
  }
  SECTION("a healthy rank that led two probes in a row, 1.26x and 1.34x: under the margin") {
    ArrivalTiming t;
    int64_t completed = 10;
    run_probe_sequence(t, clock, {{0.0252, 0.020}, {0.0268, 0.020}}, completed);
    CHECK(t.over_lately(1.3).empty());
  }
  SECTION("a rank slow probe after probe") {
    ArrivalTiming t;
    int64_t completed = 10;
    run_probe_sequence(t, clock, {{0.020, 0.020}, {0.020, 0.020}, {0.040, 0.020}}, completed);
    CHECK(t.over_lately(1.3).empty());  // one probe is not yet a pattern
    run_probe_sequence(t, clock, {{0.040, 0.020}}, completed);
    CHECK(t.over_lately(1.3) == std::set<int>{0});
    CHECK(t.compute_s(0) == Approx(0.040).epsilon(0.02));
    CHECK(t.over_lately(2.5).empty());
  }
  SECTION("a rank limited to half a core: 1.9x, then 1.23x (its off-periods fell inside collectives)") {
    ArrivalTiming t;
    int64_t completed = 10;
    run_probe_sequence(t, clock, {{0.020, 0.020}, {0.038, 0.020}, {0.0246, 0.020}}, completed);
    CHECK(t.over_lately(1.3) == std::set<int>{0});  // each over 1.15x, 1.57x on average
    run_probe_sequence(t, clock, {{0.022, 0.020}}, completed);
    CHECK(t.over_lately(1.3).empty());  // 1.1x: under the exit ratio
  }
}
