// Root cause across nodes: the FailureReport an agent sends the daemon for a failed or hung worker (its
// error from error.json or the Python traceback in its stderr), and the block every agent prints from
// the daemon's time-ordered list: the first failure in the whole job, then the others as consequences.
#pragma once

#include <string>
#include <vector>

#include "launcher/failure/failure_summary.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher {

/// The report for `info` (a hang when info.hang_reason is set), failed in `round`.
proto::FailureReport failure_report(const FailureInfo& info, int64_t round);

/// "meshrun: root cause ..." (ends with a newline), or "" when `failures` is empty.
std::string format_root_cause(const std::vector<proto::FailureReport>& failures);

}  // namespace meshrun::launcher
