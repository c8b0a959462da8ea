// CollectiveWatch: one rank's collective progress as meshrun's Python hook reports it on the rank's
// progress socket (docs/progress.md, "Hangs without beats"):
//   fr hello pid=<pid> fr=on|off        the hook started in this worker
//   fr status <group>:<last enqueued>:<last completed> ...   PyTorch's pg_status, on change (and every 5 s)
//   fr dumped <path> | fr failed <why>  the answer to a dump request
//   fr clock <agent ns> <worker ns>     the answer to "clock <agent ns>": a sample of the worker's clock offset
//   fr arrivals <first> <last> <count> <mean ns> <span ns> <group>
//                                       the answer to an arrival probe (the daemon's, relayed by the agent)
//   fr frames {"frames": [...], "where": "save at train.py:14"}
//                                       the answer to "frames": the main thread's stack, innermost first, and
//                                       its innermost frame of the user's code (stuck or busy)
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

namespace meshrun::launcher {

/// When one rank entered a range of a group's collectives, on its own clock (nanoseconds since the epoch).
struct ArrivalAnswer {
  std::string group;
  int64_t first_seq = 0;
  int64_t last_seq = 0;
  int64_t count = 0;  // entries of the range the recorder still held
  int64_t mean_ns = 0;
  int64_t span_ns = 0;
};

/// One datagram from the hook. Throws ProtocolError when it is not one.
struct HookMessage {
  enum class Kind { kHello, kStatus, kDumped, kFailed, kClock, kArrivals, kFrames };
  struct Group {
    int64_t last_enqueued = -1;
    int64_t last_completed = -1;
  };
  Kind kind = Kind::kHello;
  bool recorder_on = true;              // kHello
  std::map<std::string, Group> groups;  // kStatus
  std::string text;                     // kDumped: the path; kFailed: why
  int64_t sent_ns = 0;                  // kClock: the agent's clock when it asked
  int64_t remote_ns = 0;                // kClock: the worker's clock when it answered
  ArrivalAnswer arrivals;               // kArrivals
  std::vector<std::string> frames;      // kFrames: "file:line in function", innermost first
  std::string where;                    // kFrames: the user's innermost frame ("save at train.py:14"), or ""
};
/// True when `datagram` comes from the hook ("fr ..."), not a progress beat.
bool is_hook_message(std::string_view datagram);
HookMessage parse_hook_message(std::string_view datagram);

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
  void on_message(const HookMessage& message, Clock::time_point now, int64_t received_ns = 0);

  bool hooked() const { return hooked_; }
  bool recorder_on() const { return recorder_on_; }
  /// Collectives completed, over every group (sequence numbers start at 1).
  int64_t completions() const { return completions_; }
  /// Median seconds between the statuses that reported completions; nullopt before the second.
  std::optional<double> median_gap_s() const;
  /// The open collective waited on longest, if any.
  std::optional<OpenWait> oldest_wait() const;
  /// The answer to the last dump request: the file written, or why none was.
  const std::optional<HookMessage>& dump_answer() const { return dump_answer_; }
  void clear_dump_answer() { dump_answer_.reset(); }
  /// The last collective completed in each group, as the hook last reported.
  std::map<std::string, int64_t> completed() const;
  /// The last collective the rank entered in `group` (-1: none reported).
  int64_t last_enqueued(const std::string& group) const;
  /// The worker's clock minus the agent's, once a clock answer came.
  std::optional<OffsetEstimate> clock_offset() const { return clock_.estimate(); }
  /// The answer to the last arrival probe, if one came.
  const std::optional<ArrivalAnswer>& arrivals() const { return arrivals_; }
  /// Whether the main thread's stack moved between the reads ("frames" answers) since `since`: known once
  /// two reads came in that time.
  StackMotion stack_motion(Clock::time_point since) const;

 private:
  struct GroupState {
    HookMessage::Group last;
    std::optional<Clock::time_point> open_since;
  };
  bool hooked_ = false;
  bool recorder_on_ = true;
  int64_t completions_ = 0;
  std::optional<Clock::time_point> last_completion_;
  std::deque<double> gaps_s_;
  std::map<std::string, GroupState> groups_;
  std::optional<HookMessage> dump_answer_;
  ClockOffset clock_;
  std::optional<ArrivalAnswer> arrivals_;
  struct StackRead {
    Clock::time_point at;
    std::vector<std::string> frames;
    std::string where;
  };
  std::deque<StackRead> stack_reads_;  // the last few "frames" answers
};

}  // namespace meshrun::launcher
