#include "proto/rendezvous/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace meshrun::proto {
namespace {

bool names_any(std::string_view phase, std::initializer_list<std::string_view> words) {
  return std::any_of(words.begin(), words.end(), [phase](std::string_view w) { return phase.find(w) != phase.npos; });
}

/// "01:02:03" for the wall time.
std::string clock_text(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char text[32];
  std::snprintf(text, sizeof text, "%02lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

/// "2m10s", "41s", "4.2s", "1h02m" for a part.
std::string span_text(double seconds) {
  char text[32];
  if (seconds < 10) {
    std::snprintf(text, sizeof text, "%.1fs", seconds);
    return text;
  }
  const auto s = static_cast<long long>(std::llround(seconds));
  if (s < 60) {
    std::snprintf(text, sizeof text, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  }
  return text;
}

}  // namespace

PhaseKind phase_kind(std::string_view phase) {
  if (phase.empty() || phase == "train") return PhaseKind::kTrain;
  if (names_any(phase, {"checkpoint", "ckpt", "save", "load", "restore"})) return PhaseKind::kCheckpoint;
  return PhaseKind::kOther;
}

double accounted_s(const GoodputReport& r) {
  return r.productive_s + r.startup_s + r.checkpoint_s + r.other_phases_s + r.stall_s + r.hang_wait_s + r.restarts_s +
         r.work_lost_s + r.shutdown_s + r.untold_s + r.in_progress_s;
}

std::string describe(const GoodputReport& r) {
  char head[160];
  if (r.measure == AccountMeasure::kNone && r.productive_s <= 0) {
    // Nothing to time it by: saying 0.0 % would claim the job did nothing.
    std::snprintf(head, sizeof head, "goodput unknown for %s (no step beats, and too few collectives to time it by)",
                  clock_text(r.wall_s).c_str());
  } else {
    std::snprintf(head, sizeof head, "goodput %.1f %% of %s%s", 100.0 * r.ratio, clock_text(r.wall_s).c_str(),
                  r.measure == AccountMeasure::kCollectives ? " (timed by its collectives: no step beats)" : "");
  }
  std::vector<std::pair<double, std::string>> parts = {
      {r.restarts_s, "restarts " + span_text(r.restarts_s) + " (" + std::to_string(r.restarts) + ")"},
      {r.checkpoint_s, "checkpoints " + span_text(r.checkpoint_s)},
      {r.startup_s, "start-up " + span_text(r.startup_s)},
      {r.hang_wait_s, "hang waits " + span_text(r.hang_wait_s)},
      {r.work_lost_s, "work lost " + span_text(r.work_lost_s) +
                          (r.recomputed_steps > 0 ? " (" + std::to_string(r.recomputed_steps) + " steps again)" : "")},
      {r.other_phases_s, "eval and other phases " + span_text(r.other_phases_s)},
      {r.stall_s, "stalls " + span_text(r.stall_s)},
      {r.shutdown_s, "shutdown " + span_text(r.shutdown_s)},
  };
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out = head + std::string("; badput:");
  bool any = false;
  for (const auto& [seconds, text] : parts) {
    if (seconds < 0.05) continue;
    out += (any ? ", " : " ") + text;
    any = true;
  }
  if (!any) out += " none";
  if (r.untold_s >= 0.05) {
    out += "; " + span_text(r.untold_s) +
           " ran with no step beats and too few collectives to time it by (docs/daemon.md#the-goodput-ledger)";
  }
  if (r.spare_node_s >= 0.05) out += "; hot spares idle " + span_text(r.spare_node_s) + " (node-seconds)";
  return out;
}

}  // namespace meshrun::proto
