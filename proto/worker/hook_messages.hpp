// The messages between an agent and the collective reporter inside each of its workers: meshrun's Python hook
// (launcher/hang/python/_meshrun_hook.py) or meshrun-trainer's CollectiveReporter (docs/progress.md, "Hangs
// without beats"). One datagram each, text.
// Worker -> agent, on <MESHRUN_PROGRESS>.fr, a socket of their own beside the progress beats' (a Unix datagram
// socket queues 10 datagrams: the reports, up to 10 a second, must not crowd out a beat):
//   fr hello pid=<pid> fr=on|off        the reporter started in this worker
//   fr status <group>:<last enqueued>:<last completed> ...   PyTorch's pg_status, on change (and every 5 s)
//   fr dumped <path> | fr failed <why>  the answer to "dump"
//   fr clock <agent ns> <worker ns>     the answer to "clock": a sample of the worker's clock offset
//   fr arrivals <first> <last> <count> <mean ns> <span ns> <group>
//                                       the answer to "arrivals" (the daemon's arrival probe, relayed)
//   fr frames {"frames": [...], "where": "save at train.py:14"}
//                                       the answer to "frames": the main thread's stack, innermost first, and
//                                       its innermost frame of the user's code (stuck or busy)
// Agent -> worker, on <MESHRUN_PROGRESS>.hook:
//   dump <path>   clock <agent ns>   arrivals <first> <last> <group>   frames
// A group name is the rest of its field: it may hold ':' (status) or spaces (arrivals, where it comes last).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace meshrun::proto {

/// When one rank entered a range of a group's collectives, on its own clock (nanoseconds since the epoch).
struct ArrivalAnswer {
  std::string group;
  int64_t first_seq = 0;
  int64_t last_seq = 0;
  int64_t count = 0;  // entries of the range the recorder still held
  int64_t mean_ns = 0;
  int64_t span_ns = 0;

  bool operator==(const ArrivalAnswer&) const = default;
};

/// One datagram from the reporter.
struct HookMessage {
  enum class Kind { kHello, kStatus, kDumped, kFailed, kClock, kArrivals, kFrames };
  struct Group {
    int64_t last_enqueued = -1;
    int64_t last_completed = -1;

    bool operator==(const Group&) const = default;
  };
  Kind kind = Kind::kHello;
  int64_t pid = 0;                      // kHello (0: not given)
  bool recorder_on = true;              // kHello
  std::map<std::string, Group> groups;  // kStatus
  std::string text;                     // kDumped: the path; kFailed: why
  int64_t sent_ns = 0;                  // kClock: the agent's clock when it asked
  int64_t remote_ns = 0;                // kClock: the worker's clock when it answered
  ArrivalAnswer arrivals;               // kArrivals
  std::vector<std::string> frames;      // kFrames: "file:line in function", innermost first
  std::string where;                    // kFrames: the user's innermost frame ("save at train.py:14"), or ""

  static HookMessage hello(int64_t pid, bool recorder_on);
  static HookMessage status(std::map<std::string, Group> groups);
  static HookMessage dumped(std::string path);
  static HookMessage failed(std::string why);

  bool operator==(const HookMessage&) const = default;
};

/// One request from the agent.
struct HookRequest {
  enum class Kind { kDump, kClock, kArrivals, kFrames };
  Kind kind = Kind::kFrames;
  std::string path;       // kDump: where to write the record (JSON)
  int64_t sent_ns = 0;    // kClock: the agent's clock now
  int64_t first_seq = 0;  // kArrivals: the range of `group`'s collectives asked about
  int64_t last_seq = 0;
  std::string group;

  static HookRequest dump(std::string path);
  static HookRequest clock(int64_t sent_ns);
  static HookRequest arrivals(int64_t first_seq, int64_t last_seq, std::string group);
  static HookRequest frames();

  bool operator==(const HookRequest&) const = default;
};

/// True when `datagram` comes from a reporter ("fr ..."), not a progress beat.
bool is_hook_message(std::string_view datagram);
/// Throws ProtocolError naming what is malformed.
HookMessage parse_hook_message(std::string_view datagram);
std::string format_hook_message(const HookMessage& message);

/// Throws ProtocolError naming what is malformed.
HookRequest parse_hook_request(std::string_view datagram);
std::string format_hook_request(const HookRequest& request);

}  // namespace meshrun::proto
