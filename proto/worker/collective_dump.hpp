// The collective record a worker's reporter writes when its agent asks "dump <path>" (proto/worker/hook_messages.hpp):
// a JSON file, written by meshrun's Python hook (from PyTorch's Flight Recorder) or by meshrun-trainer's
// CollectiveLedger, and read by the agent when a hang is suspected (launcher/hang/). Std and nlohmann only:
// the trainer links it (meshrun_worker_messages).
//
//   {"fr":"on","pid":P,"groups":{"<name>":{"ranks":[..],"last_enqueued":N,"last_completed":M}},
//    "entries":[{"group":G,"seq":S,"op":"all_reduce","sizes":"[[4]]","dtypes":"Float","created_ms":T,
//                "retired":false,"frames":["train.py:88 in step", ...]}]}
//   {"fr":"off"|"no_process_group","pid":P}
// Each form may carry "threads" (the Python hook's, read for "late or hung": docs/progress.md):
//   [{"tid":T,"name":"MainThread","frames":["socket.py:706 in readinto", ...],"where":"main at job.py:14",
//     "call":"urlopen","meshrun":false}]
// A frame may also come as [file, line, function] (the Python hook's form); it is read as "file:line in function".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace meshrun::proto {

/// A process group as one rank sees it.
struct GroupProgress {
  std::vector<int> ranks;      // global ranks; empty when unknown
  int64_t last_enqueued = -1;  // the last collective sequence number this rank entered
  int64_t last_completed = -1;

  bool operator==(const GroupProgress&) const = default;
};

/// One collective this rank entered.
struct CollectiveEntry {
  std::string group;  // process group name ("0": the default group)
  int64_t seq = -1;   // collective_seq_id within the group
  std::string op;     // "all_reduce", "broadcast", "barrier", ...
  std::string sizes;  // the input sizes as text ("[[4]]"): compared, never interpreted
  std::string dtypes;
  int64_t created_unix_ms = 0;      // the rank's host clock when it entered
  bool retired = false;             // completed
  std::vector<std::string> frames;  // the caller's frames, innermost first: "train.py:88 in step"

  bool operator==(const CollectiveEntry&) const = default;
};

/// One Python thread of the worker (meshrun's hook lists them all; meshrun-trainer none).
struct ThreadFrames {
  int64_t tid = 0;  // its native id: the kernel's thread id
  std::string name;
  std::vector<std::string> frames;  // innermost first
  std::string where;                // the innermost frame of the user's code: "main at job.py:14"
  std::string call;                 // the library function that frame called: "urlopen" ("" when none)
  bool meshrun = false;             // meshrun's own thread (the hook's)

  bool operator==(const ThreadFrames&) const = default;
};

/// What the reporter could record.
enum class RecorderState {
  kOn,              // "on": groups and entries follow
  kOff,             // "off": TORCH_FR_BUFFER_SIZE=0, PyTorch records nothing
  kNoProcessGroup,  // "no_process_group": no process group is initialised (yet)
};

struct CollectiveDump {
  RecorderState recorder = RecorderState::kOn;
  int64_t pid = 0;  // the worker's (0: not said)
  std::map<std::string, GroupProgress> groups;
  std::vector<CollectiveEntry> entries;  // by group, then seq
  std::vector<ThreadFrames> threads;     // in any state of the recorder

  bool operator==(const CollectiveDump&) const = default;
};

/// Throws ProtocolError naming what is malformed.
CollectiveDump parse_collective_dump(std::string_view text);
std::string format_collective_dump(const CollectiveDump& dump);

// The entries and groups as JSON, for records that carry them further (the agents' hang exchange).
void to_json(nlohmann::json& j, const GroupProgress& g);
void from_json(const nlohmann::json& j, GroupProgress& g);
void to_json(nlohmann::json& j, const CollectiveEntry& e);
void from_json(const nlohmann::json& j, CollectiveEntry& e);
void to_json(nlohmann::json& j, const ThreadFrames& t);
void from_json(const nlohmann::json& j, ThreadFrames& t);

}  // namespace meshrun::proto
