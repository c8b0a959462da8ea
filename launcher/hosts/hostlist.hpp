// SLURM's hostlist syntax ("gpu[01-04,07],cpu5", "x-[1-2]-[1-2]") expanded to host names, the way
// `scontrol show hostnames` does, so SLURM_JOB_NODELIST can be read without calling scontrol.
#pragma once

#include <string>
#include <vector>

namespace meshrun::launcher {

/// Expands a SLURM hostlist into host names, in SLURM's order (left to right; for several bracket groups
/// in one name the leftmost varies slowest). Ranges keep their zero padding ("n[08-10]" -> n08 n09 n10).
/// Throws UsageError naming the list on malformed input (unbalanced brackets, "n[3-1]", empty items).
std::vector<std::string> expand_hostlist(const std::string& hostlist);

}  // namespace meshrun::launcher
