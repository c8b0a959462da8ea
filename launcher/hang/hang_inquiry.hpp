// HangInquiry: what every agent does once a hang is suspected anywhere in the job (docs/progress.md):
//   1. its ranks' records: the process state (/proc), what each process tree did over the last seconds
//      (stuck or busy), and each Python worker's collective record and threads, asked of meshrun's hook (3 s at
//      most; a rank that cannot answer says why); for an idle rank, what its threads wait on (late or hung:
//      inside the job, or outside it);
//   2. posts them to the workers' store and reads every node's (HangExchange);
//   3. judges them (judge_hang: the same verdict on every node), writes <attempt dir>/hang.json (late.json
//      for a late verdict, which ends the inquiry: the job goes on);
//      (the caller reports the culprit here, before the stacks, which take longer)
//   4. reads every local rank's stack at once, posts them, and groups every node's identical stacks.
// The caller keeps heartbeats going meanwhile (HeartbeatKeeper) and stops the workers after.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/activity/activity_monitor.hpp"
#include "launcher/hang/hang_exchange.hpp"
#include "launcher/hang/hang_verdict.hpp"
#include "launcher/hang/stack_groups.hpp"
#include "launcher/progress/progress_monitor.hpp"

namespace meshrun::launcher {

class WorkerGroup;

struct HangInquirySite {
  int node = 0;   // this node's group rank
  int nodes = 1;  // the nodes of the attempt
  std::string host;
  std::string attempt_dir;
  std::string executable;  // the workers' program (py-spy is looked for beside it)
  std::string store_host;  // the workers' store (MASTER_ADDR, MASTER_PORT): a peer of the job, for waits on it
  int store_port = 0;
};

class HangInquiry {
 public:
  /// Reads `progress` (draining it while the records are awaited), `activity` (what each process tree did) and
  /// `group`; all three and `exchange` must outlive it.
  HangInquiry(ProgressMonitor& progress, const ActivityMonitor& activity, WorkerGroup& group, HangExchange& exchange,
              HangInquirySite site);

  /// Steps 1-3: every node's records judged. `suspect` (the standing request's rank and reason) is what
  /// the verdict falls back on when no recorded collective explains the hang.
  /// `lateness.waited_s` also bounds the window each rank's activity is judged over.
  HangVerdict judge(const std::optional<FallbackSuspect>& suspect, const LatenessRule& lateness);
  /// Step 4: every node's ranks' stacks that arrived in time, by rank (also in <rank dir>/stack.txt).
  std::vector<RankStack> stacks();
  /// Where judge() wrote a verdict of `outcome` and the records: <attempt dir>/hang.json for a hang,
  /// late.json for an inquiry that left the job running (late or resolved).
  std::string verdict_file(HangOutcome outcome = HangOutcome::kHung) const {
    return site_.attempt_dir + (outcome == HangOutcome::kHung ? "/hang.json" : "/late.json");
  }

 private:
  std::vector<RankRecord> local_records(double window_s);
  RankRecord base_record(size_t local_rank, double window_s) const;
  /// What local rank `lr`'s process tree did while the others waited for it (at most `window_s`).
  Activity activity(size_t lr, double window_s) const;
  void collect_dumps(std::vector<RankRecord>& records);
  void read_waits(std::vector<RankRecord>& records) const;
  std::vector<RankStack> local_stacks() const;
  std::vector<RankRecord> all_records(const std::vector<RankRecord>& mine);
  std::vector<RankStack> all_stacks(const std::vector<RankStack>& mine);

  ProgressMonitor& progress_;
  const ActivityMonitor& activity_;
  WorkerGroup& group_;
  HangExchange& exchange_;
  HangInquirySite site_;
};

}  // namespace meshrun::launcher
