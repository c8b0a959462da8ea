// HangWatch: one attempt's hang cycle on this node (docs/progress.md), each step once, in this order:
//   suspicion  a rank of this node silent past its budget, stopped by a signal, or waiting in one collective
//              past its budget (HangPolicy), read off the progress monitor; or another node's request
//   exchange   this node's suspicion posted for every node: the first request wins everywhere (HangExchange)
//   verdict    every node's records judged the same way (HangInquiry)
//   late       the ranks waited for are busy, or wait outside the job: marked for status, judged again later
//   hung       handed back to the attempt, which reports the culprit, prints the stacks and stops the workers
// It reads the progress monitor (what the ranks said) and never writes it: what it concluded (the suspicion
// reported, the quiet window, the late marks, how long each worker has been stopped) and the activity samples
// are its own, and reach the daemon through marks(). Only the inquiry drains the monitor's channels, while it
// waits for the ranks' records.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/activity/activity_monitor.hpp"
#include "launcher/hang/hang_exchange.hpp"
#include "launcher/hang/hang_inquiry.hpp"
#include "launcher/hang/hang_verdict.hpp"
#include "launcher/progress/hang_policy.hpp"
#include "launcher/progress/progress_monitor.hpp"
#include "proto/agents/hang_request.hpp"

namespace meshrun::launcher {

class WorkerGroup;
struct Worker;

/// A hang suspected here, or by another node.
struct Suspicion {
  proto::HangRequest request;
  bool here = false;  // raised by this node (else another node's request, read from the store)
};

/// What the inquiry into a suspicion concluded.
struct HangJudgment {
  HangOutcome outcome = HangOutcome::kResolved;  // kHung ends the attempt; late and resolved leave it running
  HangVerdict verdict;
  std::optional<HangInquiry> inquiry;  // kHung: the stacks are read after the culprit has been reported
  int named = -1;                      // kHung: the rank named
  std::string reason;                  // kHung: why, for the failure report
};

class HangWatch {
 public:
  using Clock = std::chrono::steady_clock;

  /// Watches the ranks of `progress` (the workers of `group`); both must outlive it.
  HangWatch(ProgressMonitor& progress, WorkerGroup& group, HangPolicy policy, HangExchange exchange);
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  /// One look: the workers' activity sampled (once a second; hooked ranks asked for their stack every other
  /// sample), then a hang suspected here (reported once) or another node's request, if any. `pids` by local
  /// rank (0: exited).
  std::optional<Suspicion> suspect(const std::vector<pid_t>& pids, Clock::time_point now);
  /// The exchange, the inquiry and the verdict on `suspicion`; `site` is where this node stands. A late verdict
  /// marks this node's late ranks and defers new suspicions until they are judged again; a resolved one (the
  /// wait ended meanwhile) until the hooks have caught up.
  HangJudgment judge(const Suspicion& suspicion, const HangInquirySite& site);
  /// What the watch says of this node's ranks now, for their summaries.
  RankMarks marks(Clock::time_point now) const;

 private:
  // A rank suspected of a hang, and why ("no progress beat for 12.3 s (budget 10.0 s) after step 42 (train)").
  struct Suspect {
    size_t local_rank = 0;
    int rank = 0;
    std::string reason;
    int64_t step = -1;    // the last step it beat (-1: it never beat)
    double waited_s = 0;  // how long it has waited in its collective, or been silent
    proto::SuspicionRoute route = proto::SuspicionRoute::kUnknown;
  };
  // A rank judged late (busy while others wait for it): shown in status until it enters the collective, beats
  // again, or `until` passes without a new verdict renewing it.
  struct LateMark {
    std::string line;   // the late line
    std::string group;  // the collective it had not entered ("" for a suspicion from beats)
    int64_t seq = -1;
    Clock::time_point marked_at{};
    Clock::time_point until{};
  };

  /// The first rank of this node that is hung now: stopped, or the silent one that explains the others' silence.
  std::optional<Suspect> find_hang(const std::vector<pid_t>& pids, Clock::time_point now);
  /// The first rank that waits in one collective longer than its budget.
  std::optional<Suspect> find_collective_wait(const std::vector<pid_t>& pids, Clock::time_point now);
  std::optional<std::string> silence_verdict(size_t lr, Clock::time_point now) const;
  std::optional<std::string> stopped_verdict(size_t lr, pid_t pid, Clock::time_point now);
  /// A worker stopped right now explains a wait found elsewhere (`context`).
  std::optional<Suspect> stopped_now(const std::vector<pid_t>& pids, Clock::time_point now,
                                     const std::string& context) const;
  /// The late line of local rank `lr`, while its mark stands.
  std::optional<std::string> late(size_t lr, Clock::time_point now) const;
  /// A late verdict: this node's late ranks marked, the next look at them scheduled, a new inquiry.
  void on_late(const HangVerdict& verdict);
  /// No suspicion before `until` but a stopped worker's; the next one starts a new inquiry.
  void quiet_until(Clock::time_point until);
  const Worker* local_worker(int rank) const;

  ProgressMonitor& progress_;
  WorkerGroup& group_;
  HangPolicy policy_;
  HangExchange exchange_;
  ActivityMonitor activity_;
  int activity_samples_ = 0;
  std::vector<std::optional<Clock::time_point>> stopped_since_;
  std::optional<size_t> hung_;  // reported once; the attempt stops
  std::vector<std::optional<LateMark>> late_;
  Clock::time_point quiet_until_{};
};

}  // namespace meshrun::launcher
