// StandbyPool: one warm Python interpreter per local rank, torch (and --preload) already imported, waiting to
// become that rank's next worker (docs/multi-node.md#standby-workers). A restart then skips the interpreter's
// start and `import torch`, the bulk of a worker's start-up.
//
// A standby's life:  fill() --spawn--> importing --StandbyReady ok--> ready --take()--> a worker (leaves the pool)
//                                          |  failed import: the pool turns off, says why once
//                                          +- died (OOM, killed): dropped; two such deaths turn the pool off
// Beside a running job standbys start one at a time, each into an idle core (Pace::kIntoIdleCores); a hot spare
// starts them all at once. A standby started before its modules are imported is still taken: take() waits for its ready
// message, which is never later than a fresh interpreter's would be. It runs the script as `python -u script.py` would
// (launcher/workers/python/_meshrun_standby.py); its warm-up output is replayed on the worker's streams.
// Standbys carry the job token (the worker they become passes it on), so the leftover sweep spares pids().
#pragma once

#include <sys/types.h>

#include <csignal>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "launcher/workers/idle_cores.hpp"
#include "launcher/workers/worker_command.hpp"
#include "launcher/workers/worker_process.hpp"
#include "proto/worker/standby_messages.hpp"

namespace meshrun::launcher {

struct StandbySettings {
  WorkerCommand command;             // the workers' command (command.python set)
  std::vector<std::string> modules;  // imported ahead: "torch", then --preload's
  std::string folder;                // the bootstrap script is written here
  int local_world_size = 1;
  sigset_t child_sigmask{};
};

class StandbyPool {
 public:
  /// Why standbys cannot run `command` (a worker not run by Python), or nullopt.
  [[nodiscard]] static std::optional<std::string> refusal(const WorkerCommand& command);

  /// Writes the bootstrap into settings.folder; starts nothing yet. Throws Error naming the path.
  explicit StandbyPool(StandbySettings settings);
  ~StandbyPool();
  StandbyPool(const StandbyPool&) = delete;
  StandbyPool& operator=(const StandbyPool&) = delete;

  /// How fill() starts standbys: all at once (a hot spare, which has nothing else to run), or one at a time into
  /// an idle core (beside a running job: a standby's imports take a core for seconds, never the job's).
  enum class Pace { kAllNow, kIntoIdleCores };
  /// Starts standbys for the local ranks without one, with `env_for(local_rank)`, at `pace`; nothing once the pool
  /// is off or when the standbys would not fit in memory (said once).
  void fill(const std::function<std::vector<std::string>(int local_rank)>& env_for, Pace pace);
  /// Reads the standbys' messages and notices the dead, without waiting.
  void poll();
  /// The standby of `local_rank` becomes the worker `spawn` describes (its streams, environment, argv); nullopt when
  /// there is none or it cannot serve (the caller spawns the worker as usual).
  std::optional<WorkerProcess> take(int local_rank, const SpawnSpec& spawn);
  /// The live standbys' pids (never workers yet).
  std::vector<pid_t> pids() const;
  /// Turned off for good (a failed import, standbys dying): why, or "".
  const std::string& off_reason() const { return off_reason_; }

 private:
  struct Standby {
    std::optional<WorkerProcess> process;
    UniqueFd control;   // our end of the socket pair
    UniqueFd warm_err;  // what it printed on stderr before it was taken (to say why it died)
    std::optional<proto::StandbyReady> ready;
  };

  void start(int local_rank, std::vector<std::string> env);
  /// Reads its ready message: waits up to `wait` for it. False when the standby is gone or failed (dropped).
  bool await_ready(Standby& s, int wait_ms);
  /// A standby gone or unusable: discarded; `failed` (its imports failed) turns the pool off, as do repeated deaths.
  void drop(Standby& s, const std::string& why, bool failed);
  void discard(Standby& s);
  void turn_off(const std::string& reason);
  void say_ready_once(const proto::StandbyReady& ready);
  bool send_order(Standby& s, const SpawnSpec& spawn, const proto::StandbyOrder& order);

  StandbySettings settings_;
  std::string bootstrap_;  // the script's path
  std::vector<Standby> standbys_;
  std::string off_reason_;
  int deaths_ = 0;
  long pss_kb_ = 0;  // the largest a ready standby measured
  bool said_ready_ = false;
  bool said_memory_ = false;
  IdleCores idle_;
};

}  // namespace meshrun::launcher
