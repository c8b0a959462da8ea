#include "launcher/agent.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "common/say.hpp"
#include "common/scope_exit.hpp"
#include "common/signal_set.hpp"
#include "launcher/attempt.hpp"
#include "launcher/hang/python_hook.hpp"
#include "launcher/memory/buddy_ring.hpp"
#include "launcher/memory/memory_keeper.hpp"
#include "launcher/net/route_interface.hpp"
#include "launcher/progress/progress_monitor.hpp"
#include "launcher/rdzv/heartbeat_keeper.hpp"
#include "launcher/rendezvous_factory.hpp"
#include "launcher/workers/job_token.hpp"
#include "launcher/workers/orphan_watchdog.hpp"
#include "launcher/workers/standby_pool.hpp"
#include "launcher/workers/worker_env.hpp"
#include "launcher/workers/worker_group.hpp"
#include "proto/rendezvous/join_auth.hpp"

namespace meshrun::launcher {
namespace {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

Ms to_ms(double seconds) { return std::chrono::duration_cast<Ms>(std::chrono::duration<double>(seconds)); }

// Standbys start at an attempt's first step, or this long after its workers started when it has none yet: until
// then the workers' own start-up (their imports) has the cores.
constexpr Ms kStandbyDelay{10000};
constexpr Ms kStandbyCheckEvery{1000};

std::string temp_folder(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) throw Error("cannot create a temporary folder " + templ + " (set TMPDIR)");
  return templ;
}

// The same marks `seconds` later: ages grow, marks not reached stay -1.
proto::AttemptMilestones aged(proto::AttemptMilestones m, double seconds) {
  for (double* age : {&m.spawned_age_s, &m.initialized_age_s, &m.loaded_age_s, &m.first_step_age_s,
                      &m.steps.first_step_age_s, &m.steps.counted_age_s}) {
    if (*age >= 0) *age += seconds;
  }
  return m;
}

}  // namespace

Agent::Agent(const LaunchOptions& options, WorkerCommand command, SignalSet& signals)
    : options_(options),
      command_(std::move(command)),
      signals_(signals),
      grace_(to_ms(options.shutdown_timeout_s)),
      fault_grace_(to_ms(std::min(options.fault_stop_timeout_s, options.shutdown_timeout_s))),
      root_cause_(to_ms(options.rdzv_conf.keep_alive_interval_s)) {}

Agent::~Agent() {
  std::error_code ec;
  if (temporary_root_ && !log_root_.empty()) std::filesystem::remove_all(log_root_, ec);
  if (!progress_root_.empty()) std::filesystem::remove_all(progress_root_, ec);
}

int Agent::run() {
  const std::unique_ptr<RendezvousBackend> backend = make_rendezvous(options_, signals_);
  RendezvousBackend& rdzv = *backend;
  if (rdzv.interrupted_by()) return 128 + rdzv.interrupted_by();
  make_log_root(rdzv.run_id());
  make_progress_root();
  base_env_ = current_environment();
  // The join token is the agents' secret: workers (and whatever they log or spawn) never see it.
  std::erase_if(base_env_, [](const std::string& kv) { return kv.rfind(std::string(proto::kTokenEnv) + "=", 0) == 0; });
  if (!hook_dir_.empty()) add_python_hook(base_env_, hook_dir_);
  job_token_ = make_job_token();
  const OrphanWatchdog watchdog(job_token_);  // kills the workers' leftovers should this process die
  // The helpers below end with this run, as its locals do, before the watchdog and the rendezvous: the standbys
  // first (also when one of them fails to start).
  const ScopeExit end_helpers([this] {
    standbys_.reset();
    memory_.reset();
  });
  // Memory copies of the workers' state (checkpoint.memory_interval) outlive each attempt, never this agent.
  memory_ = std::make_unique<MemoryKeeper>(progress_root_ + "/memory.sock",
                                           "meshrun-memory " + rdzv.run_id() + " agent" + std::to_string(::getpid()),
                                           rdzv.run_id(), rdzv.hostname(), options_.rdzv_conf.token);
  memory_socket_ = memory_->socket_path();
  standbys_ = make_standbys();
  // A hot spare waits with nothing to run: its standbys are what the round that takes it starts from.
  if (standbys_ != nullptr) {
    rdzv.on_spare([this] { standbys_->fill([this](int lr) { return standby_env(lr); }, StandbyPool::Pace::kAllNow); });
  }
  const AttemptServices services{.signals = signals_,
                                 .settings = supervision_settings(),
                                 .memory = *memory_,
                                 .reports = reports_,
                                 .chores = [this](const Attempt& attempt) {
                                   keep_standbys(attempt);
                                   root_cause_.poll(attempt.rdzv);
                                 }};
  for (;;) {
    std::optional<proto::Assignment> assignment;
    try {
      assignment = rdzv.join();
    } catch (const RunFinished& e) {
      say(std::string(e.what()) + " while this node waited as a hot spare: it was not needed");
      root_cause_.flush(rdzv);
      return 0;
    }
    if (!assignment) {
      root_cause_.flush(rdzv);
      return 128 + rdzv.interrupted_by();
    }
    const AttemptResult result = run_attempt(*assignment, rdzv, services);
    // The job's first failure across nodes, named after a settle time for late reports (failure/).
    root_cause_.flush(rdzv);
    if (assignment->group_world_size > 1) root_cause_.expect(ending_of(assignment->round, result));
    if (!will_restart(result)) root_cause_.flush(rdzv);
    if (const auto exit_code = conclude(result, rdzv)) return *exit_code;
  }
}

AttemptResult Agent::run_attempt(const proto::Assignment& assignment, RendezvousBackend& rdzv,
                                 const AttemptServices& services) {
  spdlog::info("round {}: node {} of {}, ranks {}..{} of {}", assignment.round, assignment.group_rank,
               assignment.group_world_size, assignment.rank_offset,
               assignment.rank_offset + options_.nproc_per_node - 1, assignment.world_size);
  try {
    memory_->begin_attempt(memory_attempt(assignment));
    // A standby still importing is waited for (never longer than a fresh worker's start): beat meanwhile.
    Attempt attempt(
        assignment, rdzv, progress_root_, options_.nproc_per_node, options_.progress,
        [&](const ProgressMonitor& progress) {
          GroupSpec spec = group_spec(assignment, rdzv, progress);
          settings_ = spec.settings;
          return spec;
        },
        standbys_ != nullptr ? to_ms(options_.rdzv_conf.keep_alive_interval_s) : Ms(0));
    const AttemptResult result = attempt.run(services);
    last_attempt_at_ = std::chrono::steady_clock::now();
    attempt.progress.close_accounts(last_attempt_at_);
    last_attempt_ = attempt.milestones(last_attempt_at_, *memory_);
    return result;
  } catch (const SpawnError& e) {
    rdzv.leave(std::string("cannot start workers: ") + e.what(), false, {});
    throw EntrypointError("cannot start '" + command_.executable + "': " + e.what());
  }
}

MemoryAttempt Agent::memory_attempt(const proto::Assignment& assignment) const {
  const bool single = assignment.group_world_size == 1;
  const auto net = workers_interface(assignment.master_addr, options_.local_addr, single);
  const BackedRanks backed = backed_ranks(assignment);
  // Without an interface other nodes can reach, the agents are on one host (loopback tests).
  return MemoryAttempt{
      .store = Endpoint{strip_brackets(assignment.master_addr), static_cast<uint16_t>(assignment.master_port)},
      .round = assignment.round,
      .node = assignment.group_rank,
      .nodes = assignment.group_world_size,
      .world_size = assignment.world_size,
      .steps_done = assignment.steps_done,
      .addr = net ? net->address : "127.0.0.1",
      .secret = assignment.run_secret,
      .backed_first = backed.first,
      .backed_count = backed.count};
}

void Agent::make_log_root(const std::string& run_id) {
  if (!options_.log_dir.empty()) {
    log_root_ = options_.log_dir + "/" + run_id;
    return;
  }
  // Error files need a home even without --log-dir (torchrun uses a temporary folder too).
  log_root_ = temp_folder("meshrun-" + run_id + "-");
  temporary_root_ = true;
  if (!options_.duplicate_stdout_filters.empty() || !options_.duplicate_stderr_filters.empty()) {
    temporary_root_ = false;  // the filtered lines are what the user asked to keep
    say("lines matching --duplicate-*-filters go to " + log_root_ + "/attempt_<n>/filtered_std{out,err}.log");
  }
}

std::unique_ptr<StandbyPool> Agent::make_standbys() const {
  if (!options_.standby) return nullptr;
  if (const auto refusal = StandbyPool::refusal(command_)) {
    if (options_.max_restarts > 0) say("no standby workers: " + *refusal + "; restarts start them afresh");
    return nullptr;
  }
  // torch._dynamo is what DDP, FSDP and torch.compile import on first use (about as long as torch itself).
  std::vector<std::string> modules{"torch", "torch._dynamo"};
  for (const auto& m : options_.preload) {
    if (std::find(modules.begin(), modules.end(), m) == modules.end()) modules.push_back(m);
  }
  return std::make_unique<StandbyPool>(StandbySettings{.command = command_,
                                                       .modules = std::move(modules),
                                                       .folder = progress_root_ + "/standby",
                                                       .local_world_size = options_.nproc_per_node,
                                                       .child_sigmask = signals_.original_mask()});
}

std::vector<std::string> Agent::standby_env(int local_rank) const {
  AttemptSettings settings;
  if (settings_) {
    settings = *settings_;
  } else {  // a spare before its first round: what is known of every round
    settings.local_world_size = options_.nproc_per_node;
    settings.job_token = job_token_;
    settings.memory_socket = memory_socket_;
  }
  WorkerSlot slot;
  slot.local_rank = local_rank;
  return WorkerEnvironment(base_env_, std::move(settings)).for_worker(slot);
}

void Agent::keep_standbys(const Attempt& attempt) {
  const auto now = std::chrono::steady_clock::now();
  if (standbys_ == nullptr || now < next_standby_check_) return;
  next_standby_check_ = now + kStandbyCheckEvery;
  standbys_->poll();
  if (!restarts_left()) return;  // no restart can come: nothing would take them
  const proto::AttemptMilestones m = attempt.clock.milestones(now);
  if (m.first_step_age_s < 0 && m.spawned_age_s * 1000 < static_cast<double>(kStandbyDelay.count())) return;
  standbys_->fill([this](int lr) { return standby_env(lr); },
                  options_.standby_at_once ? StandbyPool::Pace::kAllNow : StandbyPool::Pace::kIntoIdleCores);
}

void Agent::make_progress_root() {
  progress_root_ = temp_folder("meshrun-progress-");
  if (options_.progress.mode == HangPolicy::Mode::kOff) return;  // no hang detection: workers see no hook
  hook_dir_ = progress_root_ + "/python";
  install_python_hook(hook_dir_);
}

// Workers see the daemon's round as TORCHELASTIC_RESTART_COUNT: it is the same on every node (a late
// joiner included), so PyTorch's per-attempt store prefix "/worker/attempt_<n>" matches across nodes and
// never reuses a previous attempt's keys.
GroupSpec Agent::group_spec(const proto::Assignment& assignment, const RendezvousBackend& rdzv,
                            const ProgressMonitor& progress) const {
  // One network for the store, Gloo and NCCL: the interface that reaches the workers' store (the
  // rendezvous host as this node reaches it), or the one holding --local-addr.
  const auto net = workers_interface(assignment.master_addr, options_.local_addr, assignment.group_world_size == 1);
  if (net) {
    spdlog::info("workers' network: {} ({}), for GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME where not set",
                 net->interface, net->address);
  }
  GroupSpec spec;
  spec.command = command_;
  spec.settings = AttemptSettings{.role = options_.role,
                                  .run_id = rdzv.run_id(),
                                  .master_addr = assignment.master_addr,
                                  .master_port = assignment.master_port,
                                  .rdzv_endpoint = rdzv.endpoint_text(),
                                  .restart_count = static_cast<int>(assignment.round),
                                  .max_restarts = options_.max_restarts,
                                  .signals_to_handle = options_.signals_to_handle_text,
                                  .group_rank = assignment.group_rank,
                                  .group_world_size = assignment.group_world_size,
                                  .world_size = assignment.world_size,
                                  .local_world_size = options_.nproc_per_node,
                                  .rank_offset = assignment.rank_offset,
                                  .virtual_local_rank = options_.virtual_local_rank,
                                  .job_token = job_token_,
                                  .memory_socket = memory_socket_,
                                  .quick_exit = quick_exit(),
                                  .socket_ifname = net ? net->interface : std::string()};
  spec.base_env = base_env_;
  spec.attempt = static_cast<int>(assignment.round);
  spec.attempt_dir = log_root_ + "/attempt_" + std::to_string(assignment.round);
  spec.log_files = !options_.log_dir.empty();
  spec.redirects = options_.redirects;
  spec.tee = options_.tee;
  spec.duplicate_stdout_filters = options_.duplicate_stdout_filters;
  spec.duplicate_stderr_filters = options_.duplicate_stderr_filters;
  spec.local_ranks_filter = options_.local_ranks_filter;
  spec.prefix_template = options_.log_line_prefix_template;
  spec.hostname = rdzv.hostname();
  spec.child_sigmask = signals_.original_mask();
  spec.progress_sockets = progress.socket_paths();
  spec.standbys = standbys_.get();
  return spec;
}

void Agent::leave(RendezvousBackend& rdzv, const std::string& reason, bool ok) {
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_attempt_at_).count();
  const auto goodput = rdzv.leave(reason, ok, aged(last_attempt_, since));
  if (!goodput || goodput->wall_s <= 0) return;
  say(proto::describe(*goodput));
  if (temporary_root_) return;
  // Beside the attempts' logs, for scripts and dashboards: the figures the line rounds.
  const std::string path = log_root_ + "/goodput.json";
  std::ofstream out(path);
  out << nlohmann::json(*goodput).dump(2) << "\n";
  if (!out) spdlog::warn("could not write {}", path);
}

RootCauseReporter::Ending Agent::ending_of(int64_t round, const AttemptResult& result) {
  using Kind = AttemptResult::Kind;
  return {.round = round,
          .failed = result.kind == Kind::kWorkerFailed || result.kind == Kind::kWorkerHung ||
                    result.kind == Kind::kRemoteRestart || result.kind == Kind::kRunFailed,
          .local = result.kind == Kind::kWorkerFailed || result.kind == Kind::kWorkerHung,
          .failed_at = result.failed_at,
          .expected_rank = result.kind == Kind::kWorkerHung ? result.expected_report_rank : -1};
}

SupervisionSettings Agent::supervision_settings() const {
  return SupervisionSettings{.monitor = to_ms(options_.monitor_interval_s),
                             .keep_alive = to_ms(options_.rdzv_conf.keep_alive_interval_s),
                             .keep_alive_max_attempt = options_.rdzv_conf.keep_alive_max_attempt,
                             .grace = grace_,
                             .fault_grace = fault_grace_,
                             .etcd = options_.backend == RdzvBackend::kEtcd,
                             .executable = command_.executable};
}

bool Agent::restarts_left() const { return restarts_used_ < options_.max_restarts; }

bool Agent::quick_exit() const { return options_.quick_exit && !hook_dir_.empty() && restarts_left(); }

bool Agent::will_restart(const AttemptResult& result) const {
  using Kind = AttemptResult::Kind;
  const bool failed =
      result.kind == Kind::kWorkerFailed || result.kind == Kind::kWorkerHung || result.kind == Kind::kRemoteRestart;
  return failed && restarts_left();
}

std::optional<int> Agent::conclude(const AttemptResult& result, RendezvousBackend& rdzv) {
  using Kind = AttemptResult::Kind;
  switch (result.kind) {
    case Kind::kSucceeded:
      leave(rdzv, result.reason, true);
      rdzv.wait_for_other_nodes();
      return rdzv.interrupted_by() ? 128 + rdzv.interrupted_by() : 0;
    case Kind::kSignaled: leave(rdzv, result.reason, false); return result.exit_code;
    case Kind::kRunFailed:
      leave(rdzv, result.reason, false);
      rdzv.linger_for_others();
      return result.exit_code;
    case Kind::kRendezvousLost: return result.exit_code;  // nobody to tell
    case Kind::kScaleUp:
      say("re-rendezvous to admit a waiting node (not counted against --max-restarts)");
      return std::nullopt;
    case Kind::kSlowNodeReplaced:
      say("re-rendezvous: a slow node makes way for a spare (not counted against --max-restarts)");
      return std::nullopt;
    case Kind::kWorkerFailed:
    case Kind::kWorkerHung:
    case Kind::kRemoteRestart: break;
  }
  if (!will_restart(result)) {
    if (options_.max_restarts > 0) {
      say("giving up after " + std::to_string(options_.max_restarts) + " restart(s) (--max-restarts)");
    } else if (result.kind == Kind::kRemoteRestart) {
      say("another node failed and --max-restarts is 0: stopping");
    }
    leave(rdzv, result.reason, false);
    rdzv.linger_for_others();
    return result.exit_code;
  }
  ++restarts_used_;
  say("restarting the workers (restart " + std::to_string(restarts_used_) + " of " +
      std::to_string(options_.max_restarts) + ")");
  if (result.kind == Kind::kWorkerFailed || result.kind == Kind::kWorkerHung) {
    try {
      rdzv.report_failure(result.reason, result.kind == Kind::kWorkerHung ? proto::RestartCause::kHung
                                                                          : proto::RestartCause::kWorkerFailed);
    } catch (const Error& e) {
      spdlog::warn("could not report the failure to the rendezvous: {}", e.what());
    }
  }
  return std::nullopt;
}

}  // namespace meshrun::launcher
