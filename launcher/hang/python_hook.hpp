// meshrun's Python startup hook (hang/python/: sitecustomize.py, _meshrun_hook.py, _meshrun_quick_exit.py),
// compiled into the launcher so that every install (build tree, wheel, .deb) carries it. The agent writes it
// to a folder of its own and puts that folder first on the workers' PYTHONPATH (docs/progress.md).
#pragma once

#include <string>
#include <vector>

namespace meshrun::launcher {

/// The environment variable naming the agent's pid: the hook runs only in a process whose parent it is.
inline constexpr const char* kAgentPidEnv = "MESHRUN_AGENT_PID";

/// Writes the hook's files into `folder` (created); throws Error naming the path on failure.
void install_python_hook(const std::string& folder);

/// `env` ("KEY=VALUE" entries) with `folder` first on PYTHONPATH and MESHRUN_AGENT_PID set to this process.
void add_python_hook(std::vector<std::string>& env, const std::string& folder);

}  // namespace meshrun::launcher
