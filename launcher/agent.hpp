// Agent: the launcher's main loop for one node.
//
//   rendezvous (join, wait for ranks) -> start the worker group -> supervise:
//     every worker exited 0                  -> leave ok, (host: wait for the other nodes) -> exit 0
//     a worker failed                        -> stop the rest, print the summary; restarts left?
//                                                yes: report the failure, re-rendezvous, next attempt
//                                                no:  leave, exit with that worker's code
//     heartbeat says "restart" (other node)  -> stop the group; restarts left? re-rendezvous : exit 1
//     heartbeat says "fail" (run failed)      -> stop the group, exit 1 with the daemon's reason
//     keep_alive_max_attempt heartbeats fail  -> stop the group, exit 1 naming the endpoint (daemon gone)
//     SIGINT/SIGTERM/SIGHUP/SIGQUIT          -> forward, grace period, SIGKILL, leave, exit 128+signal
//     SIGUSR1/SIGUSR2                        -> forward only
#pragma once

#include <string>

#include "launcher/cli/options.hpp"
#include "launcher/workers/worker_command.hpp"

namespace meshrun::launcher {

class SignalSet;

class Agent {
 public:
  Agent(const LaunchOptions& options, WorkerCommand command, SignalSet& signals);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Runs the job to the end; returns the process exit code. Throws on rendezvous errors.
  int run();

 private:
  const LaunchOptions& options_;
  WorkerCommand command_;
  SignalSet& signals_;
  std::string log_root_;  // <log-dir>/<run id>, or a temporary folder
  bool temporary_root_ = false;
};

}  // namespace meshrun::launcher
