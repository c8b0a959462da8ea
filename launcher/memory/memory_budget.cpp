#include "launcher/memory/memory_budget.hpp"

#include <fstream>
#include <sstream>

#include "common/strings.hpp"

namespace meshrun::launcher {
namespace {

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1ULL << 30));
  return text;
}

// The text of a one-line file, without its blanks and line end.
std::string line_of(const std::string& text) { return trim(text.substr(0, text.find('\n'))); }

std::optional<uint64_t> number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  const std::string t = line_of(*text);
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoull(t);
}

std::optional<uint64_t> mem_available(const ReadText& read) {
  const auto meminfo = read("/proc/meminfo");
  if (!meminfo) return std::nullopt;
  std::istringstream lines(*meminfo);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

// The cgroup v2 path of this process ("0::/a/b" in /proc/self/cgroup).
std::optional<std::string> cgroup_path(const ReadText& read) {
  const auto text = read("/proc/self/cgroup");
  if (!text) return std::nullopt;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("0::", 0) == 0) return trim(line.substr(3));
  }
  return std::nullopt;
}

}  // namespace

MemoryRoom memory_room(const ReadText& read) {
  MemoryRoom room;
  if (const auto available = mem_available(read)) room = {*available, "MemAvailable", true};
  auto path = cgroup_path(read);
  while (path && !path->empty()) {
    const std::string dir = "/sys/fs/cgroup" + (*path == "/" ? std::string() : *path);
    const auto max = number(read(dir + "/memory.max"));  // "max" (no limit) reads as nothing
    const auto current = number(read(dir + "/memory.current"));
    if (max && current) {
      const uint64_t left = *max > *current ? *max - *current : 0;
      if (!room.known || left < room.bytes) room = {left, "cgroup " + *path + " memory.max " + gib(*max), true};
    }
    if (*path == "/") break;
    const auto slash = path->rfind('/');
    path = slash == 0 ? std::string("/") : path->substr(0, slash);
  }
  return room;
}

std::string budget_refusal(uint64_t need, const MemoryRoom& room) {
  if (!room.known || need <= room.bytes / 2) return "";
  return "copies in memory need " + gib(need) + " more on this node and it has " + gib(room.bytes) + " to spare (" +
         room.bound + "; half is kept for training)";
}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace meshrun::launcher
