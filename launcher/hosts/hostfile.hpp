// Hostfile: the hosts of an ssh fan-out, in DeepSpeed's format, and the --include/--exclude filters.
//
//   # comment                       worker-0 slots=4
//   worker-1 slots=4   # trailing   worker-2            (no slots: --nproc-per-node workers)
//
// Filters (DeepSpeed syntax): hosts joined by '@', each optionally with ":slot,slot" to pick slots,
// e.g. --include "worker-0@worker-1:0,2" or --exclude "worker-1:1". Slots are local GPU indices.
#pragma once

#include <string>
#include <vector>

namespace meshrun::launcher {

struct HostEntry {
  std::string host;
  int slots = 0;            // from `slots=N`; 0 when the line gave none
  std::vector<int> picked;  // slots left after filtering (empty: all of them); sets CUDA_VISIBLE_DEVICES
};

/// Parses a hostfile's text; `source` names it in errors. Throws UsageError naming the line for malformed
/// lines, a bad slot count or a host listed twice; an empty list is an error too.
std::vector<HostEntry> parse_hostfile(const std::string& text, const std::string& source);

/// Applies --include / --exclude (at most one may be non-empty). Throws UsageError for hosts that are not
/// in the hostfile, slots out of range, both filters given, or a filter that leaves no host.
std::vector<HostEntry> select_hosts(std::vector<HostEntry> hosts, const std::string& include,
                                    const std::string& exclude);

}  // namespace meshrun::launcher
