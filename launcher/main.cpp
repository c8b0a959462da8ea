// meshrun: parse -> resolve the entrypoint -> block signals -> Agent::run() -> exit code.
// Exit codes: 0 ok; a failed worker's code (128+N for signal N); 128+N when meshrun got signal N;
// 1 rendezvous/launcher errors; 2 bad options; 127 entrypoint not found or not executable.
#include <spdlog/spdlog.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/logging.hpp"
#include "common/run_main.hpp"
#include "common/signal_set.hpp"
#include "diagnostics/diagnostics.hpp"
#include "launcher/agent.hpp"
#include "launcher/cli/options.hpp"
#include "launcher/ssh_fanout.hpp"
#include "launcher/workers/orphan_watchdog.hpp"
#include "launcher/workers/worker_command.hpp"

namespace {

int launch(const std::vector<std::string>& args) {
  using namespace meshrun;
  using namespace meshrun::launcher;
  const ParseResult parsed = parse_launch_options(args, process_env, detect_host_info());
  if (parsed.print_and_exit) {
    std::fputs(parsed.print_and_exit->c_str(), stdout);
    return 0;
  }
  const LaunchOptions& options = parsed.options;
  init_logging("meshrun", options.log_level);
  for (const auto& w : parsed.warnings) std::fprintf(stderr, "meshrun: warning: %s\n", w.c_str());
  for (const auto& n : parsed.notes) spdlog::info("{}", n);
  if (!options.fanout.hostfile.empty()) {
    // The hosts run the entrypoint; it need not exist here.
    SignalSet signals(options.signals_to_handle);
    return SshFanout(options, signals, process_env).run();
  }
  const char* path = std::getenv("PATH");
  WorkerCommand command = build_worker_command(options, path ? path : "/usr/bin:/bin", process_env("PYTHON_EXEC"));
  // Before any thread starts (the in-process daemon), so every thread keeps these signals blocked.
  SignalSet signals(options.signals_to_handle);
  Agent agent(options, std::move(command), signals);
  return agent.run();
}

}  // namespace

int main(int argc, char** argv) {
  // Subcommands. `meshrun run ...` is the launcher itself; ping and check are the diagnostics.
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "ping") {
    return meshrun::run_main("meshrun ping",
                             [&] { return meshrun::diagnostics::run_ping_command(argc - 1, argv + 1); });
  }
  if (first == "check") {
    return meshrun::run_main("meshrun check",
                             [&] { return meshrun::diagnostics::run_check_command(argc - 1, argv + 1); });
  }
  if (first == meshrun::launcher::kOrphanWatchdogCommand && argc == 4) {
    return meshrun::launcher::run_orphan_watchdog(std::atoi(argv[2]), argv[3]);
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  if (first == "run") args.erase(args.begin());
  return meshrun::run_main("meshrun", [&] { return launch(args); });
}
