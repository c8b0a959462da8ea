#include <catch2/catch.hpp>

#include "common/clock_offset.hpp"

using namespace meshrun;

namespace {
constexpr int64_t kEpoch = 1'795'000'000'000'000'000;  // 2026, in nanoseconds: near int64's limit / 5
constexpr int64_t kMs = 1'000'000;
}  // namespace

TEST_CASE("clock offset: the other clock minus ours, from the midpoint of the round trip", "[clock]") {
  ClockOffset c;
  CHECK_FALSE(c.estimate());
  // The other clock is 7 s ahead; the request took 1 ms each way.
  c.add(kEpoch, kEpoch + 7000 * kMs + 1 * kMs, kEpoch + 2 * kMs);
  const auto e = c.estimate();
  REQUIRE(e);
  CHECK(e->offset_s == Approx(7.0).margin(1e-9));
  CHECK(e->uncertainty_s == Approx(0.001).margin(1e-9));
}

TEST_CASE("clock offset: the shortest round trip wins, whatever a slow answer claims", "[clock]") {
  ClockOffset c;
  // A busy peer answered 40 ms late: its reading skews the midpoint by 20 ms.
  c.add(kEpoch, kEpoch - 3000 * kMs + 1 * kMs, kEpoch + 42 * kMs);
  c.add(kEpoch + 1000 * kMs, kEpoch - 2000 * kMs + 1 * kMs, kEpoch + 1002 * kMs);
  const auto e = c.estimate();
  REQUIRE(e);
  CHECK(e->offset_s == Approx(-3.0).margin(1e-6));
  CHECK(e->uncertainty_s == Approx(0.001).margin(1e-9));
}

TEST_CASE("clock offset: an answer before its request is dropped, old samples age out", "[clock]") {
  ClockOffset c;
  c.add(kEpoch, kEpoch, kEpoch - 1);
  CHECK_FALSE(c.estimate());
  c.add(kEpoch, kEpoch + 5000 * kMs, kEpoch);  // a perfect sample (+5 s)...
  for (size_t i = 0; i < ClockOffset::kSamples; ++i) {
    const int64_t t = kEpoch + static_cast<int64_t>(i + 1) * 1000 * kMs;
    c.add(t, t + 6000 * kMs + 2 * kMs, t + 4 * kMs);  // ...then the clock moved to +6 s
  }
  CHECK(c.estimate()->offset_s == Approx(6.0).margin(1e-6));
}
