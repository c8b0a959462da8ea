// OutputPump: carries one worker stream (stdout or stderr) from its pipe to the console, with a line prefix
// such as "[rank3]:", and optionally to a log file; keeps the last lines for the failure summary.
#pragma once

#include <cstddef>
#include <deque>
#include <string>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

class OutputPump {
 public:
  /// `pipe` is the read end (made non-blocking here). `console_fd` < 0: not shown on the console.
  /// `file` may be empty: no log file. `tail_lines` = lines kept for tail().
  OutputPump(UniqueFd pipe, std::string prefix, int console_fd, UniqueFd file, size_t tail_lines);

  /// The pipe's read end, to poll; -1 after EOF.
  int fd() const { return pipe_.get(); }
  bool open() const { return pipe_.valid(); }
  /// Reads what is available without blocking; closes the pipe at EOF. Returns false at EOF.
  bool on_readable();
  /// Emits a pending unterminated line (at EOF or when the worker is gone) and closes the pipe.
  void finish();
  /// The last lines seen (unprefixed).
  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void emit_line(const char* data, size_t size, bool add_newline);

  UniqueFd pipe_;
  std::string prefix_;
  int console_fd_;
  UniqueFd file_;
  size_t tail_lines_;
  std::string partial_;  // bytes after the last newline
  std::deque<std::string> tail_;
};

/// Writes all of `data` to `fd`, retrying on EINTR/short writes; errors (a closed console) are ignored.
void write_all(int fd, const char* data, size_t size);

/// Expands ${rank} ${local_rank} ${role_name} ${hostname} in a --log-line-prefix-template.
std::string expand_prefix(const std::string& tmpl, int rank, int local_rank, const std::string& role,
                          const std::string& hostname);

}  // namespace meshrun::launcher
