#include "launcher/hang/stack_dump.hpp"

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
#include "launcher/workers/worker_command.hpp"
#include "launcher/workers/worker_process.hpp"

namespace meshrun::launcher {
namespace {

namespace fs = std::filesystem;

// Output beyond this is cut: a summary needs the top frames, not megabytes.
constexpr size_t kMaxStackBytes = 64 * 1024;

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
  // The worker's own folder first (py-spy installed in the venv whose python runs the worker), then PATH.
  const char* path = std::getenv("PATH");
  std::string search = path ? path : "/usr/bin:/bin";
  if (executable.find('/') != std::string::npos) search = fs::path(executable).parent_path().string() + ":" + search;
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
    const auto tool = find_executable(c.name, search);
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
