#include "launcher/progress/attempt_clock.hpp"

#include <algorithm>

namespace meshrun::launcher {
namespace {

int64_t completed_collectives(const proto::RankProgress& p) {
  int64_t total = 0;
  for (const auto& [group, seq] : p.collectives) total += std::max<int64_t>(0, seq);
  return total;
}

double age_s(std::optional<AttemptClock::Clock::time_point> mark, AttemptClock::Clock::time_point now) {
  return mark ? std::chrono::duration<double>(now - *mark).count() : -1.0;
}

}  // namespace

AttemptClock::AttemptClock(int64_t round, size_t ranks, Clock::time_point spawned)
    : round_(round), ranks_(ranks), spawned_(spawned) {}

void AttemptClock::observe(const std::vector<proto::RankProgress>& summaries, Clock::time_point now) {
  for (const auto& p : summaries) {
    RankMarks& m = marks_[p.rank];
    const bool beats = !p.phase.empty();
    const int64_t collectives = completed_collectives(p);
    if (!m.up && (beats || collectives > 0)) m.up = now;
    if (p.phase == "load" || p.phase == "ready") m.loads = true;
    if (!m.ready && m.loads && p.phase != "load") m.ready = now;
    if (!m.first_step && (beats ? p.phase == "train" : collectives >= 2)) m.first_step = now;
  }
}

std::optional<AttemptClock::Clock::time_point> AttemptClock::last_of(std::optional<Clock::time_point> RankMarks::*mark,
                                                                     bool loading_only) const {
  if (!loading_only && marks_.size() < ranks_) return std::nullopt;
  std::optional<Clock::time_point> last;
  for (const auto& [rank, m] : marks_) {
    if (loading_only && !m.loads) continue;
    if (!(m.*mark)) return std::nullopt;
    last = last ? std::max(*last, *(m.*mark)) : m.*mark;
  }
  return last;
}

proto::AttemptMilestones AttemptClock::milestones(Clock::time_point now) const {
  proto::AttemptMilestones m;
  m.round = round_;
  m.spawned_age_s = age_s(spawned_, now);
  const auto up = last_of(&RankMarks::up, false);
  m.initialized_age_s = age_s(up, now);
  m.load_beats = std::any_of(marks_.begin(), marks_.end(), [](const auto& r) { return r.second.loads; });
  m.loaded_age_s = !up ? -1.0 : m.load_beats ? age_s(last_of(&RankMarks::ready, true), now) : m.initialized_age_s;
  m.first_step_age_s = age_s(last_of(&RankMarks::first_step, false), now);
  return m;
}

bool AttemptClock::settled() const { return last_of(&RankMarks::first_step, false).has_value(); }

}  // namespace meshrun::launcher
