// FailureLog: a run's worker failures, for the root cause across nodes. Agents report each failure at
// once; the log keeps the latest failing round's reports ordered by when they happened (the daemon's
// clock minus the report's age), so the first is the root cause and the rest its consequences. Bounded:
// kMaxFailureReports per run, text fields clipped. Pure (no I/O).
#pragma once

#include <cstdint>
#include <vector>

#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::rendezvous {

class FailureLog {
 public:
  /// Adds `report` (unix_ms and node_id already set). A report of an older round than the log's is
  /// dropped; a newer round starts the log afresh. A second report of the same rank replaces the first,
  /// keeping the earlier time.
  void record(proto::FailureReport report);
  /// The latest failing round's reports, earliest first.
  const std::vector<proto::FailureReport>& reports() const { return reports_; }

 private:
  int64_t round_ = -1;
  std::vector<proto::FailureReport> reports_;
};

}  // namespace meshrun::rendezvous
