#include "launcher/progress/stack_dump.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <vector>

#include "common/strings.hpp"
#include "common/unique_fd.hpp"
#include "launcher/workers/worker_process.hpp"

namespace meshrun::launcher {
namespace {

namespace fs = std::filesystem;

// Output beyond this is cut: a summary needs the top frames, not megabytes.
constexpr size_t kMaxStackBytes = 64 * 1024;

bool executable_file(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p); }

std::optional<std::string> find_tool(const std::string& name, const std::string& first_dir) {
  if (!first_dir.empty() && executable_file(fs::path(first_dir) / name)) return (fs::path(first_dir) / name).string();
  const char* path = std::getenv("PATH");
  for (const auto& dir : split(path ? path : "/usr/bin:/bin", ':')) {
    if (!dir.empty() && executable_file(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  }
  return std::nullopt;
}

// Runs argv with stdout and stderr captured; nullopt when it failed, timed out or printed nothing.
std::optional<std::string> run_tool(const std::vector<std::string>& argv, std::chrono::seconds limit) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  SpawnSpec spec;
  spec.executable = argv[0];
  spec.argv = argv;
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  spec.stdout_fd = write_end.get();
  spec.stderr_fd = write_end.get();
  sigemptyset(&spec.child_sigmask);
  std::optional<WorkerProcess> tool;
  try {
    tool.emplace(WorkerProcess::spawn(spec));
    tool->confirm_exec();
  } catch (const SpawnError&) {
    return std::nullopt;
  }
  write_end.reset();
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;  // the destructor kills and reaps it
    pollfd p{read_end.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
    if (n <= 0) break;
    if (out.size() < kMaxStackBytes) out.append(buf, static_cast<size_t>(n));
  }
  tool->reap();
  const auto& status = tool->status();
  if (!status || !status->ok() || trim(out).empty()) return std::nullopt;
  if (out.size() > kMaxStackBytes) out.resize(kMaxStackBytes);
  return out;
}

}  // namespace

StackDump dump_stack(pid_t pid, const std::string& executable, std::chrono::seconds limit) {
  const std::string p = std::to_string(pid);
  const std::string exe_dir =
      executable.find('/') == std::string::npos ? "" : fs::path(executable).parent_path().string();
  struct Candidate {
    const char* name;
    std::vector<std::string> args;  // after the tool's path
  };
  const std::vector<Candidate> candidates = {
      {"py-spy", {"dump", "--nonblocking", "--pid", p}},
      {"eu-stack", {"-p", p}},
      {"gdb", {"-batch", "-nx", "-p", p, "-ex", "thread apply all bt"}},
  };
  std::string tried;
  for (const auto& c : candidates) {
    const auto tool = find_tool(c.name, exe_dir);
    if (!tool) continue;
    std::vector<std::string> argv = {*tool};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    if (auto text = run_tool(argv, limit)) return StackDump{c.name, *text};
    tried += (tried.empty() ? "" : ", ") + std::string(c.name);
  }
  return StackDump{"", tried.empty() ? "no stack: none of py-spy, eu-stack, gdb is installed (pip install py-spy; "
                                       "apt install elfutils or gdb)"
                                     : "no stack: " + tried + " could not read pid " + p};
}

}  // namespace meshrun::launcher
