// StepAccountant: how one rank spends its attempt from its first step beat on (proto::StepAccount), read
// from its beats alone. The intervals tile the attempt without gaps:
//   a step beat ends a train interval: steps the run had not finished before are productive, the others
//                 (finished before a restart, done again now) are work lost;
//   a phase beat  (checkpoint, eval...) opens a phase at the end of the last step; it lasts until a train
//                 beat of the same step (meshrun-trainer's "the save is done") or, when the next beat is
//                 already a later step, until that beat less the rank's median step time (the step computed
//                 after the phase).
// Beats before the first step (meshrun-trainer's "load", "ready") belong to the restart's ledger, not here.
// A fault inside a phase counts as that phase until the fault: a save that hangs looks like a long save.
// A train interval far longer than the steps it covers usually take is a stall (stall_rule.hpp): the steps get
// their usual time, the rest is badput.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "proto/rendezvous/goodput.hpp"
#include "proto/worker/progress_beat.hpp"

namespace meshrun::launcher {

class StepAccountant {
 public:
  using Clock = std::chrono::steady_clock;

  /// `steps_done`: the highest step the run finished before this attempt (-1: none).
  explicit StepAccountant(int64_t steps_done = -1) : steps_done_(steps_done) {}

  /// `median_step_s`: the rank's median step interval (nullopt before it has one).
  void on_beat(const proto::Beat& beat, Clock::time_point now, std::optional<double> median_step_s);
  /// The workers ended at `now`: an open phase ends there; later beats are ignored.
  void close(Clock::time_point now);
  bool started() const { return first_step_.has_value(); }
  /// The account as of `now` (ages before `now`).
  proto::StepAccount account(Clock::time_point now) const;

 private:
  /// Steps (from, to] took `seconds`: split into new and recomputed ones.
  void add_steps(int64_t from, int64_t to, double seconds);
  void end_phase(Clock::time_point at);
  void add_phase(double seconds);
  /// The figure of `account` the open phase adds to (checkpoint or other phases).
  double& phase_total(proto::StepAccount& account) const;

  int64_t steps_done_;
  std::optional<Clock::time_point> first_step_;
  bool closed_ = false;
  Clock::time_point mark_{};  // the end of what is counted (the last step beat, or the last phase's end)
  int64_t step_ = -1;         // the last step beat
  proto::PhaseKind phase_ = proto::PhaseKind::kTrain;  // an open phase, since mark_
  proto::StepAccount totals_;
};

}  // namespace meshrun::launcher
