// CollectiveAccountant: how one rank of a script that beats no steps spends its attempt (proto::StepAccount),
// read from its collectives alone (meshrun's hook reports each process group's completed count every 0.1 s).
// The busiest group's completions set the job's rhythm: the median time between the reports that show some
// completed. At that rhythm the time is productive; a gap far longer than the rhythm is a stall (stall_rule.hpp),
// less its usual part: a save or an evaluation the others waited out, a data
// wait, a hang before its verdict. The account starts at the rank's second completed collective (the first
// after the one that set the job up, as the attempt clock dates a first step), dated halfway between the report
// that shows it and the one before.
// Collectives cannot tell a step done again after a restart from a new one: all of them count as productive.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "proto/rendezvous/goodput.hpp"

namespace meshrun::launcher {

class CollectiveAccountant {
 public:
  using Clock = std::chrono::steady_clock;
  /// How often the hook reports (at most what the account's start is dated back).
  static constexpr std::chrono::milliseconds kReportEvery{100};
  /// Gaps kept for the rhythm's median.
  static constexpr size_t kWindow = 20;

  /// The hook's report: each group's last completed collective, at `now`.
  void on_status(const std::map<std::string, int64_t>& completed, Clock::time_point now);
  /// The workers ended at `now`: later reports are ignored.
  void close() { closed_ = true; }
  bool started() const { return mark_.has_value(); }
  /// The account as of `now` (ages before `now`); its measure is kCollectives.
  proto::StepAccount account(Clock::time_point now) const;
  /// The rhythm: the median gap between reports with completions (nullopt before the first gap).
  std::optional<double> rhythm_s() const;

 private:
  bool closed_ = false;
  std::map<std::string, int64_t> completed_;  // per group, as last reported
  std::string busiest_;                       // the group with the most completions
  std::optional<Clock::time_point> last_report_;
  std::optional<Clock::time_point> first_;  // the account's start
  std::optional<Clock::time_point> mark_;   // the last report with completions of the busiest group
  std::deque<double> gaps_s_;
  proto::StepAccount totals_;
};

}  // namespace meshrun::launcher
