#include "launcher/agent.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/error.hpp"
#include "launcher/node_rendezvous.hpp"
#include "launcher/workers/signal_set.hpp"
#include "launcher/workers/worker_env.hpp"
#include "launcher/workers/worker_group.hpp"

namespace meshrun::launcher {
namespace {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

Ms to_ms(double seconds) { return std::chrono::duration_cast<Ms>(std::chrono::duration<double>(seconds)); }

void say(const std::string& text) { std::fprintf(stderr, "meshrun: %s\n", text.c_str()); }

// How one attempt ended.
struct AttemptResult {
  // kRunFailed: the daemon declared the whole run failed; kRendezvousLost: the daemon stopped answering.
  enum Kind {
    kSucceeded,
    kWorkerFailed,
    kRemoteRestart,
    kScaleUp,
    kRunFailed,
    kRendezvousLost,
    kSignaled
  } kind = kSucceeded;
  int exit_code = 0;   // kWorkerFailed: the worker's code; kSignaled: 128+signal
  std::string reason;  // for the daemon and the user
};

}  // namespace

Agent::Agent(const LaunchOptions& options, WorkerCommand command, SignalSet& signals)
    : options_(options), command_(std::move(command)), signals_(signals) {}

Agent::~Agent() {
  if (temporary_root_ && !log_root_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(log_root_, ec);
  }
}

int Agent::run() {
  NodeRendezvous rdzv(options_, signals_);
  if (rdzv.interrupted_by()) return 128 + rdzv.interrupted_by();

  if (!options_.log_dir.empty()) {
    log_root_ = options_.log_dir + "/" + rdzv.run_id();
  } else {
    // Error files need a home even without --log-dir (torchrun uses a temporary folder too).
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/meshrun-" + rdzv.run_id() + "-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      throw Error("cannot create a temporary folder " + templ + " for worker error files (set TMPDIR)");
    }
    log_root_ = templ;
    temporary_root_ = true;
  }

  const std::vector<std::string> base_env = current_environment();
  const Ms monitor = to_ms(options_.monitor_interval_s);
  const Ms keep_alive = to_ms(options_.rdzv_conf.keep_alive_interval_s);
  const Ms grace = to_ms(options_.shutdown_timeout_s);

  // `restarts_used` counts restarts charged to --max-restarts (failures, lost nodes); admitting a late
  // node (scale-up) is free, as in torchrun. Workers see the daemon's round as TORCHELASTIC_RESTART_COUNT:
  // it is the same on every node (a late joiner included), so PyTorch's per-attempt store prefix
  // "/worker/attempt_<n>" matches across nodes and never reuses a previous attempt's keys.
  int restarts_used = 0;
  for (;;) {
    const auto assignment = rdzv.join();
    if (!assignment) return 128 + rdzv.interrupted_by();
    spdlog::info("round {}: node {} of {}, ranks {}..{} of {}", assignment->round, assignment->group_rank,
                 assignment->group_world_size, assignment->rank_offset,
                 assignment->rank_offset + options_.nproc_per_node - 1, assignment->world_size);

    GroupSpec spec;
    spec.command = command_;
    spec.settings = AttemptSettings{.role = options_.role,
                                    .run_id = rdzv.run_id(),
                                    .master_addr = assignment->master_addr,
                                    .master_port = assignment->master_port,
                                    .rdzv_endpoint = rdzv.endpoint().to_string(),
                                    .restart_count = static_cast<int>(assignment->round),
                                    .max_restarts = options_.max_restarts,
                                    .group_rank = assignment->group_rank,
                                    .group_world_size = assignment->group_world_size,
                                    .world_size = assignment->world_size,
                                    .local_world_size = options_.nproc_per_node,
                                    .rank_offset = assignment->rank_offset,
                                    .virtual_local_rank = options_.virtual_local_rank};
    spec.base_env = base_env;
    spec.attempt = static_cast<int>(assignment->round);
    spec.attempt_dir = log_root_ + "/attempt_" + std::to_string(assignment->round);
    spec.log_files = !options_.log_dir.empty();
    spec.redirects = options_.redirects;
    spec.tee = options_.tee;
    spec.local_ranks_filter = options_.local_ranks_filter;
    spec.prefix_template = options_.log_line_prefix_template;
    spec.hostname = rdzv.hostname();
    spec.child_sigmask = signals_.original_mask();

    AttemptResult result;
    try {
      WorkerGroup group(spec);
      auto next_heartbeat = std::chrono::steady_clock::now() + keep_alive;
      int heartbeat_failures = 0;
      while (true) {
        const auto now = std::chrono::steady_clock::now();
        const Ms until_beat = std::max(Ms(0), std::chrono::duration_cast<Ms>(next_heartbeat - now));
        int stop_signal = 0;
        for (int sig : group.wait(signals_, std::min(monitor, until_beat))) {
          if (is_terminating_signal(sig)) {
            stop_signal = sig;
            break;
          }
          group.signal_all(sig);  // USR1/USR2: the workers decide (checkpoint, then exit or go on)
        }
        if (stop_signal != 0) {
          say("got " + signal_name(stop_signal) + ": forwarding it to the workers and stopping them");
          group.stop(signals_, grace, stop_signal);
          result = {AttemptResult::kSignaled, 128 + stop_signal, "launcher got " + signal_name(stop_signal)};
          for (const auto& w : group.workers()) {
            if (w.process && w.process->status() && checkpointed_on_signal(*w.process->status())) {
              say("checkpointed on signal: the workers wrote a checkpoint before stopping (exit " +
                  std::to_string(kCheckpointedOnSignalExit) + ")");
              result.exit_code = kCheckpointedOnSignalExit;
              break;
            }
          }
          break;
        }
        if (const auto failed = group.first_failure()) {
          group.stop(signals_, grace);
          const FailureInfo info = group.failure_info(*failed);
          if (checkpointed_on_signal(info.status)) {
            // A forwarded USR1 (or a scheduler's signal): a deliberate stop after a checkpoint, not a failure.
            say("checkpointed on signal: rank " + std::to_string(info.rank) + " wrote a checkpoint and stopped (exit " +
                std::to_string(kCheckpointedOnSignalExit) + "); not restarting");
            result = {AttemptResult::kSignaled, kCheckpointedOnSignalExit, "checkpointed on signal"};
            break;
          }
          std::fputs(format_failure_summary(info).c_str(), stderr);
          result = {
              AttemptResult::kWorkerFailed, info.status.exit_code(),
              "rank " + std::to_string(info.rank) + " on " + info.host + " failed with " + info.status.describe()};
          break;
        }
        if (group.all_exited()) {
          group.stop(signals_, grace);  // reaps, kills leftovers of the workers' groups, drains output
          result = {AttemptResult::kSucceeded, 0, "all workers exited 0"};
          break;
        }
        if (std::chrono::steady_clock::now() >= next_heartbeat) {
          next_heartbeat = std::chrono::steady_clock::now() + keep_alive;
          try {
            const auto beat = rdzv.heartbeat();
            heartbeat_failures = 0;
            if (beat.action == "restart") {
              say("the rendezvous asks for a restart: " + beat.reason);
              group.stop(signals_, grace);
              result = {beat.cause == "scale_up" ? AttemptResult::kScaleUp : AttemptResult::kRemoteRestart, 1,
                        beat.reason};
              break;
            }
            if (beat.action == "fail") {
              say("the run failed: " + beat.reason + "; stopping the workers");
              group.stop(signals_, grace);
              result = {AttemptResult::kRunFailed, 1, beat.reason};
              break;
            }
          } catch (const Error& e) {
            // A dead or unreachable rendezvous host must not leave this node running (or hanging) forever:
            // after keep_alive_max_attempt silent beats, stop like the daemon would for a dead node.
            ++heartbeat_failures;
            spdlog::warn("heartbeat {} of {} to the rendezvous failed: {}", heartbeat_failures,
                         options_.rdzv_conf.keep_alive_max_attempt, e.what());
            if (heartbeat_failures >= options_.rdzv_conf.keep_alive_max_attempt) {
              const std::string reason = "lost the rendezvous at " + rdzv.endpoint().to_string() + ": " +
                                         std::to_string(heartbeat_failures) +
                                         " heartbeats in a row failed (last: " + e.what() + ")";
              say(reason + "; stopping the workers (is the rendezvous host up? see `meshrun ping " +
                  rdzv.endpoint().to_string() + "`)");
              group.stop(signals_, grace);
              result = {AttemptResult::kRendezvousLost, 1, reason};
              break;
            }
          }
        }
      }
    } catch (const SpawnError& e) {
      rdzv.leave(std::string("cannot start workers: ") + e.what(), false);
      throw EntrypointError("cannot start '" + command_.executable + "': " + e.what());
    }

    switch (result.kind) {
      case AttemptResult::kSucceeded:
        rdzv.leave(result.reason, true);
        rdzv.wait_for_other_nodes();
        return rdzv.interrupted_by() ? 128 + rdzv.interrupted_by() : 0;
      case AttemptResult::kSignaled: rdzv.leave(result.reason, false); return result.exit_code;
      case AttemptResult::kRunFailed:
        rdzv.leave(result.reason, false);
        rdzv.linger_for_others();
        return result.exit_code;
      case AttemptResult::kRendezvousLost: return result.exit_code;  // nobody to tell
      case AttemptResult::kScaleUp:
        say("re-rendezvous to admit a waiting node (not counted against --max-restarts)");
        break;
      case AttemptResult::kWorkerFailed:
      case AttemptResult::kRemoteRestart:
        if (restarts_used >= options_.max_restarts) {
          if (options_.max_restarts > 0) {
            say("giving up after " + std::to_string(options_.max_restarts) + " restart(s) (--max-restarts)");
          } else if (result.kind == AttemptResult::kRemoteRestart) {
            say("another node failed and --max-restarts is 0: stopping");
          }
          rdzv.leave(result.reason, false);
          rdzv.linger_for_others();
          return result.exit_code;
        }
        ++restarts_used;
        say("restarting the workers (restart " + std::to_string(restarts_used) + " of " +
            std::to_string(options_.max_restarts) + ")");
        if (result.kind == AttemptResult::kWorkerFailed) {
          try {
            rdzv.report_failure(result.reason);
          } catch (const Error& e) {
            spdlog::warn("could not report the failure to the rendezvous: {}", e.what());
          }
        }
        break;
    }
  }
}

}  // namespace meshrun::launcher
