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

// Where one cgroup version keeps a group's memory limit and use.
struct CgroupFiles {
  const char* root;
  const char* limit;
  const char* usage;
};
// v2 (unified), and v1's memory controller (systemd and container runtimes mount it there; SLURM's
// task/cgroup on v1 limits jobs with it).
constexpr CgroupFiles kCgroupV2{"/sys/fs/cgroup", "memory.max", "memory.current"};
constexpr CgroupFiles kCgroupV1{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"};
// v1 says "no limit" with a page-rounded LONG_MAX.
constexpr uint64_t kV1Unlimited = 1ULL << 62;

// This process's path in the v2 hierarchy ("0::/a/b" in /proc/self/cgroup) or in v1's memory one
// ("4:memory:/a/b"; the controller may share its line: "4:cpu,memory:/a/b").
std::optional<std::string> cgroup_path(const ReadText& read, bool v1) {
  const auto text = read("/proc/self/cgroup");
  if (!text) return std::nullopt;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    bool memory = false;
    std::istringstream controllers(line.substr(first + 1, second - first - 1));
    for (std::string name; std::getline(controllers, name, ',');) memory = memory || name == "memory";
    if (v1 ? memory : line.rfind("0::", 0) == 0) return trim(line.substr(second + 1));
  }
  return std::nullopt;
}

// Lowers `room` to what is left under the limit of the group at `path` and of each of its ancestors.
void tighten(MemoryRoom& room, const ReadText& read, std::optional<std::string> path, const CgroupFiles& files) {
  while (path && !path->empty()) {
    const std::string dir = files.root + (*path == "/" ? std::string() : *path);
    // v2's "max" reads as nothing, v1's page-rounded LONG_MAX as too much: no limit either way.
    const uint64_t limit = number(read(dir + "/" + files.limit)).value_or(kV1Unlimited);
    const auto usage = number(read(dir + "/" + files.usage));
    if (limit < kV1Unlimited && usage) {
      const uint64_t left = limit > *usage ? limit - *usage : 0;
      if (!room.known || left < room.bytes) {
        std::string bound = "cgroup " + *path;
        bound.append(" ").append(files.limit).append(" ").append(gib(limit));
        room = {left, std::move(bound), true};
      }
    }
    if (*path == "/") break;
    const auto slash = path->rfind('/');
    path = slash == 0 ? std::string("/") : path->substr(0, slash);
  }
}

}  // namespace

MemoryRoom memory_room(const ReadText& read) {
  MemoryRoom room;
  if (const auto available = mem_available(read)) room = {*available, "MemAvailable", true};
  tighten(room, read, cgroup_path(read, false), kCgroupV2);
  tighten(room, read, cgroup_path(read, true), kCgroupV1);
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
