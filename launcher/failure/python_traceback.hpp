// The Python exception a worker died of, read from the tail of its stderr: no @record decorator needed.
// Finds the last "Traceback (most recent call last):" block (or, when the tail cut its head off, the
// last run of `File "...", line N` frames), its innermost frames and the exception line after them.
// Launcher-added prefixes such as "[rank3]:" are ignored.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace meshrun::launcher {

struct PythonError {
  std::string error;                // "RuntimeError: boom" (the exception's first line)
  std::vector<std::string> frames;  // innermost last: `File "x.py", line 3, in f`, then `  code` under it
};

/// Nothing when the lines hold no traceback.
std::optional<PythonError> parse_python_traceback(const std::vector<std::string>& lines, size_t max_frame_lines = 6);

}  // namespace meshrun::launcher
