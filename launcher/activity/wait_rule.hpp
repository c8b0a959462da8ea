// Late or hung: whether what an idle rank waits on can end by itself (docs/progress.md, "Late or hung"). Pure:
// judged from the threads' waits (wait_probe.hpp) and, for a Python worker, its threads' stacks (meshrun's hook).
//
//   outside  the wait ends by itself, or by something outside the job: a timed sleep, a socket to an address that
//            is no peer of the job (a service), a pipe or named pipe fed by a process outside the tree, a terminal,
//            a signal, a file lock, a disk (state D); or a thread or child process of the tree that waits so
//   inside   every wait leads back into the job: a lock, an event or a queue of its own process that no other
//            thread or child can release (each of them waits on locks, on the job's own sockets, or on this one),
//            a pipe only its own tree writes, a socket to the job's store or to another rank, the GPU's driver
//   unknown  what it waits on could not be read, or is none of these
// Only inside is proof of a hang; outside and unknown make a rank late (meshrun names it and waits).
//
// Which threads can release a lock: the process's Python threads (meshrun's hook excluded) and its child
// processes, judged in full; its other (native) threads, such as PyTorch's and Gloo's, count only when they run,
// wait on a connected socket or a pipe to the outside, or a terminal: their timed waits and their own locks are
// their library's business, not a way out of the script's wait.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "launcher/activity/wait_probe.hpp"

namespace meshrun::launcher {

enum class WaitPlace { kUnknown, kOutside, kInside };

std::string_view to_string(WaitPlace value);

/// One Python thread of the worker, as meshrun's hook lists it.
struct PythonThread {
  int64_t tid = 0;  // the kernel's thread id
  std::string name;
  std::vector<std::string> frames;  // innermost first: "/usr/lib/python3.11/socket.py:706 in readinto"
  std::string where;                // the innermost frame of the user's code: "main at job.py:14"
  std::string call;                 // the library function that frame called ("urlopen"; "" when none)
  bool meshrun = false;             // meshrun's own thread (the hook)
};

/// What belongs to the job on this node, for sockets: its processes (every worker's tree, the agent) and the
/// addresses of its own services (the workers' store; the judge adds every rank's listening sockets).
struct JobPeers {
  std::set<pid_t> pids;
  std::set<std::string> endpoints;
};

struct RankWait {
  WaitPlace place = WaitPlace::kUnknown;
  std::string phrase;                  // "waits on a reply from 127.0.0.1:18765 (HTTP)", "sleeps (...)"
  std::string where;                   // "urlopen at job.py:14"
  int64_t since_unix_ms = 0;           // when the waiting thread last ran (0: not known)
  std::vector<std::string> remotes;    // outside only because of these addresses (no holder found on this host)
  std::vector<std::string> listening;  // this rank's tree's listening TCP sockets (peers of the job for others)
  bool read = false;                   // a wait was read (false: the rank was not probed)

  bool operator==(const RankWait&) const = default;
};

/// The judgment of `tree` (its processes[0] is the worker).
RankWait judge_wait(const TreeWaits& tree, const std::vector<PythonThread>& python, const JobPeers& peers);

/// "waits on a reply from 127.0.0.1:18765 (HTTP), since 14:02:11, in urlopen at job.py:14" (its subject is the
/// caller's).
std::string describe(const RankWait& wait);

void to_json(nlohmann::json& j, const RankWait& wait);
void from_json(const nlohmann::json& j, RankWait& wait);

}  // namespace meshrun::launcher
