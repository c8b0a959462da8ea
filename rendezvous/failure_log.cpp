#include "rendezvous/failure_log.hpp"

#include <algorithm>
#include <string>

namespace meshrun::rendezvous {
namespace {

constexpr size_t kMaxFieldBytes = 512;

void clip(std::string& text) {
  if (text.size() > kMaxFieldBytes) text.resize(kMaxFieldBytes);
}

}  // namespace

void FailureLog::record(proto::FailureReport report) {
  if (report.round < round_) return;
  if (report.round > round_) {
    round_ = report.round;
    reports_.clear();
  }
  clip(report.host);
  clip(report.exit);
  clip(report.error);
  if (report.traceback.size() > proto::kMaxTracebackLines) {
    report.traceback.erase(report.traceback.begin(),
                           report.traceback.end() - static_cast<std::ptrdiff_t>(proto::kMaxTracebackLines));
  }
  for (auto& line : report.traceback) clip(line);
  // The same rank again (the daemon named it from the heartbeats, then its agent reported it): one entry,
  // the agent's details, dated at the earlier of the two.
  for (auto it = reports_.begin(); it != reports_.end(); ++it) {
    if (it->rank != report.rank) continue;
    report.unix_ms = std::min(report.unix_ms, it->unix_ms);
    reports_.erase(it);
    break;
  }
  const auto at = std::upper_bound(reports_.begin(), reports_.end(), report,
                                   [](const auto& a, const auto& b) { return a.unix_ms < b.unix_ms; });
  reports_.insert(at, std::move(report));
  // Keep the earliest: the root cause is among them, later ones only repeat the consequences.
  if (reports_.size() > proto::kMaxFailureReports) reports_.resize(proto::kMaxFailureReports);
}

}  // namespace meshrun::rendezvous
