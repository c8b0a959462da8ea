#include "launcher/failure/root_cause.hpp"

#include <fmt/format.h>

#include "common/clock_text.hpp"
#include "common/strings.hpp"
#include "launcher/failure/python_traceback.hpp"

namespace meshrun::launcher {
namespace {

// The error and frames: error.json (PyTorch's @record) first, else the traceback on stderr.
std::optional<PythonError> worker_error(const FailureInfo& info) {
  if (!info.error_file_contents.empty()) {
    if (auto e = parse_python_traceback(split(render_error_file(info.error_file_contents), '\n'))) return e;
  }
  return parse_python_traceback(info.stderr_tail);
}

std::string clock_time(int64_t unix_ms) {
  return fmt::format("{}.{:03d}", clock_text(unix_ms), static_cast<int>(unix_ms % 1000));
}

std::string who(const proto::FailureReport& f) {
  return fmt::format("rank {} on {} (local rank {})", f.rank, f.host, f.local_rank);
}

}  // namespace

proto::FailureReport failure_report(const FailureInfo& info, int64_t round) {
  proto::FailureReport r;
  r.round = round;
  r.rank = info.rank;
  r.local_rank = info.local_rank;
  r.host = info.host;
  r.age_s = std::chrono::duration<double>(std::chrono::system_clock::now() - info.time).count();
  const bool hung = !info.hang_reason.empty();
  r.cause = hung ? proto::RestartCause::kHung : proto::RestartCause::kWorkerFailed;
  r.exit = hung ? "hung: " + info.hang_reason : info.status.describe();
  if (hung) r.step = info.hang_step;
  if (const auto e = worker_error(info)) {
    r.error = e->error;
    r.traceback = e->frames;
  }
  if (hung && r.traceback.empty()) {
    // Where it hangs: the stack's innermost frames (py-spy, eu-stack and gdb list them first, indented).
    for (const auto& line : split(info.stack, '\n')) {
      if (r.traceback.size() == proto::kMaxTracebackLines) break;
      if (!line.empty() && (line.front() == ' ' || line.front() == '#')) r.traceback.push_back(line);
    }
  }
  return r;
}

std::string format_root_cause(const std::vector<proto::FailureReport>& failures) {
  if (failures.empty()) return {};
  const auto& first = failures.front();
  std::string out = fmt::format("meshrun: root cause (the first of {} failure(s) in the job, round {}):\n",
                                failures.size(), first.round);
  out += fmt::format("  {}: {} at {}\n", who(first), first.exit, clock_time(first.unix_ms));
  if (!first.error.empty()) out += "  error: " + first.error + "\n";
  for (const auto& line : first.traceback) out += "    " + line + "\n";
  if (failures.size() > 1) out += "  then, as consequences:\n";
  for (size_t i = 1; i < failures.size(); ++i) {
    const auto& f = failures[i];
    out += fmt::format("    {}: {} ({:+.2f} s){}\n", who(f), f.exit, (f.unix_ms - first.unix_ms) / 1000.0,
                       f.error.empty() ? "" : ": " + f.error);
  }
  return out;
}

}  // namespace meshrun::launcher
