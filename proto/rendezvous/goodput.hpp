// The goodput vocabulary: how one node's beating rank spent an attempt (StepAccount, agent -> daemon in the
// heartbeat's `attempt`), and how a run's wall time splits into productive training and badput by cause
// (GoodputReport: status, /metrics, the page and the `leave` reply). docs/daemon.md#the-goodput-ledger.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace meshrun::proto {

/// What a non-train phase beat counts as.
enum class PhaseKind {
  kTrain,       // "train" (or no phase): steps
  kCheckpoint,  // a phase naming a checkpoint, save, load or restore
  kOther,       // anything else ("eval", ...)
};
PhaseKind phase_kind(std::string_view phase);

/// What an account's productive time was measured from.
enum class AccountMeasure {
  kNone,         // nothing: no step beats and no collectives
  kBeats,        // the script's step beats
  kCollectives,  // its busiest group's completed collectives (a script without step beats)
};

NLOHMANN_JSON_SERIALIZE_ENUM(AccountMeasure, {{AccountMeasure::kNone, "none"},
                                              {AccountMeasure::kBeats, "beats"},
                                              {AccountMeasure::kCollectives, "collectives"}})

/// One rank's attempt from its first step beat on, in seconds of the agent's clock. The intervals tile
/// [first step, counted]: a train interval ends at a step beat; a phase accrues until the report (or until
/// the phase ends). Ages are seconds before the report left; -1: not reached.
struct StepAccount {
  double first_step_age_s = -1;  // the rank's first step beat of the attempt
  double counted_age_s = -1;     // the end of what the figures below cover
  double productive_s = 0;       // intervals of steps the run had not finished before
  double recomputed_s = 0;       // intervals of steps finished before a restart (work lost)
  double checkpoint_s = 0;       // checkpoint phases, less the steps computed in them
  double other_phases_s = 0;     // other phases (eval...), less the steps computed in them
  double stall_s = 0;            // gaps far longer than the job's rhythm, less their usual part
  AccountMeasure measure = AccountMeasure::kBeats;
  int64_t steps = 0;             // new steps counted
  int64_t recomputed_steps = 0;  // steps counted again
  int64_t last_step = -1;        // the last step the rank beat (the run's high-water mark, kept fresh)
};

/// A run's wall time, split. Productive time comes from step intervals alone (it is not wall minus the
/// badput), so the parts summing to the wall time is a check of the whole ledger.
struct GoodputReport {
  double wall_s = 0;          // the run's first join -> its end (or now)
  double productive_s = 0;    // step intervals of new steps
  double startup_s = 0;       // first join -> the first step
  double checkpoint_s = 0;    // checkpoint phases (save and load after the first step)
  double other_phases_s = 0;  // eval and other phases the script beat
  double stall_s = 0;         // steps (or collectives) far slower than the job's rhythm: a wait nothing named
  double hang_wait_s = 0;     // the last step before a hang -> the hang's verdict
  double restarts_s = 0;      // each restart, its fault -> the first step after it (docs: the recovery ledger)
  int64_t restarts = 0;
  double work_lost_s = 0;        // steps computed again after a restart, and the unfinished step a fault cut
  int64_t steps = 0;             // new steps counted (productive)
  int64_t recomputed_steps = 0;  // steps computed again (in work lost)
  double shutdown_s = 0;         // the last step (or phase) -> the end
  double untold_s = 0;           // running without step beats: meshrun cannot split it
  double in_progress_s = 0;      // the step under way (a live report; 0 once the run ended)
  double spare_node_s = 0;       // hot spares' idle time, node-seconds (beside the split, not in it)
  double ratio = 0;              // productive / wall
  bool ended = false;            // the run's last node left: the report is final
  AccountMeasure measure = AccountMeasure::kNone;  // what the productive time was measured from (the last attempt's)
};

/// Every part of the split, which sums to wall_s when the ledger is right.
double accounted_s(const GoodputReport& report);
/// "goodput 93.1 % of 01:02:03; badput: restarts 2m10s (3), checkpoints 1m02s, start-up 41s".
std::string describe(const GoodputReport& report);

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(StepAccount, first_step_age_s, counted_age_s, productive_s,
                                                recomputed_s, checkpoint_s, other_phases_s, stall_s, measure, steps,
                                                recomputed_steps, last_step)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GoodputReport, wall_s, productive_s, startup_s, checkpoint_s,
                                                other_phases_s, stall_s, hang_wait_s, restarts_s, restarts, work_lost_s,
                                                steps, recomputed_steps, shutdown_s, untold_s, in_progress_s,
                                                spare_node_s, ratio, ended, measure)

}  // namespace meshrun::proto
