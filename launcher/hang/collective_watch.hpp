// CollectiveWatch: one rank's collective progress as meshrun's Python hook reports it on the rank's
// progress socket (docs/progress.md, "Hangs without beats"):
//   fr hello pid=<pid> fr=on|off        the hook started in this worker
//   fr status <group>:<last enqueued>:<last completed> ...   PyTorch's pg_status, on change (and every 5 s)
//   fr dumped <path> | fr failed <why>  the answer to a dump request
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

namespace meshrun::launcher {

/// One datagram from the hook. Throws ProtocolError when it is not one.
struct HookMessage {
  enum class Kind { kHello, kStatus, kDumped, kFailed };
  struct Group {
    int64_t last_enqueued = -1;
    int64_t last_completed = -1;
  };
  Kind kind = Kind::kHello;
  bool recorder_on = true;              // kHello
  std::map<std::string, Group> groups;  // kStatus
  std::string text;                     // kDumped: the path; kFailed: why
};
/// True when `datagram` comes from the hook ("fr ..."), not a progress beat.
bool is_hook_message(std::string_view datagram);
HookMessage parse_hook_message(std::string_view datagram);

class CollectiveWatch {
 public:
  using Clock = std::chrono::steady_clock;
  /// Completion gaps kept for the median.
  static constexpr size_t kWindow = 20;

  /// The rank's oldest collective that is entered and not completed.
  struct OpenWait {
    std::string group;
    int64_t seq = -1;
    Clock::time_point since;  // when the agent first saw it open
  };

  void on_message(const HookMessage& message, Clock::time_point now);

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
};

}  // namespace meshrun::launcher
