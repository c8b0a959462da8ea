// The failure summary printed on stderr for the first failed worker: who (global/local rank, host, pid),
// how (exit code or signal name), when, and why (the error file PyTorch's @record wrote, or stderr's tail).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/failure/exit_status.hpp"

namespace meshrun::launcher {

struct FailureInfo {
  int rank = 0;
  int local_rank = 0;
  std::string role = "default";
  std::string host;
  pid_t pid = 0;
  ExitStatus status;
  std::chrono::system_clock::time_point time;
  int attempt = 0;
  std::string error_file;           // path given as TORCHELASTIC_ERROR_FILE
  std::string error_file_contents;  // empty when the worker wrote none
  std::vector<std::string> stderr_tail;
  std::string stderr_log;  // path of the stderr log file, when there is one
  // Set when the worker did not fail by itself but was found hung (launcher/progress) and stopped:
  std::string hang_reason;  // "no progress beat for 12.3 s (budget 10.0 s) after step 42 (train)"
  int64_t hang_step = -1;   // the last step it beat (-1: never)
  std::string stack_tool;   // the tool that read its stack ("py-spy", "eu-stack", "gdb"), or empty
  std::string stack;        // the stack, or why there is none
  std::string stack_file;   // where the stack was also written
};

/// Exit code with which a worker says "I got SIGUSR1/SIGTERM, wrote a checkpoint and stopped" (EX_TEMPFAIL;
/// meshrun-trainer's kCheckpointedOnSignal). Reported as "checkpointed on signal", never as a failure.
inline constexpr int kCheckpointedOnSignalExit = 75;
inline bool checkpointed_on_signal(const ExitStatus& s) { return !s.signaled && s.code == kCheckpointedOnSignalExit; }

/// The multi-line summary (ends with a newline).
std::string format_failure_summary(const FailureInfo& info);

/// True when the worker died of std::terminate at interpreter exit (SIGABRT, "terminate called without an
/// active exception" in its stderr): PyTorch's teardown race, which the summary names with what to do.
bool aborted_at_teardown(const FailureInfo& info);

/// Renders an error file written by torch.distributed.elastic's @record (message + traceback); falls back to
/// the raw text when it is not that JSON.
std::string render_error_file(const std::string& contents);

/// The last `lines` lines of a file (for a stderr that went to a log file only).
std::vector<std::string> read_tail(const std::string& path, size_t lines);

}  // namespace meshrun::launcher
