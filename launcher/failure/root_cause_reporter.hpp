// RootCauseReporter: names the job's first failure across nodes (format_root_cause over the rendezvous's failure
// reports of the round) once late reports had their settle time. A restart does not wait for it: the next
// attempt prints it once due (poll, non-blocking); a run's end prints it first (flush, beating meanwhile, since
// a node silent for its keep-alive after a restart is taken for dead).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace meshrun::launcher {

class RendezvousBackend;

class RootCauseReporter {
 public:
  using Clock = std::chrono::steady_clock;

  /// How an attempt of a run of several nodes ended, as far as naming its root cause goes.
  struct Ending {
    int64_t round = 0;
    bool failed = false;          // a failure ended it: here, on another node, or the run's
    bool local = false;           // a worker of this node failed or hung: its report is ours
    Clock::time_point failed_at;  // when (local only)
    int expected_rank = -1;       // a hang verdict's culprit, whose report its node sends right after the verdict
  };

  /// `keep_alive`: the heartbeat interval kept while flush waits.
  explicit RootCauseReporter(std::chrono::milliseconds keep_alive) : keep_alive_(keep_alive) {}

  /// The attempt that just ended: its root cause is named once due (nothing when it did not fail).
  void expect(const Ending& ending);
  /// Prints the pending root cause if it is due; at most one query of the rendezvous per kQueryEvery.
  void poll(RendezvousBackend& rdzv);
  /// Prints the pending root cause, waiting until it is due; never throws (the run may be over).
  void flush(RendezvousBackend& rdzv);

 private:
  struct Pending {
    int64_t round = 0;
    Clock::time_point settled_at{};
    int expected_rank = -1;
    Clock::time_point expected_by{};
    Clock::time_point next_query{};
  };
  /// Prints it once due (true), or nothing yet (false); one query of the rendezvous when due.
  static bool try_print(RendezvousBackend& rdzv, const Pending& cause);

  std::chrono::milliseconds keep_alive_;
  std::optional<Pending> pending_;
};

}  // namespace meshrun::launcher
