// What the workers run and how their output is kept: the entrypoint as the command line gives it (turned into a
// WorkerCommand, worker_command.hpp) and the stream masks of --redirects and --tee. cli/options.hpp fills them.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace meshrun::launcher {

/// Which standard streams of a worker a flag applies to: the torchrun bitmask 1=stdout, 2=stderr, 3=both.
struct StreamMask {
  int all = 0;                 // applies to every local rank ("-r 3")
  std::map<int, int> by_rank;  // per local rank ("-r 0:1,1:2"); overrides `all`
  /// The mask for one local rank.
  int for_rank(int local_rank) const {
    const auto it = by_rank.find(local_rank);
    return it != by_rank.end() ? it->second : all;
  }
};

/// The workers' program as given: a script, a module (-m), a path run as a script (--run-path) or a program
/// (--no-python), and its arguments, passed untouched.
struct EntrypointSettings {
  std::string entrypoint;
  std::vector<std::string> args;
  bool module = false;
  bool no_python = false;
  bool run_path = false;
};

}  // namespace meshrun::launcher
