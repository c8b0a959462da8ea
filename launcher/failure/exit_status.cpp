#include "launcher/failure/exit_status.hpp"

#include <cstring>

namespace meshrun::launcher {

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string ExitStatus::describe() const {
  if (signaled) return "signal " + signal_name(signal) + " (" + std::to_string(signal) + ")";
  return "exit code " + std::to_string(code);
}

}  // namespace meshrun::launcher
