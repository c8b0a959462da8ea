// IdleCores: how many of this machine's cores sat idle since the last reading, from /proc/stat's first line
// (idle + iowait ticks over all ticks, times the cores). Standby workers start only into idle cores, so that
// warming them never slows the job they stand by for.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace meshrun::launcher {

class IdleCores {
 public:
  /// Idle cores on average since the previous call (nullopt on the first call, or when /proc/stat is unreadable).
  std::optional<double> since_last() {
    const auto now = read();
    if (!now) return std::nullopt;
    const auto before = last_;
    last_ = now;
    if (!before || now->total <= before->total) return std::nullopt;
    const double share =
        static_cast<double>(now->idle - before->idle) / static_cast<double>(now->total - before->total);
    return share * static_cast<double>(std::max(1U, std::thread::hardware_concurrency()));
  }

 private:
  struct Ticks {
    uint64_t idle = 0;
    uint64_t total = 0;
  };
  static std::optional<Ticks> read() {
    std::ifstream stat("/proc/stat");
    std::string line;
    if (!std::getline(stat, line) || line.rfind("cpu ", 0) != 0) return std::nullopt;
    std::istringstream fields(line.substr(4));
    Ticks t;
    uint64_t value = 0;
    for (int i = 0; fields >> value; ++i) {
      if (i == 3 || i == 4) t.idle += value;  // idle, iowait
      if (i < 8) t.total += value;            // user nice system idle iowait irq softirq steal (guests are in user)
    }
    return t;
  }

  std::optional<Ticks> last_;
};

}  // namespace meshrun::launcher
