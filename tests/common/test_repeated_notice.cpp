// RepeatedNotice: said once, then at most once per interval with a count.
#include <catch2/catch.hpp>

#include "common/repeated_notice.hpp"

using meshrun::RepeatedNotice;
using namespace std::chrono_literals;

TEST_CASE("a repeated condition is said once, then once per interval with its count", "[repeated_notice]") {
  RepeatedNotice notice(60s);
  const auto t0 = RepeatedNotice::Clock::time_point{} + 1000s;
  const auto first = notice.occurred("copy skipped", t0);
  REQUIRE(first);
  CHECK(*first == "copy skipped [said once; if it recurs, again at most every 1 minute with a count]");
  for (int i = 1; i < 30; ++i) CHECK_FALSE(notice.occurred("copy skipped", t0 + std::chrono::seconds(i)));
  CHECK(notice.count() == 30);
  CHECK(notice.unsaid() == 29);
  const auto later = notice.occurred("copy skipped at step 31", t0 + 60s);
  REQUIRE(later);
  CHECK(*later == "copy skipped at step 31 [31 times in all, 30 since the last line]");
  CHECK(notice.unsaid() == 0);
  CHECK_FALSE(notice.occurred("copy skipped", t0 + 119s));
  CHECK(notice.occurred("copy skipped", t0 + 120s));
  CHECK(notice.count() == 33);
}

TEST_CASE("a condition that never happened says nothing and counts nothing", "[repeated_notice]") {
  const RepeatedNotice notice;
  CHECK(notice.count() == 0);
  CHECK(notice.unsaid() == 0);
}
