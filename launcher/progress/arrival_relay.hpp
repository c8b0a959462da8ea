// ArrivalRelay: the daemon's arrival probe (a range of one group's collectives, in a heartbeat's reply), relayed
// to every hooked rank of this node through its progress channel, and the wait for their answers (docs/progress.md,
// "Stragglers"). A datagram lost either way costs a second (the silent are asked again), not the daemon's give-up;
// once every running hooked rank has answered, the caller sends the answers at once, beside the heartbeats.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <vector>

#include "launcher/progress/progress_monitor.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher {

class ArrivalRelay {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kAskAgainAfter{1};

  /// Relays through `progress`, which must outlive it.
  explicit ArrivalRelay(const ProgressMonitor& progress) : progress_(progress) {}

  /// Relays `probe` to every hooked rank, once per probe; an empty one (none open) ends the wait for answers.
  void ask(const proto::ArrivalProbe& probe, Clock::time_point now);
  /// Asks the ranks that have not answered yet again, kAskAgainAfter after the last ask. `pids` by local rank (0:
  /// exited, not asked).
  void ask_again(const std::vector<pid_t>& pids, Clock::time_point now);
  /// True once per relayed probe, when every hooked rank still running (`pids`) has answered it.
  [[nodiscard]] bool take_answers(const std::vector<pid_t>& pids);

 private:
  /// Whether this range is the last probe relayed.
  bool asked_for(const std::string& group, int64_t first_seq, int64_t last_seq) const;
  /// Whether local rank `lr` answered the last probe relayed.
  bool answered(size_t lr) const;
  /// Whether an answer from local rank `lr` is still to come: hooked, running (`pids`), not answered.
  bool awaited(size_t lr, const std::vector<pid_t>& pids) const;
  /// Sends the relayed probe to the ranks `ask` picks; false when it picked none.
  bool send(const std::function<bool(size_t)>& ask) const;

  const ProgressMonitor& progress_;
  proto::ArrivalProbe asked_;  // the last probe relayed
  Clock::time_point asked_at_{};
  bool answers_pending_ = false;  // some hooked rank has not answered asked_ yet
};

}  // namespace meshrun::launcher
