// OutputPump: carries one worker stream (stdout or stderr) from its pipe to the console, with a line prefix
// such as "[rank3]:", and optionally to a log file; keeps the last lines for the failure summary.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

/// torchrun's --duplicate-stdout-filters / --duplicate-stderr-filters: the lines of every worker's stream
/// that contain one of the filters, copied with their prefix into one file of the attempt
/// (<attempt>/filtered_stdout.log, filtered_stderr.log). Shared by the pumps of one stream.
class LineDuplicator {
 public:
  LineDuplicator(UniqueFd file, std::vector<std::string> filters)
      : file_(std::move(file)), filters_(std::move(filters)) {}
  /// Copies `prefixed` when `line` (the same line without its prefix) contains a filter.
  void offer(std::string_view line, std::string_view prefixed) const;

 private:
  UniqueFd file_;
  std::vector<std::string> filters_;
};

class OutputPump {
 public:
  /// `pipe` is the read end (made non-blocking here). `console_fd` < 0: not shown on the console.
  /// `file` may be empty: no log file. `tail_lines` = lines kept for tail(). `duplicate`: where lines
  /// matching the --duplicate-*-filters go, if any.
  OutputPump(UniqueFd pipe, std::string prefix, int console_fd, UniqueFd file, size_t tail_lines,
             std::shared_ptr<const LineDuplicator> duplicate = nullptr);

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
  std::shared_ptr<const LineDuplicator> duplicate_;
  std::string partial_;  // bytes after the last newline
  std::deque<std::string> tail_;
};

/// Writes all of `data` to `fd`, retrying on EINTR/short writes; errors (a closed console) are ignored.
void write_all(int fd, const char* data, size_t size);

/// Expands ${rank} ${local_rank} ${role_name} ${hostname} in a --log-line-prefix-template.
std::string expand_prefix(const std::string& tmpl, int rank, int local_rank, const std::string& role,
                          const std::string& hostname);

}  // namespace meshrun::launcher
