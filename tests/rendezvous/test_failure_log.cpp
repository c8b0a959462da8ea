// FailureLog: the daemon's time-ordered list of a run's worker failures (root cause across nodes).
#include <catch2/catch.hpp>

#include "rendezvous/failure_log.hpp"

using namespace meshrun;
using meshrun::rendezvous::FailureLog;

namespace {

proto::FailureReport report(int64_t round, int rank, int64_t unix_ms) {
  proto::FailureReport r;
  r.round = round;
  r.rank = rank;
  r.unix_ms = unix_ms;
  return r;
}

std::vector<int> ranks(const FailureLog& log) {
  std::vector<int> out;
  for (const auto& r : log.reports()) out.push_back(r.rank);
  return out;
}

}  // namespace

TEST_CASE("failures are ordered by when they happened, not by when they were reported", "[failure_log]") {
  FailureLog log;
  log.record(report(0, 0, 1'300));  // a consequence whose agent reported first
  log.record(report(0, 3, 1'000));  // the root cause, reported after its grace period
  log.record(report(0, 1, 1'300));  // same time as rank 0: after it (stable)
  CHECK(ranks(log) == std::vector<int>{3, 0, 1});
}

TEST_CASE("a newer round starts afresh and a late report of an older round is dropped", "[failure_log]") {
  FailureLog log;
  log.record(report(0, 1, 500));
  log.record(report(1, 2, 900));
  CHECK(ranks(log) == std::vector<int>{2});
  log.record(report(0, 7, 100));
  CHECK(ranks(log) == std::vector<int>{2});
}

TEST_CASE("the log keeps the earliest reports and clips long text", "[failure_log]") {
  FailureLog log;
  for (int i = 0; i < static_cast<int>(proto::kMaxFailureReports) + 10; ++i) log.record(report(0, i, 10'000 - i));
  REQUIRE(log.reports().size() == proto::kMaxFailureReports);
  CHECK(log.reports().front().rank == static_cast<int>(proto::kMaxFailureReports) + 9);  // the earliest
  auto big = report(0, 0, 1);
  big.error = std::string(10'000, 'x');
  big.traceback.assign(50, std::string(2'000, 'y'));
  log.record(big);
  CHECK(log.reports().front().error.size() == 512);
  CHECK(log.reports().front().traceback.size() == proto::kMaxTracebackLines);
  CHECK(log.reports().front().traceback.front().size() == 512);
}

TEST_CASE("a second report of the same rank replaces the first and keeps the earlier time", "[failure_log]") {
  FailureLog log;
  log.record(report(0, 3, 1'000));  // named by the daemon from the heartbeats
  log.record(report(0, 0, 1'200));
  auto detailed = report(0, 3, 1'500);  // its agent's own report, later, with the error
  detailed.error = "hung";
  log.record(detailed);
  REQUIRE(ranks(log) == std::vector<int>{3, 0});
  CHECK(log.reports().front().unix_ms == 1'000);
  CHECK(log.reports().front().error == "hung");
}
