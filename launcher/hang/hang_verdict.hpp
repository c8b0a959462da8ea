// The hang verdict: from every rank's RankRecord (all nodes), which rank did not arrive, at which
// collective of which group, and where the others wait. Pure: the same records give the same verdict on
// every node.
//
// The rule (the idea of PyTorch's fr_trace, at hang time): per process group, the ranks that entered a
// collective and wait in it (entered, not completed) wait for the members that never entered that
// sequence number. A rank that waits for nobody and is waited for is the culprit; a rank that is itself
// waiting elsewhere is only a link in the chain (a subgroup hang holds the default group up too). A
// stopped worker (state T) wins over all of it. When every member entered, their entries at that number
// are compared: another op, other sizes or dtypes is a mismatch, and the minority is named.
//
// Then, late or hung (docs/progress.md): a rank that never entered (or has no record, or was suspected from
// beats alone) is judged by what its process tree did (RankRecord::activity) and, when it is idle, by what it
// waits on (RankRecord::wait). Only proof makes it hung: it is stopped, or every way out of its wait leads back
// into the job (a lock nothing else can release, the job's own sockets). A busy rank (it computes, reads or
// writes), or one that waits on the world outside the job (a service, a sleep, a file polled) or on what meshrun
// cannot classify, is *late*: the job goes on, as under torchrun, unless --hang-busy-timeout or
// --hang-outside-timeout is set and the wait is past it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "launcher/hang/collective_record.hpp"

namespace meshrun::launcher {

enum class HangKind {
  kStopped,       // a worker is stopped by a signal (state T)
  kNeverEntered,  // ranks wait in a collective another rank never entered
  kMismatch,      // every member entered the same sequence number with another op, size or dtype
  kNoRecord,      // ranks wait; the members they wait for have no collective record (reason given)
  kAllInside,     // every member is inside the same collective and none completes (transport, network)
  kCycle,         // ranks wait in different groups for each other (collectives called in another order)
  kNoCollective,  // no rank waits in a recorded collective: judged from beats or silence alone
};

std::string_view to_string(HangKind value);

/// What the agents do with a verdict.
enum class HangOutcome {
  kHung,      // act: stop the attempt (restart or end)
  kLate,      // every rank waited for is busy: say so, and let the job run
  kResolved,  // the wait that was suspected ended before the records were read: nothing to say
};

std::string_view to_string(HangOutcome value);

struct HangVerdict {
  HangKind kind = HangKind::kNoCollective;
  HangOutcome outcome = HangOutcome::kHung;
  std::vector<int> culprits;  // the ranks named (the first is the suspect)
  std::string group;          // the process group of the collective (empty: none)
  std::vector<int> group_ranks;
  int64_t seq = -1;
  std::string op;
  std::vector<int> waiting;  // the ranks waiting in it
  int64_t waiting_since_unix_ms = 0;
  std::string call_site;           // where the waiting ranks called it ("train.py:88 in step")
  std::string line;                // the one line a person acts on
  std::vector<std::string> notes;  // ranks without a record, and why
  int suspect_node = -1;           // the culprit's node (group rank), for the restart policy
  std::string suspect_host;
  double waited_s = 0;       // how long the others had waited when the suspicion was raised
  std::string late_subject;  // late: who is late and what each does, without figures ("0 busy", "0 waits on ...")
};

/// The verdict over every rank's record. `fallback` (a rank and why it looked hung, from beats or
/// silence) is used when no recorded collective explains the hang.
struct FallbackSuspect {
  int rank = -1;
  std::string reason;
  bool from_collective_wait = false;  // it was found waiting in a collective: nothing open now means it ended
};
/// How busy culprits are treated: the same figures on every node (they travel in the standing request).
struct LatenessRule {
  double waited_s = 0;                      // how long the suspicion's rank had waited (or been silent)
  std::optional<double> busy_timeout_s;     // --hang-busy-timeout: a busy rank past it is hung too
  std::optional<double> outside_timeout_s;  // --hang-outside-timeout: a rank waiting outside the job, past it too
};
[[nodiscard]] HangVerdict judge_hang(const std::vector<RankRecord>& ranks,
                                     const std::optional<FallbackSuspect>& fallback, const LatenessRule& lateness = {});

/// "0-3", "0,2,5", "0-2,7".
std::string format_ranks(std::vector<int> ranks);

void to_json(nlohmann::json& j, const HangVerdict& verdict);

}  // namespace meshrun::launcher
