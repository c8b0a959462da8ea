#include "launcher/progress/collective_watch.hpp"

#include <algorithm>
#include <vector>

namespace meshrun::launcher {

void CollectiveWatch::on_message(const proto::HookMessage& message, Clock::time_point now, int64_t received_ns) {
  hooked_ = true;
  switch (message.kind) {
    case proto::HookMessage::Kind::kHello: recorder_on_ = message.recorder_on; return;
    case proto::HookMessage::Kind::kDumped:
    case proto::HookMessage::Kind::kFailed: dump_answer_ = message; return;
    case proto::HookMessage::Kind::kClock: clock_.add(message.sent_ns, message.remote_ns, received_ns); return;
    case proto::HookMessage::Kind::kArrivals: arrivals_ = message.arrivals; return;
    case proto::HookMessage::Kind::kFrames:
      stack_reads_.push_back(StackRead{now, message.frames, message.where});
      if (stack_reads_.size() > kStackReads) stack_reads_.pop_front();
      return;
    case proto::HookMessage::Kind::kStatus: break;
  }
  bool completed = false;
  for (const auto& [name, g] : message.groups) {
    GroupState& state = groups_[name];
    // Sequence numbers start at 1: a first status with 0 completed reports none (not a completion at -1 -> 0).
    if (g.last_completed > std::max<int64_t>(state.last.last_completed, 0)) completed = true;
    const bool open = g.last_enqueued > g.last_completed;
    const bool same_wait = state.open_since && g.last_completed == state.last.last_completed;
    if (!open) {
      state.open_since.reset();
    } else if (!same_wait) {
      state.open_since = now;
    }
    state.last = g;
  }
  if (!completed) return;
  completions_ = 0;
  for (const auto& [name, state] : groups_) completions_ += std::max<int64_t>(0, state.last.last_completed);
  if (last_completion_) {
    gaps_s_.push_back(std::chrono::duration<double>(now - *last_completion_).count());
    if (gaps_s_.size() > kWindow) gaps_s_.pop_front();
  }
  last_completion_ = now;
}

StackMotion CollectiveWatch::stack_motion(Clock::time_point since) const {
  StackMotion m;
  const StackRead* first = nullptr;
  for (const auto& read : stack_reads_) {
    if (read.at < since) continue;
    if (first == nullptr) {
      first = &read;
      continue;
    }
    m.known = true;
    if (read.frames != first->frames) m.moved = true;
  }
  if (!stack_reads_.empty()) m.where = stack_reads_.back().where;
  return m;
}

std::map<std::string, int64_t> CollectiveWatch::completed() const {
  std::map<std::string, int64_t> out;
  for (const auto& [name, state] : groups_) out[name] = state.last.last_completed;
  return out;
}

int64_t CollectiveWatch::last_enqueued(const std::string& group) const {
  const auto it = groups_.find(group);
  return it == groups_.end() ? -1 : it->second.last.last_enqueued;
}

std::optional<double> CollectiveWatch::median_gap_s() const {
  if (gaps_s_.empty()) return std::nullopt;
  std::vector<double> sorted(gaps_s_.begin(), gaps_s_.end());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(sorted.size() / 2), sorted.end());
  return sorted[sorted.size() / 2];
}

std::optional<CollectiveWatch::OpenWait> CollectiveWatch::oldest_wait() const {
  std::optional<OpenWait> oldest;
  for (const auto& [name, state] : groups_) {
    if (!state.open_since) continue;
    if (!oldest || *state.open_since < oldest->since) {
      oldest = OpenWait{name, std::max<int64_t>(state.last.last_completed, 0) + 1, *state.open_since};
    }
  }
  return oldest;
}

}  // namespace meshrun::launcher
