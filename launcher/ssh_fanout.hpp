// SshFanout: `meshrun --hostfile FILE ... ENTRYPOINT`: starts one meshrun agent per host over ssh (node rank =
// line order, rendezvous hosted by the first host), relays every remote line prefixed with "host:", and
// makes sure nothing outlives it on the hosts.
//
//   pre-flight   `ssh HOST true` to every host in parallel (BatchMode, ConnectTimeout); any failure is
//                reported by host name and nothing is started
//   launch       ssh HOST 'cd CWD && exec sh -c WRAPPER ... env VARS meshrun ARGS'
//   run          relay output; exit code = the first non-zero remote exit code, else 0
//   stop         (SIGINT/SIGTERM/SIGHUP/SIGQUIT, or this process dying): close every ssh's stdin -> the remote
//                WRAPPER sees EOF and sends SIGTERM to its meshrun (which stops its workers), SIGKILL after
//                the grace period; fallback after the grace period: `ssh HOST kill -KILL PID`
// Killing a local ssh client alone leaves the remote command running (sshd does not signal it); the stdin
// lifeline is what ties the remote agent to this process, even when this process is SIGKILLed.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/signal_set.hpp"
#include "launcher/cli/options.hpp"
#include "launcher/hosts/hostfile.hpp"
#include "launcher/workers/worker_process.hpp"

namespace meshrun::launcher {

class SshFanout {
 public:
  /// `env` reads this process's environment (for --export and the forwarded prefixes).
  SshFanout(const LaunchOptions& options, SignalSet& signals, EnvLookup env);

  /// Pre-flight, launch, relay, stop. Returns the exit code. Throws UsageError for a bad hostfile or
  /// filter, NetworkError naming every host that failed the pre-flight check.
  int run();

  ~SshFanout();
  SshFanout(const SshFanout&) = delete;
  SshFanout& operator=(const SshFanout&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  struct Remote;

  std::vector<std::string> ssh_argv(const std::string& host) const;
  SpawnSpec ssh_spawn(std::vector<std::string> argv, int stdin_fd, int stdout_fd, int stderr_fd) const;
  void preflight(const std::vector<HostEntry>& hosts);
  std::vector<std::string> remote_args(const HostEntry& host, int node_rank, int nnodes_total) const;
  std::vector<std::pair<std::string, std::string>> exported_env() const;
  /// The shell command run on `host`: the wrapper and the remote meshrun. It carries no variable: those go
  /// over ssh's stdin (`env`, env_block()), so that no secret is on a command line.
  std::string remote_command(const HostEntry& host, int node_rank, int nnodes_total,
                             const std::string& remote_meshrun) const;
  void start_remote(Remote& r, const std::string& command, const std::string& env);
  /// `ssh HOST kill -SIG PID`: a side command, reaped by reap_remotes().
  void remote_kill(Remote& r, int sig);
  /// Relays output and observes exits for up to 200 ms (or until `deadline`); returns the signals received.
  std::vector<int> pump(Clock::time_point deadline);
  bool all_done() const;
  /// Relays until every remote is done (returns 0) or a terminating signal arrives (returns it);
  /// other signals are passed on to the remote agents.
  int relay_until_done_or_signal();
  /// Closes the lifelines, waits the grace period, then kills what is left over ssh.
  void stop_remotes(int stop_signal);
  /// Reaps the ssh clients and side commands; the first failure's exit code, else 0.
  int reap_remotes();

  const LaunchOptions& options_;
  SignalSet& signals_;
  EnvLookup env_;
  std::string ssh_path_;
  std::string endpoint_;
  std::string run_id_;
  int grace_s_ = 0;  // the remote wrapper's seconds between SIGTERM and SIGKILL
  std::vector<Remote> remotes_;
  std::vector<WorkerProcess> helpers_;  // `ssh HOST kill ...` side commands
  int first_failure_ = 0;               // exit code of the first remote to fail, in time
};

/// Single-quotes `word` for a POSIX shell.
std::string shell_quote(const std::string& word);

/// The meshrun options of `args` (before ENTRYPOINT) without those the fan-out sets itself (hostfile,
/// filters, node rank, endpoint, ...), in both spellings and in `--opt=value` form.
std::vector<std::string> strip_fanout_options(const std::vector<std::string>& args);

}  // namespace meshrun::launcher
