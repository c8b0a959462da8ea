#include "launcher/failure/failure_summary.hpp"

#include <algorithm>
#include <csignal>
#include <ctime>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace meshrun::launcher {
namespace {

std::string iso_time(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S %z", &tm);
  return buf;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += pad + line + "\n";
  return out;
}

}  // namespace

std::string render_error_file(const std::string& contents) {
  const auto j = nlohmann::json::parse(contents, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message")) return contents;
  const auto& m = j["message"];
  if (m.is_string()) return m.get<std::string>();
  if (!m.is_object()) return contents;
  std::string out;
  if (m.contains("message") && m["message"].is_string()) out += m["message"].get<std::string>() + "\n";
  if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
    const auto& extra = m["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      out += extra["py_callstack"].get<std::string>();
    }
  }
  return out.empty() ? contents : out;
}

std::vector<std::string> read_tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  return {tail.begin(), tail.end()};
}

bool aborted_at_teardown(const FailureInfo& f) {
  if (!f.status.signaled || f.status.signal != SIGABRT) return false;
  return std::any_of(f.stderr_tail.begin(), f.stderr_tail.end(), [](const std::string& line) {
    return line.find("terminate called without an active exception") != std::string::npos;
  });
}

std::string format_failure_summary(const FailureInfo& f) {
  std::ostringstream out;
  const bool hung = !f.hang_reason.empty();
  out << "meshrun: worker " << (hung ? "hung" : "failed") << " (first failure, attempt " << f.attempt << ")\n"
      << "  rank:       " << f.rank << " (local rank " << f.local_rank << ", role " << f.role << ")\n"
      << "  host:       " << f.host << "\n"
      << "  pid:        " << f.pid << "\n";
  if (hung) {
    out << "  hang:       " << f.hang_reason << "\n"
        << "  exit:       stopped by meshrun (" << f.status.describe() << ")\n";
  } else {
    out << "  exit:       " << f.status.describe() << "\n";
  }
  out << "  time:       " << iso_time(f.time) << "\n";
  if (hung) {
    out << "  stack" << (f.stack_tool.empty() ? "" : " (" + f.stack_tool + ")")
        << (f.stack_file.empty() ? "" : ", also in " + f.stack_file) << ":\n"
        << indent(f.stack, "    ");
  }
  if (!f.error_file_contents.empty()) {
    out << "  error file: " << f.error_file << "\n" << indent(render_error_file(f.error_file_contents), "    ");
  } else if (!f.stderr_tail.empty()) {
    out << "  stderr (last " << f.stderr_tail.size() << " lines"
        << (f.stderr_log.empty() ? "" : ", full log: " + f.stderr_log) << "):\n";
    for (const auto& line : f.stderr_tail) out << "    " << line << "\n";
  } else {
    out << "  stderr:     (empty)" << (f.stderr_log.empty() ? "" : " " + f.stderr_log) << "\n";
  }
  if (f.status.signaled && f.status.signal == 9) {
    out << "  hint:       SIGKILL often means the kernel's OOM killer (check `dmesg`) or a scheduler limit\n";
  }
  if (aborted_at_teardown(f)) {
    out << "  hint:       PyTorch aborted while the interpreter exited: a thread of its process group was still\n"
           "              running (a PyTorch teardown race, pytorch/pytorch#190489; torchrun shows it too).\n"
           "              Call dist.destroy_process_group() after the last collective has completed; see\n"
           "              docs/launcher.md, \"Ending a script\"\n";
  }
  return out.str();
}

}  // namespace meshrun::launcher
