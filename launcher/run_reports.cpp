#include "launcher/run_reports.hpp"

#include <cstdio>

#include "common/say.hpp"

namespace meshrun::launcher {

void RunReports::recovery(const proto::HeartbeatReply& beat) {
  if (beat.recovered_round <= recovery_said_) return;
  recovery_said_ = beat.recovered_round;
  say("recovery of round " + std::to_string(beat.recovered_round) + ": " + proto::describe(beat.recovery));
}

void RunReports::stragglers(const std::vector<proto::Straggler>& stragglers) {
  std::vector<int> ranks;
  for (const auto& s : stragglers) ranks.push_back(s.rank);
  if (ranks == straggler_ranks_) return;
  straggler_ranks_ = ranks;
  if (stragglers.empty()) {
    say("no stragglers any more");
    return;
  }
  for (const auto& s : stragglers) {
    char line[320];
    if (s.measure == proto::StragglerMeasure::kArrivals) {
      std::snprintf(line, sizeof line,
                    "straggler: rank %d on %s computes %.1f ms between collectives, %.2fx the run's median "
                    "(%.1f ms; the others wait for it: from when each rank entered its collectives)",
                    s.rank, s.host.c_str(), s.seconds * 1e3, s.seconds / s.median_seconds, s.median_seconds * 1e3);
    } else {  // compute_s from its beats, or its step time
      std::snprintf(line, sizeof line, "straggler: rank %d on %s %s %.3f s per step, %.2fx the run's median (%.3f s)",
                    s.rank, s.host.c_str(), s.measure == proto::StragglerMeasure::kCompute ? "computes" : "takes",
                    s.seconds, s.seconds / s.median_seconds, s.median_seconds);
    }
    say(line);
  }
}

void RunReports::slow_nodes(const std::string& note) {
  if (note.empty() || note == slow_nodes_said_) return;
  slow_nodes_said_ = note;
  say("slow node: " + note);
}

void RunReports::late(const std::string& subject, const std::string& line, Clock::time_point now) {
  if (subject == late_subject_ && now - late_at_ < kLateRepeat) return;
  say(line);
  late_subject_ = subject;
  late_at_ = now;
}

}  // namespace meshrun::launcher
