// An entrypoint that is itself a Python interpreter (`meshrun ... python train.py`, `python3.11 -m pkg.train`,
// `.venv/bin/python -X dev train.py`): read as Python reads its own command line, so that such a worker is a
// Python script to meshrun (standby workers) exactly as `meshrun ... train.py` is.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "launcher/workers/worker_command.hpp"

namespace meshrun::launcher {

/// Why an interpreter's command line runs no script a standby can become (`-c`, `-i`, stdin, ...).
struct NotAScriptRun {
  std::string reason;
};

/// True for python, python3, python3.12 and any path whose last part is one of them (a venv's bin/python).
bool is_python_interpreter(const std::string& entrypoint);

/// `args` as CPython reads them after the interpreter's name: its own options, then `-m MODULE` or a script,
/// then the script's arguments. The options are kept in `flags` as written, so that a standby interpreter
/// starts with the same ones.
std::variant<PythonRun, NotAScriptRun> read_interpreter_args(const std::vector<std::string>& args);

}  // namespace meshrun::launcher
