// What one rank's agent knows about the rank when a hang is suspected: its process state and its
// collective record (from meshrun's Python hook, which reads PyTorch's Flight Recorder; docs/progress.md).
// Agents exchange these across nodes as JSON (hang_exchange.hpp) and every agent judges the same list
// (hang_verdict.hpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "launcher/activity/activity_rule.hpp"
#include "launcher/activity/wait_rule.hpp"
#include "proto/worker/collective_dump.hpp"

namespace meshrun::launcher {

/// The worker process as its agent sees it in /proc.
enum class ProcessState { kRunning, kStopped, kExited };

/// Whether the rank's collective record could be read, and if not, why.
enum class RecordSource {
  kRecorded,        // the hook answered with the Flight Recorder's entries
  kNoHook,          // no hook ever spoke: python -I/-E/-S, not Python, or a Python child of a wrapper
  kRecorderOff,     // TORCH_FR_BUFFER_SIZE=0: PyTorch records nothing
  kNoProcessGroup,  // the hook answered but no process group is initialised (yet)
  kNoAnswer,        // the hook was there but did not answer in time (the process holds the GIL, or is stopped)
};

using proto::CollectiveEntry;  // the worker's own record of its collectives (proto/worker/collective_dump.hpp)
using proto::GroupProgress;

struct RankRecord {
  int rank = 0;
  int local_rank = 0;
  int node = 0;  // group rank of the rank's node
  std::string host;
  pid_t pid = 0;
  ProcessState state = ProcessState::kRunning;
  RecordSource source = RecordSource::kNoHook;
  std::string source_detail;  // why kNoAnswer/kNoHook, in words
  int64_t beat_step = -1;     // the last progress beat's step (-1: none)
  std::map<std::string, GroupProgress> groups;
  std::vector<CollectiveEntry> entries;  // by group, then seq
  Activity activity;                     // what its process tree did over the last seconds (stuck or busy)
  RankWait wait;                         // an idle rank: what it waits on, inside the job or outside (late or hung)
  std::vector<PythonThread> threads;     // its Python threads, from the hook's dump: read where it runs, never sent

  /// The entry of `group` at `seq`, or nullptr.
  const CollectiveEntry* entry(const std::string& group, int64_t seq) const;
};

std::string_view to_string(ProcessState value);
std::string_view to_string(RecordSource value);

void to_json(nlohmann::json& j, const RankRecord& record);
void from_json(const nlohmann::json& j, RankRecord& record);

/// Fills `record`'s collective part and its Python threads from the worker's dump file
/// (proto/worker/collective_dump.hpp: meshrun's hook or meshrun-trainer wrote it). Throws ProtocolError naming what is
/// malformed.
void read_hook_dump(const std::string& text, RankRecord& record);

}  // namespace meshrun::launcher
