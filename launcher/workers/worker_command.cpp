#include "launcher/workers/worker_command.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <string_view>

#include "launcher/workers/python_command_line.hpp"

namespace meshrun::launcher {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::optional<std::string> find_executable(const std::string& name, const std::string& path_env) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    return is_executable_file(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  size_t start = 0;
  while (start <= path_env.size()) {
    const auto colon = path_env.find(':', start);
    const std::string_view entry =
        std::string_view(path_env).substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string_view dir = entry.empty() ? std::string_view(".") : entry;  // empty entry = current folder
    std::string candidate;
    candidate.reserve(dir.size() + 1 + name.size());
    candidate.append(dir).append(1, '/').append(name);
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

WorkerCommand build_worker_command(const EntrypointSettings& o, const std::string& path_env,
                                   const std::optional<std::string>& python_exec) {
  const bool python = o.module || o.run_path || (!o.no_python && ends_with(o.entrypoint, ".py"));
  WorkerCommand cmd;
  if (python) {
    const std::string wanted = python_exec.value_or("python");
    auto found = find_executable(wanted, path_env);
    if (!found && !python_exec) found = find_executable("python3", path_env);
    if (!found) {
      throw EntrypointError("cannot run '" + o.entrypoint + "': no '" + wanted +
                            "' on PATH (activate your virtual environment, set PYTHON_EXEC, or use --no-python)");
    }
    if (!o.module && !is_executable_file(o.entrypoint) && ::access(o.entrypoint.c_str(), R_OK) != 0) {
      throw EntrypointError("cannot run '" + o.entrypoint + "': no such file");
    }
    cmd.executable = *found;
    cmd.argv = {wanted, "-u"};
    if (o.module) cmd.argv.emplace_back("-m");
  } else {
    const auto found = find_executable(o.entrypoint, path_env);
    if (!found) {
      const bool exists = ::access(o.entrypoint.c_str(), F_OK) == 0;
      throw EntrypointError("cannot run '" + o.entrypoint + "': " +
                            (exists ? "not an executable file (chmod +x it, or run a .py under Python)"
                                    : "not found (not a file, and not on PATH)"));
    }
    cmd.executable = *found;
  }
  if (python) {
    cmd.python = PythonRun{.flags = {"-u"}, .module = o.module, .target = o.entrypoint, .args = o.args};
  } else if (is_python_interpreter(o.entrypoint)) {
    auto run = read_interpreter_args(o.args);
    if (auto* script = std::get_if<PythonRun>(&run)) {
      cmd.python = std::move(*script);
    } else {
      cmd.why_not_python = std::get<NotAScriptRun>(run).reason;
    }
  } else {
    cmd.why_not_python = o.no_python ? "the workers are run with --no-python" : "the entrypoint is no .py script";
  }
  cmd.argv.push_back(o.entrypoint);
  cmd.argv.insert(cmd.argv.end(), o.args.begin(), o.args.end());
  return cmd;
}

}  // namespace meshrun::launcher
