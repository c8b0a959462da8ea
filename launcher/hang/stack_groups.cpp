#include "launcher/hang/stack_groups.hpp"

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>

#include "common/strings.hpp"
#include "launcher/hang/hang_verdict.hpp"

namespace meshrun::launcher {
namespace {

// A line that opens another thread's stack in the tools' outputs.
bool thread_header(const std::string& line) { return line.starts_with("Thread ") || line.starts_with("TID "); }

// One native frame ("#3  0x00007f... in func (args) at file.c:12" or "#3  0x00007f... func") as "func".
std::string native_frame(const std::string& line) {
  static const std::regex frame(R"(^#\d+\s+(?:0x[0-9a-fA-F]+\s+)?(?:in\s+)?([^\s(]+).*?(?:\sat\s(\S+))?$)");
  std::smatch m;
  if (!std::regex_match(line, m, frame)) return line;
  const std::string where = m[2].matched ? " (" + m[2].str() + ")" : "";
  return m[1].str() + where;
}

}  // namespace

std::vector<std::string> stack_frames(const RankStack& stack) {
  std::vector<std::string> frames;
  bool in_first_thread = false;
  std::istringstream in(stack.text);
  for (std::string raw; std::getline(in, raw);) {
    const std::string line = trim(raw);
    if (line.empty()) continue;
    if (thread_header(line)) {
      if (in_first_thread) break;  // the main thread is listed first; the rest (meshrun's hook...) differ
      in_first_thread = true;
      continue;
    }
    if (!in_first_thread) continue;
    frames.push_back(line.starts_with("#") ? native_frame(line) : line);
  }
  if (frames.empty() && !stack.text.empty()) frames.push_back(trim(stack.text.substr(0, stack.text.find('\n'))));
  return frames;
}

std::string format_stack_groups(const std::vector<RankStack>& stacks) {
  std::map<std::vector<std::string>, std::vector<int>> groups;
  std::map<std::vector<std::string>, std::string> tools;
  for (const auto& s : stacks) {
    const auto frames = stack_frames(s);
    groups[frames].push_back(s.rank);
    tools[frames] = s.tool;
  }
  std::vector<std::pair<std::vector<std::string>, std::vector<int>>> ordered(groups.begin(), groups.end());
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return a.second.size() != b.second.size() ? a.second.size() > b.second.size() : a.second < b.second;
  });
  std::string out;
  for (const auto& [frames, ranks] : ordered) {
    const std::string who = ranks.size() == 1 ? "rank " + std::to_string(ranks.front())
                                              : std::to_string(ranks.size()) + " ranks (" + format_ranks(ranks) + ")";
    std::string chain;
    for (const auto& f : frames) chain += (chain.empty() ? "" : " <- ") + f;
    const std::string& tool = tools[frames];
    out +=
        "  " + who + (tool.empty() ? "" : " [" + tool + "]") + ": " + (chain.empty() ? "(empty stack)" : chain) + "\n";
  }
  return out;
}

}  // namespace meshrun::launcher
