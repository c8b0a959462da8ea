// RunReports: the lines an agent says about the run as a whole, each once and again only when it changes (or,
// for a late rank, every few minutes while it lasts), whatever attempt is running: the daemon's stragglers and
// why a slow node keeps its seat, a restart's recovery ledger, a late rank. They outlive the attempts, so an agent
// keeps one.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher {

class RunReports {
 public:
  using Clock = std::chrono::steady_clock;
  /// A late line on the same subject is said again after this long.
  static constexpr std::chrono::minutes kLateRepeat{5};

  /// The daemon's stragglers, said when the set changed since the last heartbeat.
  void stragglers(const std::vector<proto::Straggler>& stragglers);
  /// Why a slow node keeps its seat (--replace-slow-nodes), said when the daemon's line changed.
  void slow_nodes(const std::string& note);
  /// A restart's recovery ledger, said once the daemon has it complete (once per restart).
  void recovery(const proto::HeartbeatReply& beat);
  /// A late verdict's `line`, said when its `subject` (who is late, where, doing what) is new, or kLateRepeat after
  /// it was last said.
  void late(const std::string& subject, const std::string& line, Clock::time_point now);

 private:
  std::vector<int> straggler_ranks_;  // as last said
  std::string slow_nodes_said_;       // the daemon's slow-node line, as last said
  int64_t recovery_said_ = 0;         // the last round whose recovery ledger was said
  std::string late_subject_;          // the last late line's subject, and when it was said
  Clock::time_point late_at_{};
};

}  // namespace meshrun::launcher
