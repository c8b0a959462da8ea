// Preemption: SIGUSR1 / SIGTERM (forwarded by meshrun, or sent by a scheduler) ask the trainer to finish
// its step, write a checkpoint and exit with kCheckpointedOnSignal. The signals are blocked in every
// thread and polled between steps with sigtimedwait, so there is no handler and no global flag.
#pragma once

#include <signal.h>

namespace meshrun::trainer {

/// Exit code of a worker that checkpointed because of a signal (EX_TEMPFAIL: "try again later");
/// meshrun reports it as "checkpointed on signal".
inline constexpr int kCheckpointedOnSignal = 75;

class PreemptionWatch {
 public:
  /// Blocks SIGUSR1 and SIGTERM in the calling thread; threads started afterwards inherit the mask, so
  /// construct it before the process group and the intra-op pool exist. `enabled` false: does nothing.
  explicit PreemptionWatch(bool enabled);
  /// Restores the previous mask.
  ~PreemptionWatch();
  PreemptionWatch(const PreemptionWatch&) = delete;
  PreemptionWatch& operator=(const PreemptionWatch&) = delete;

  /// The first preemption signal received so far (0: none). Never blocks.
  int poll();
  /// This process stops because of a preemption (its own signal or another rank's): keep the signals
  /// blocked until exit.
  void stopping() { stopping_ = true; }

 private:
  bool enabled_;
  sigset_t set_{};
  sigset_t previous_{};
  int received_ = 0;
  bool stopping_ = false;
};

}  // namespace meshrun::trainer
