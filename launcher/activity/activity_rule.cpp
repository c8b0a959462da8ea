#include "launcher/activity/activity_rule.hpp"

#include <chrono>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace meshrun::launcher {
namespace {

uint64_t grown(uint64_t before, uint64_t after) { return after > before ? after - before : 0; }

std::string rate_text(double bytes_per_s) {
  if (bytes_per_s >= 1e6) return fmt::format("{:.1f} MB/s", bytes_per_s / 1e6);
  return fmt::format("{:.0f} kB/s", bytes_per_s / 1e3);
}

bool stopped_state(char state) { return state == 'T' || state == 't'; }

}  // namespace

std::string_view to_string(Liveness value) {
  switch (value) {
    case Liveness::kStopped: return "stopped";
    case Liveness::kIdle: return "idle";
    case Liveness::kBusy: return "busy";
    case Liveness::kUnknown: break;
  }
  return "unknown";
}

Activity judge_activity(const TreeSample& older, const TreeSample& newer, const StackMotion& stack, long ticks_per_s) {
  Activity a;
  a.stack_known = stack.known;
  a.stack_moved = stack.known && stack.moved;
  a.where = stack.where;
  if (newer.empty()) {
    a.why_unknown = "the worker is gone";
    return a;
  }
  a.state = newer.leader_state();
  a.processes = static_cast<int>(newer.processes.size());
  if (stopped_state(a.state)) {
    a.liveness = Liveness::kStopped;
    return a;
  }
  a.window_s = std::chrono::duration<double>(newer.at - older.at).count();
  if (older.empty() || older.processes.front().pid != newer.processes.front().pid || a.window_s < kActivityMinWindowS) {
    a.why_unknown = fmt::format("watched for {:.1f} s only", std::max(0.0, a.window_s));
    return a;
  }
  std::map<pid_t, const ProcessSample*> before;
  for (const auto& p : older.processes) before[p.pid] = &p;
  uint64_t ticks = 0, read = 0, written = 0, wakeups = 0;
  for (const auto& p : newer.processes) {
    static const ProcessSample kBorn{};  // a process born in the window: all it did, it did in the window
    const auto it = before.find(p.pid);
    const ProcessSample& b = it != before.end() ? *it->second : kBorn;
    ticks += grown(b.cpu_ticks, p.cpu_ticks);
    wakeups += grown(b.wakeups, p.wakeups);
    if (p.io_known && (b.io_known || it == before.end())) {
      read += grown(b.read_bytes, p.read_bytes);
      written += grown(b.write_bytes, p.write_bytes);
    }
  }
  a.cpu_cores = static_cast<double>(ticks) / static_cast<double>(ticks_per_s > 0 ? ticks_per_s : 100) / a.window_s;
  a.read_bytes_per_s = static_cast<double>(read) / a.window_s;
  a.write_bytes_per_s = static_cast<double>(written) / a.window_s;
  a.wakeups_per_s = static_cast<double>(wakeups) / a.window_s;
  const bool busy = a.cpu_cores >= ActivityNoise::kCpuCores ||
                    a.read_bytes_per_s + a.write_bytes_per_s >= ActivityNoise::kBytesPerS ||
                    a.wakeups_per_s >= ActivityNoise::kWakeupsPerS || a.stack_moved;
  a.liveness = busy ? Liveness::kBusy : Liveness::kIdle;
  return a;
}

std::string describe(const Activity& a) {
  const std::string where = a.where.empty() ? "" : " in " + a.where;
  switch (a.liveness) {
    case Liveness::kStopped: return fmt::format("stopped by a signal (state {})", a.state) + where;
    case Liveness::kUnknown: return "not judged (" + a.why_unknown + ")" + where;
    case Liveness::kIdle: {
      const std::string stack = !a.stack_known ? "" : ", its Python stack unchanged";
      const std::string disk = a.state == 'D' ? ", in an uninterruptible wait (state D)" : "";
      return fmt::format("idle for {:.0f} s ({:.2f} CPU, no I/O{}{})", a.window_s, a.cpu_cores, stack, disk) + where;
    }
    case Liveness::kBusy: break;
  }
  std::string text = a.processes > 1 ? fmt::format("{} processes: ", a.processes) : std::string();
  text += fmt::format("{:.2f} CPU", a.cpu_cores);
  if (a.read_bytes_per_s >= ActivityNoise::kBytesPerS) text += ", reading " + rate_text(a.read_bytes_per_s);
  if (a.write_bytes_per_s >= ActivityNoise::kBytesPerS) text += ", writing " + rate_text(a.write_bytes_per_s);
  const bool other_signs =
      a.cpu_cores >= ActivityNoise::kCpuCores || a.read_bytes_per_s + a.write_bytes_per_s >= ActivityNoise::kBytesPerS;
  if (!other_signs && a.wakeups_per_s >= ActivityNoise::kWakeupsPerS) {
    text += fmt::format(", waking {:.0f} times/s", a.wakeups_per_s);
  }
  if (!other_signs && a.stack_moved) text += ", its Python stack moves";
  return "busy (" + text + ")" + where;
}

void to_json(nlohmann::json& j, const Activity& a) {
  j = {{"liveness", to_string(a.liveness)},
       {"window_s", a.window_s},
       {"processes", a.processes},
       {"state", a.state == '\0' ? std::string() : std::string(1, a.state)},
       {"cpu_cores", a.cpu_cores},
       {"read_bytes_per_s", a.read_bytes_per_s},
       {"write_bytes_per_s", a.write_bytes_per_s},
       {"wakeups_per_s", a.wakeups_per_s},
       {"stack_known", a.stack_known},
       {"stack_moved", a.stack_moved},
       {"where", a.where},
       {"why_unknown", a.why_unknown}};
}

void from_json(const nlohmann::json& j, Activity& a) {
  const std::string liveness = j.value("liveness", "unknown");
  a.liveness = liveness == "busy"      ? Liveness::kBusy
               : liveness == "idle"    ? Liveness::kIdle
               : liveness == "stopped" ? Liveness::kStopped
                                       : Liveness::kUnknown;
  a.window_s = j.value("window_s", 0.0);
  a.processes = j.value("processes", 0);
  const std::string state = j.value("state", "");
  a.state = state.empty() ? '\0' : state[0];
  a.cpu_cores = j.value("cpu_cores", 0.0);
  a.read_bytes_per_s = j.value("read_bytes_per_s", 0.0);
  a.write_bytes_per_s = j.value("write_bytes_per_s", 0.0);
  a.wakeups_per_s = j.value("wakeups_per_s", 0.0);
  a.stack_known = j.value("stack_known", false);
  a.stack_moved = j.value("stack_moved", false);
  a.where = j.value("where", "");
  a.why_unknown = j.value("why_unknown", "");
}

}  // namespace meshrun::launcher
