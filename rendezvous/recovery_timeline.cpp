#include "rendezvous/recovery_timeline.hpp"

#include <algorithm>

namespace meshrun::rendezvous {
namespace {

std::optional<TimePoint> before(TimePoint at, double age_s) {
  if (age_s < 0) return std::nullopt;
  return at - std::chrono::duration_cast<Duration>(std::chrono::duration<double>(age_s));
}

}  // namespace

RecoveryTimeline::RecoveryTimeline(TimePoint fault, TimePoint known, TimePoint now)
    : fault_(std::min(fault, known)), known_(known), invalidated_(now) {}

void RecoveryTimeline::survivor_back(TimePoint at) {
  if (!closed_) survivors_back_ = at;
}

void RecoveryTimeline::closed(TimePoint at, std::vector<std::string> nodes) {
  if (!survivors_back_) survivors_back_ = invalidated_;  // no survivor to wait for
  closed_ = at;
  nodes_ = std::move(nodes);
}

void RecoveryTimeline::milestones(const std::string& node, const proto::AttemptMilestones& attempt, TimePoint at) {
  if (!closed_ || std::find(nodes_.begin(), nodes_.end(), node) == nodes_.end()) return;
  NodeMarks& m = marks_[node];
  // The first report of a mark stands: later heartbeats carry the same moment with a larger age.
  const auto keep = [](std::optional<TimePoint>& mark, std::optional<TimePoint> seen) {
    if (!mark) mark = seen;
  };
  keep(m.spawned, before(at, attempt.spawned_age_s));
  keep(m.initialized, before(at, attempt.initialized_age_s));
  keep(m.loaded, before(at, attempt.loaded_age_s));
  keep(m.first_step, before(at, attempt.first_step_age_s));
  m.load_beats = m.load_beats || attempt.load_beats;
  if (attempt.load_source != proto::LoadSource::kUnknown) m.load_source = attempt.load_source;
}

std::optional<TimePoint> RecoveryTimeline::last_of(std::optional<TimePoint> NodeMarks::*mark) const {
  if (nodes_.empty()) return std::nullopt;
  std::optional<TimePoint> last;
  for (const auto& node : nodes_) {
    const auto it = marks_.find(node);
    if (it == marks_.end() || !(it->second.*mark)) return std::nullopt;
    last = last ? std::max(*last, *(it->second.*mark)) : it->second.*mark;
  }
  return last;
}

proto::RecoveryLedger RecoveryTimeline::ledger() const {
  const bool any_load = std::any_of(marks_.begin(), marks_.end(), [](const auto& m) { return m.second.load_beats; });
  const auto initialized = last_of(&NodeMarks::initialized);
  // Without a "load" beat nothing is restored that meshrun can see: the load phase is empty.
  const auto loaded = any_load ? last_of(&NodeMarks::loaded) : initialized;
  const std::optional<TimePoint> boundaries[] = {known_,
                                                 survivors_back_,
                                                 closed_,
                                                 last_of(&NodeMarks::spawned),
                                                 initialized,
                                                 loaded,
                                                 last_of(&NodeMarks::first_step)};
  proto::RecoveryLedger l;
  double* const phases[] = {&l.detect_s, &l.stop_s, &l.rendezvous_s, &l.start_s, &l.init_s, &l.load_s, &l.first_step_s};
  TimePoint previous = fault_;
  size_t reached = 0;
  for (; reached < std::size(boundaries) && boundaries[reached]; ++reached) {
    const TimePoint at = std::max(previous, *boundaries[reached]);  // ages and reports may cross by a few ms
    *phases[reached] = to_seconds(at - previous);
    previous = at;
  }
  l.total_s = to_seconds(previous - fault_);
  // The slowest kind any node used: storage, then a buddy's copies, then the own agents' memory.
  for (const auto& [node, marks] : marks_) {
    if (static_cast<int>(marks.load_source) > static_cast<int>(l.load_source)) l.load_source = marks.load_source;
  }
  l.complete = reached == std::size(boundaries);
  return l;
}

}  // namespace meshrun::rendezvous
