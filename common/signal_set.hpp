// SignalSet: a process's signals as a file descriptor (signalfd). Forwarded signals and SIGCHLD are
// blocked in the constructing thread and read from fd() in the event loop, so there are no handlers and
// no global state. Construct it in main() before any thread starts: threads inherit the blocked mask.
#pragma once

#include <csignal>
#include <vector>

#include "common/unique_fd.hpp"

namespace meshrun {

class SignalSet {
 public:
  /// Blocks `handled` + SIGCHLD, opens the signalfd and ignores SIGPIPE (a closed console must not kill us).
  explicit SignalSet(const std::vector<int>& handled);
  /// Restores the original mask and SIGPIPE disposition.
  ~SignalSet();
  SignalSet(const SignalSet&) = delete;
  SignalSet& operator=(const SignalSet&) = delete;

  /// Readable when a signal is pending.
  int fd() const { return fd_.get(); }
  /// Reads every pending signal (non-blocking); SIGCHLD included.
  std::vector<int> drain();
  /// Reads every pending signal and returns the last terminating one (0: none). For waits outside the
  /// supervision loop (the rendezvous): there is no worker to forward the others to yet.
  int drain_terminating();
  /// The mask before construction: what workers should start with.
  const sigset_t& original_mask() const { return original_mask_; }

 private:
  UniqueFd fd_;
  sigset_t original_mask_{};
  struct sigaction original_pipe_ {};
};

/// True for signals after which the launcher stops its workers and exits (TERM, INT, HUP, QUIT...);
/// false for those it only forwards (USR1, USR2: SLURM's "checkpoint now").
bool is_terminating_signal(int sig);

}  // namespace meshrun
