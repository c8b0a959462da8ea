#include "launcher/progress/step_accountant.hpp"

#include <algorithm>

#include "launcher/progress/stall_rule.hpp"

namespace meshrun::launcher {
namespace {

double seconds(StepAccountant::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void StepAccountant::on_beat(const proto::Beat& beat, Clock::time_point now, std::optional<double> median_step_s) {
  if (closed_) return;
  const proto::PhaseKind kind = proto::phase_kind(beat.phase);
  if (!first_step_) {
    if (kind != proto::PhaseKind::kTrain) return;
    first_step_ = mark_ = now;
    step_ = beat.step;
    return;
  }
  if (kind != proto::PhaseKind::kTrain) {
    if (phase_ != proto::PhaseKind::kTrain && phase_ != kind) end_phase(now);  // one phase after another
    if (phase_ == proto::PhaseKind::kTrain) phase_ = kind;                     // from the end of the last step
    return;
  }
  if (beat.step <= step_) {
    if (phase_ != proto::PhaseKind::kTrain) end_phase(now);  // the phase is over, no step since
    step_ = beat.step;  // a script that counts again from a lower step: intervals go on from here
    return;
  }
  const double elapsed = seconds(now - mark_);
  double steps_seconds = elapsed;
  if (phase_ != proto::PhaseKind::kTrain) {
    // The phase and the steps after it share the interval: the steps take their usual time, the phase the rest.
    const double usual = median_step_s.value_or(0) * static_cast<double>(beat.step - step_);
    steps_seconds = std::clamp(usual, 0.0, elapsed);
    add_phase(elapsed - steps_seconds);
    phase_ = proto::PhaseKind::kTrain;
  }
  // A train interval far longer than its steps usually take is a stall (a wait the script named no phase for):
  // the steps get their usual time, the stall the rest.
  if (median_step_s) {
    const StallSplit split = split_stall(steps_seconds, *median_step_s * static_cast<double>(beat.step - step_));
    totals_.stall_s += split.stall_s;
    steps_seconds = split.work_s;
  }
  add_steps(step_, beat.step, steps_seconds);
  step_ = beat.step;
  mark_ = now;
}

void StepAccountant::close(Clock::time_point now) {
  if (closed_) return;
  if (first_step_ && phase_ != proto::PhaseKind::kTrain) end_phase(now);
  closed_ = true;
}

void StepAccountant::end_phase(Clock::time_point at) {
  add_phase(seconds(at - mark_));
  phase_ = proto::PhaseKind::kTrain;
  mark_ = at;
}

double& StepAccountant::phase_total(proto::StepAccount& account) const {
  return phase_ == proto::PhaseKind::kCheckpoint ? account.checkpoint_s : account.other_phases_s;
}

void StepAccountant::add_phase(double s) { phase_total(totals_) += std::max(0.0, s); }

void StepAccountant::add_steps(int64_t from, int64_t to, double s) {
  const int64_t n = to - from;
  const int64_t fresh = std::clamp<int64_t>(to - std::max(from, steps_done_), 0, n);
  totals_.steps += fresh;
  totals_.recomputed_steps += n - fresh;
  totals_.productive_s += s * static_cast<double>(fresh) / static_cast<double>(n);
  totals_.recomputed_s += s * static_cast<double>(n - fresh) / static_cast<double>(n);
}

proto::StepAccount StepAccountant::account(Clock::time_point now) const {
  proto::StepAccount a = totals_;
  if (!first_step_) return a;
  a.last_step = step_;
  a.first_step_age_s = seconds(now - *first_step_);
  Clock::time_point counted = mark_;
  if (phase_ != proto::PhaseKind::kTrain) {  // an open phase (close() ended any) counts until now
    phase_total(a) += seconds(now - mark_);
    counted = now;
  }
  a.counted_age_s = seconds(now - counted);
  return a;
}

}  // namespace meshrun::launcher
