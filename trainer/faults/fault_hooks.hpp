// Test-only fault hooks (docs/checkpoints.md, "Fault hooks"): environment variables that make one rank
// crash, stall or fail at one chosen point, so tests can prove what survives. Each names STEP:RANK (some add
// :SECONDS) and fires in a launcher's first attempt only (TORCHELASTIC_RESTART_COUNT unset or 0): a fault
// that happens once, which a job with restarts recovers from.
#pragma once

#include <cstdint>
#include <optional>

namespace meshrun::trainer {

/// Where a hook may fire: this rank at this step.
struct FaultSite {
  int64_t step = 0;
  int rank = 0;
};

/// True when `variable` is set to "STEP:RANK" of `site`, in the first attempt.
bool fault_at(const char* variable, const FaultSite& site);
/// Sleeps for SECONDS when `variable` is "STEP:RANK:SECONDS" of `site`, in the first attempt.
void stall_if_asked(const char* variable, const FaultSite& site);
/// SIGKILLs this process when `variable` is "STEP:RANK" of `site`, in the first attempt.
void kill_if_asked(const char* variable, const FaultSite& site);
/// SECONDS when `variable` is "STEP:RANK:SECONDS" of `site`, in the first attempt.
std::optional<double> fault_seconds(const char* variable, const FaultSite& site);
/// Holds the job at a known step, for tests that inject a fault there instead of racing a running job: when
/// `variable` is "STEP[,STEP...]:DIR" and names `site`'s step, in any attempt, this rank writes
/// DIR/held.STEP.RANK and waits until DIR/release.STEP exists. Once it exists the step passes unheld, so a
/// restarted job that does the step again goes on.
void hold_if_asked(const char* variable, const FaultSite& site);
/// Computes for SECONDS (one core, no beat) when `variable` is "STEP:RANK:SECONDS" of `site`, in the first
/// attempt: a busy rank the others wait for, late but not hung.
void busy_if_asked(const char* variable, const FaultSite& site);

}  // namespace meshrun::trainer
