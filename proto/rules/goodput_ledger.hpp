// GoodputLedger: a run's wall time split into productive training and badput by cause (GoodputReport), from
// what a rendezvous backend sees (the daemon, for each run; with etcd, each agent, for the run as it saw it):
// the rounds and restarts, and the step accounts and milestones the agents send with their heartbeats. Pure:
// times come in as arguments, on the caller's clock.
//
// The run is a chain of attempts, each from its start (the run's first join, or a restart's fault) to the
// next restart's fault or the end:
//   start --opening--> first step --step account (productive, checkpoints, phases, work lost)--> counted
//         --tail--> end
// The opening is start-up (round 0) or a restart; the tail is a hang wait (the restart was a hang), work
// lost (a fault cut the step under way), shutdown (the workers finished), or the step in progress. The
// step account is the one counted furthest among the nodes (every node's covers the same lockstep steps).
// Without step beats the time after the first step is "untold". Only the running totals and the current
// attempt are kept: a run of a thousand restarts costs what a run of one does.
#pragma once

#include <cstdint>
#include <optional>

#include "common/clock.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::proto {

class GoodputLedger {
 public:
  explicit GoodputLedger(TimePoint started = {});

  /// A node's milestones for `round` (its step account among them), received at `at` (ages before `at`).
  void milestones(int64_t round, const AttemptMilestones& attempt, TimePoint at);
  /// The first attempt this ledger sees is `round` (an agent of the etcd backend that joined a running job).
  void first_round(int64_t round) { current_.round = round; }
  /// The run restarted into `round` for `cause`; the fault happened at `fault`.
  void restarted(int64_t round, RestartCause cause, TimePoint fault);
  /// From `at` on, `count` hot spares wait (their idle node-seconds add up until the next call).
  void spares(int count, TimePoint at);

  /// The split as of `now`. `workers_done`: the job's workers finished (the tail is shutdown, not a step in
  /// progress).
  GoodputReport report(TimePoint now, bool workers_done) const;

 private:
  struct Attempt {
    int64_t round = 0;
    TimePoint begun;
    bool restart = false;                 // opened by a restart (else the run's start-up)
    std::optional<TimePoint> first_step;  // the reference account's first step, else the nodes' last one
    StepAccount account;                  // the reference account
    std::optional<TimePoint> counted;     // the end of what it covers; none while no node beat a step
  };
  /// Adds `attempt`, which ended at `end`, to `into`; its tail (after the last thing counted) goes to `tail`.
  static void settle(const Attempt& attempt, TimePoint end, double GoodputReport::*tail, GoodputReport& into);

  TimePoint started_;
  GoodputReport done_;  // the attempts that ended
  Attempt current_;
  int spares_ = 0;
  TimePoint spares_since_;
};

}  // namespace meshrun::proto
