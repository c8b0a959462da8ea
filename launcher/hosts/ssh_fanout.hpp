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

#include <string>
#include <vector>

#include "launcher/cli/options.hpp"
#include "launcher/hosts/hostfile.hpp"

namespace meshrun::launcher {

class SignalSet;

class SshFanout {
 public:
  /// `env` reads this process's environment (for --export and the forwarded prefixes).
  SshFanout(const LaunchOptions& options, SignalSet& signals, EnvLookup env);

  /// Pre-flight, launch, relay, stop. Returns the exit code. Throws UsageError for a bad hostfile or
  /// filter, NetworkError naming every host that failed the pre-flight check.
  int run();

 private:
  struct Remote;
  std::vector<std::string> ssh_argv(const std::string& host) const;
  void preflight(const std::vector<HostEntry>& hosts);
  std::vector<std::string> remote_args(const HostEntry& host, int node_rank, int nnodes_total) const;
  std::vector<std::pair<std::string, std::string>> exported_env() const;

  const LaunchOptions& options_;
  SignalSet& signals_;
  EnvLookup env_;
  std::string ssh_path_;
  std::string endpoint_;
  std::string run_id_;
};

/// Single-quotes `word` for a POSIX shell.
std::string shell_quote(const std::string& word);

/// The meshrun options of `args` (before ENTRYPOINT) without those the fan-out sets itself (hostfile,
/// filters, node rank, endpoint, ...), in both spellings and in `--opt=value` form.
std::vector<std::string> strip_fanout_options(const std::vector<std::string>& args);

}  // namespace meshrun::launcher
