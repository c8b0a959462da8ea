// CollectiveWatch: one rank's collective progress as meshrun's Python hook (or meshrun-trainer's reporter)
// reports it on the rank's progress socket (docs/progress.md, "Hangs without beats"), in the messages of
// proto/worker/hook_messages.hpp.
// The agent's own clock dates what it sees: when a group's oldest open collective was first seen open,
// and the gaps between completions (the job's cadence, which the automatic budget learns).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock_offset.hpp"
#include "launcher/activity/activity_rule.hpp"
#include "proto/worker/hook_messages.hpp"

namespace meshrun::launcher {

class CollectiveWatch {
 public:
  using Clock = std::chrono::steady_clock;
  /// Completion gaps kept for the median.
  static constexpr size_t kWindow = 20;
  /// Stack reads kept: a window's worth at one read every 2 s, and some.
  static constexpr size_t kStackReads = 10;

  /// The rank's oldest collective that is entered and not completed.
  struct OpenWait {
    std::string group;
    int64_t seq = -1;
    Clock::time_point since;  // when the agent first saw it open
  };

  /// `received_ns`: the agent's wall clock when the message came (for kClock).
  void on_message(const proto::HookMessage& message, Clock::time_point now, int64_t received_ns = 0);

  bool hooked() const { return hooked_; }
  bool recorder_on() const { return recorder_on_; }
  /// Collectives completed, over every group (sequence numbers start at 1).
  int64_t completions() const { return completions_; }
  /// Median seconds between the statuses that reported completions; nullopt before the second.
  std::optional<double> median_gap_s() const;
  /// The open collective waited on longest, if any.
  std::optional<OpenWait> oldest_wait() const;
  /// The answer to the last dump request: the file written, or why none was.
  const std::optional<proto::HookMessage>& dump_answer() const { return dump_answer_; }
  void clear_dump_answer() { dump_answer_.reset(); }
  /// The last collective completed in each group, as the hook last reported.
  std::map<std::string, int64_t> completed() const;
  /// The last collective the rank entered in `group` (-1: none reported).
  int64_t last_enqueued(const std::string& group) const;
  /// The worker's clock minus the agent's, once a clock answer came.
  std::optional<OffsetEstimate> clock_offset() const { return clock_.estimate(); }
  /// The answer to the last arrival probe, if one came.
  const std::optional<proto::ArrivalAnswer>& arrivals() const { return arrivals_; }
  /// Whether the main thread's stack moved between the reads ("frames" answers) since `since`: known once
  /// two reads came in that time.
  StackMotion stack_motion(Clock::time_point since) const;

 private:
  struct GroupState {
    proto::HookMessage::Group last;
    std::optional<Clock::time_point> open_since;
  };
  bool hooked_ = false;
  bool recorder_on_ = true;
  int64_t completions_ = 0;
  std::optional<Clock::time_point> last_completion_;
  std::deque<double> gaps_s_;
  std::map<std::string, GroupState> groups_;
  std::optional<proto::HookMessage> dump_answer_;
  ClockOffset clock_;
  std::optional<proto::ArrivalAnswer> arrivals_;
  struct StackRead {
    Clock::time_point at;
    std::vector<std::string> frames;
    std::string where;
  };
  std::deque<StackRead> stack_reads_;  // the last few "frames" answers
};

}  // namespace meshrun::launcher
