// JobToken: the mark that makes "no orphans" hold for a worker's whole process tree. Every worker gets
// MESHRUN_JOB_TOKEN=<random> in its environment and passes it to everything it spawns (DataLoader
// workers, a shell's children, a child that escaped with setsid). Once the workers are gone, whatever
// still carries the token is a leftover: meshrun kills it when an attempt ends, and the orphan watchdog
// (orphan_watchdog.hpp) does when meshrun itself was killed. Found through /proc/<pid>/environ, which
// the same user (or root) may read. A process that replaces its whole environment escapes it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace meshrun::launcher {

inline constexpr const char* kJobTokenVariable = "MESHRUN_JOB_TOKEN";

/// A fresh random token (32 hex digits).
std::string make_job_token();

/// The processes (never this one) whose environment holds MESHRUN_JOB_TOKEN=`token`.
std::vector<pid_t> processes_with_token(const std::string& token);

/// SIGKILLs them until none is left (new ones a dying parent forked, and the killed ones until they are
/// gone), for up to `limit`, sparing `spared` (standby workers, which carry the token before they are workers).
/// Returns how many it killed.
size_t kill_processes_with_token(const std::string& token, std::chrono::milliseconds limit,
                                 const std::vector<pid_t>& spared = {});

}  // namespace meshrun::launcher
