#include "launcher/failure/python_traceback.hpp"

#include <string_view>

#include "common/strings.hpp"

namespace meshrun::launcher {
namespace {

constexpr std::string_view kTracebackHeader = "Traceback (most recent call last):";

// "[rank3]:[rank3]: text" -> "text": the launcher's console prefix, and PyTorch's "[rankN]: " on the
// lines of an exception a worker raises (one space, then the line as Python wrote it).
std::string_view strip_rank_prefixes(std::string_view line) {
  while (line.rfind("[rank", 0) == 0) {
    const size_t close = line.find("]:");
    if (close == std::string_view::npos) break;
    line.remove_prefix(close + 2);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  }
  return line;
}

bool is_frame(std::string_view line) { return line.rfind("  File \"", 0) == 0; }
bool is_indented(std::string_view line) { return !line.empty() && (line.front() == ' ' || line.front() == '\t'); }
// Python 3.11's "    ~~~~^^^^" markers under a code line carry nothing a reader needs here.
bool is_marker(std::string_view line) { return line.find_first_not_of(" ~^") == std::string_view::npos; }

std::string rtrim(std::string_view s) { return std::string(s.substr(0, s.find_last_not_of(" \r") + 1)); }

}  // namespace

std::optional<PythonError> parse_python_traceback(const std::vector<std::string>& raw, size_t max_frame_lines) {
  std::vector<std::string_view> lines;
  for (const auto& l : raw) lines.push_back(strip_rank_prefixes(l));
  // The last block: after the last header, else from the first frame of the last run of frames.
  size_t start = lines.size();
  for (size_t i = lines.size(); i-- > 0;) {
    if (lines[i].rfind(kTracebackHeader, 0) == 0) {
      start = i + 1;
      break;
    }
  }
  if (start == lines.size()) {
    for (size_t i = lines.size(); i-- > 0;) {
      if (is_frame(lines[i]))
        start = i;
      else if (start != lines.size() && !is_indented(lines[i]))
        break;
    }
  }
  PythonError err;
  std::vector<std::string> frames;
  for (size_t i = start; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (is_indented(line)) {
      // Python's two-space frame indent dropped; the code line stays two deeper than its File line.
      if (!is_marker(line)) frames.push_back(rtrim(line.substr(std::min<size_t>(2, line.size()))));
      continue;
    }
    if (line.empty() || line.rfind(kTracebackHeader, 0) == 0) continue;
    if (frames.empty()) break;  // text before any frame: not a traceback
    err.error = trim(line);
    break;
  }
  if (err.error.empty()) return std::nullopt;
  const size_t keep = std::min(max_frame_lines, frames.size());
  err.frames.assign(frames.end() - static_cast<std::ptrdiff_t>(keep), frames.end());
  return err;
}

}  // namespace meshrun::launcher
