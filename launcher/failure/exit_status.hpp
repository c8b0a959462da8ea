// ExitStatus: how a process ended (an exit code or a signal), as the failure reports and the launcher's own
// exit code read it.
#pragma once

#include <string>

namespace meshrun::launcher {

/// How a process ended.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled

  bool ok() const { return !signaled && code == 0; }
  /// Shell convention: the code, or 128+signal.
  int exit_code() const { return signaled ? 128 + signal : code; }
  /// "exit code 3" or "signal SIGKILL (9)".
  std::string describe() const;
};

/// "SIGTERM" for 15 (or "signal 42").
std::string signal_name(int sig);

}  // namespace meshrun::launcher
