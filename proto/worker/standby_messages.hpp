// The messages between an agent and its standby workers (launcher/workers/, docs/multi-node.md#standby-workers):
// JSON on a SOCK_SEQPACKET socket pair, one message per packet, read by launcher/workers/python/_meshrun_standby.py.
//   standby -> agent  StandbyReady  once its modules are imported (or could not be)
//   agent -> standby  StandbyOrder  the worker to become, with its stdin, stdout and stderr attached (SCM_RIGHTS)
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshrun::proto {

struct StandbyReady {
  bool ok = false;
  std::string error;    // !ok: which module could not be imported, and why
  double import_s = 0;  // how long the imports took
  long pss_kb = 0;      // the standby's proportional set size once ready (shared library pages by share)
};

/// The worker a standby becomes: what `python -u [-m] TARGET ARGS...` would have run.
struct StandbyOrder {
  std::vector<std::string> orig_argv;  // the worker's whole command line (sys.orig_argv)
  bool module = false;                 // -m TARGET
  std::string target;                  // the script's path as given, or the module's name
  std::vector<std::string> args;
  std::vector<std::string> env;  // "KEY=VALUE": the whole environment
  std::string cwd;
};

/// Throws ProtocolError naming what is missing or malformed.
StandbyReady parse_standby_ready(std::string_view text);
std::string format_standby_ready(const StandbyReady& ready);
StandbyOrder parse_standby_order(std::string_view text);
std::string format_standby_order(const StandbyOrder& order);

}  // namespace meshrun::proto
