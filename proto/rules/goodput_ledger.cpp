#include "proto/rules/goodput_ledger.hpp"

#include <algorithm>

namespace meshrun::proto {
namespace {

TimePoint before(TimePoint at, double age_s) { return at - from_seconds(age_s); }

}  // namespace

GoodputLedger::GoodputLedger(TimePoint started) : started_(started), spares_since_(started) {
  current_.begun = started;
}

void GoodputLedger::milestones(int64_t round, const AttemptMilestones& attempt, TimePoint at) {
  if (round != current_.round) return;  // a report of an attempt already settled
  const StepAccount& a = attempt.steps;
  if (a.first_step_age_s >= 0 && a.counted_age_s >= 0) {
    const TimePoint counted = before(at, a.counted_age_s);
    if (!current_.counted || counted >= *current_.counted) {
      current_.account = a;
      current_.counted = counted;
      current_.first_step = before(at, a.first_step_age_s);
    }
    return;
  }
  // No node beat a step yet: the opening ends when the last node's ranks took their first step (for a script
  // without beats, its second collective).
  if (!current_.counted && attempt.first_step_age_s >= 0) {
    const TimePoint first = before(at, attempt.first_step_age_s);
    current_.first_step = current_.first_step ? std::max(*current_.first_step, first) : first;
  }
}

void GoodputLedger::restarted(int64_t round, RestartCause cause, TimePoint fault) {
  // A node lost between heartbeats: the others counted steps after its last sign of life, which they did
  // finish; the restart starts after them.
  TimePoint boundary = std::max(fault, current_.begun);
  if (current_.counted) boundary = std::max(boundary, *current_.counted);
  settle(current_, boundary, cause == RestartCause::kHung ? &GoodputReport::hang_wait_s : &GoodputReport::work_lost_s,
         done_);
  ++done_.restarts;
  current_ = Attempt{};
  current_.round = round;
  current_.begun = boundary;
  current_.restart = true;
}

void GoodputLedger::spares(int count, TimePoint at) {
  if (at > spares_since_) done_.spare_node_s += spares_ * to_seconds(at - spares_since_);
  spares_ = count;
  spares_since_ = std::max(at, spares_since_);
}

void GoodputLedger::settle(const Attempt& a, TimePoint end, double GoodputReport::*tail, GoodputReport& into) {
  end = std::max(end, a.begun);
  const TimePoint opened = a.first_step ? std::clamp(*a.first_step, a.begun, end) : end;
  (a.restart ? into.restarts_s : into.startup_s) += to_seconds(opened - a.begun);
  if (!a.counted) {
    into.untold_s += to_seconds(end - opened);
    return;
  }
  into.productive_s += a.account.productive_s;
  into.work_lost_s += a.account.recomputed_s;
  into.steps += a.account.steps;
  into.recomputed_steps += a.account.recomputed_steps;
  into.checkpoint_s += a.account.checkpoint_s;
  into.other_phases_s += a.account.other_phases_s;
  into.stall_s += a.account.stall_s;
  into.measure = a.account.measure;
  into.*tail += to_seconds(end - std::clamp(*a.counted, opened, end));
}

GoodputReport GoodputLedger::report(TimePoint now, bool workers_done) const {
  GoodputReport r = done_;
  settle(current_, now, workers_done ? &GoodputReport::shutdown_s : &GoodputReport::in_progress_s, r);
  if (now > spares_since_) r.spare_node_s += spares_ * to_seconds(now - spares_since_);
  r.wall_s = to_seconds(now - started_);
  r.ratio = r.wall_s > 0 ? r.productive_s / r.wall_s : 0;
  return r;
}

}  // namespace meshrun::proto
