// WorkerCommand: the program and argv each worker runs, resolved once before launch (PATH search included,
// so a missing entrypoint fails before any rendezvous and the fork child never searches PATH).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "launcher/workers/worker_settings.hpp"

namespace meshrun::launcher {

/// The entrypoint (or the Python to run it) cannot be found or executed. main() exits 127.
class EntrypointError : public UsageError {
 public:
  using UsageError::UsageError;
  int exit_code() const noexcept override { return 127; }
};

/// What a Python worker runs, as its argv spells it: `python FLAGS [-m] TARGET ARGS...`.
struct PythonRun {
  std::vector<std::string> flags;  // the interpreter's own ("-u")
  bool module = false;             // -m TARGET
  std::string target;              // the script's path as given, or the module's name
  std::vector<std::string> args;
};

struct WorkerCommand {
  std::string executable;           // path handed to execve
  std::vector<std::string> argv;    // argv[0] included
  std::optional<PythonRun> python;  // set when the worker is a Python interpreter running a script or a module
  std::string why_not_python;       // when `python` is unset: why the workers are no Python script run
};

/// .py entrypoints, -m and --run-path run under `<python> -u`; --no-python and anything else run directly. An
/// entrypoint that is itself a Python interpreter (`python train.py`) runs as written, and is a Python script run.
/// `path_env` is $PATH; `python_exec` is $PYTHON_EXEC when set. Throws EntrypointError.
WorkerCommand build_worker_command(const EntrypointSettings& options, const std::string& path_env,
                                   const std::optional<std::string>& python_exec);

/// The first executable `name` in the ':'-separated `path_env`; names with a '/' are checked as given.
std::optional<std::string> find_executable(const std::string& name, const std::string& path_env);

}  // namespace meshrun::launcher
