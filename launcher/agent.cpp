#include "launcher/agent.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "common/say.hpp"
#include "common/scope_exit.hpp"
#include "common/signal_set.hpp"
#include "launcher/activity/activity_rule.hpp"
#include "launcher/attempt.hpp"
#include "launcher/failure/root_cause.hpp"
#include "launcher/hang/hang_exchange.hpp"
#include "launcher/hang/hang_inquiry.hpp"
#include "launcher/hang/python_hook.hpp"
#include "launcher/memory/buddy_ring.hpp"
#include "launcher/memory/memory_keeper.hpp"
#include "launcher/net/route_interface.hpp"
#include "launcher/progress/attempt_clock.hpp"
#include "launcher/progress/progress_monitor.hpp"
#include "launcher/rdzv/heartbeat_keeper.hpp"
#include "launcher/rendezvous_factory.hpp"
#include "launcher/workers/job_token.hpp"
#include "launcher/workers/orphan_watchdog.hpp"
#include "launcher/workers/standby_pool.hpp"
#include "launcher/workers/worker_env.hpp"
#include "launcher/workers/worker_group.hpp"
#include "proto/join_auth.hpp"

namespace meshrun::launcher {
namespace {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

Ms to_ms(double seconds) { return std::chrono::duration_cast<Ms>(std::chrono::duration<double>(seconds)); }

// Hangs are judged this often: fine enough next to budgets of seconds, cheap next to beats that may
// arrive a thousand times a second.
constexpr Ms kHangCheckEvery{250};
// A late rank (busy, or waiting outside the job, while the others wait for it) is judged again after as long as
// the first judgment took (the wait so far), between one activity window and kLateRecheck: one whose wait becomes
// proof of a hang is then named hung within that of it, before a short collective timeout of the script's own
// ends the job. The late line itself is repeated far less often.
constexpr Ms kLateRecheck{30000};
// After an inquiry found the suspected wait over, the hook's next report (every 0.1 s) has caught up by then.
constexpr Ms kResolvedQuiet{2000};
constexpr Ms kLateRepeat{300000};
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

// "round 1: local ranks 0-1 started from standby workers": the restarts that skipped a fresh interpreter.
void say_standby_starts(const WorkerGroup& group) {
  std::vector<int> ranks;
  for (const auto& w : group.workers()) {
    if (w.from_standby) ranks.push_back(w.local_rank);
  }
  if (ranks.empty()) return;
  std::string text = "round " + std::to_string(group.attempt()) + ": local rank";
  text += ranks.size() > 1 ? "s " : " ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(ranks[i]);
  }
  text += " started from standby workers (their interpreter and imports were ready)";
  say(text);
}

// Every mark this node's attempt reached, its step account included, as ages at `now`.
proto::AttemptMilestones milestones_at(const AttemptClock& attempt, const ProgressMonitor& progress,
                                       const MemoryKeeper& memory, std::chrono::steady_clock::time_point now) {
  proto::AttemptMilestones m = attempt.milestones(now);
  m.steps = progress.step_account(now);
  m.load_source = memory.load_source();
  return m;
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
    spdlog::info("round {}: node {} of {}, ranks {}..{} of {}", assignment->round, assignment->group_rank,
                 assignment->group_world_size, assignment->rank_offset,
                 assignment->rank_offset + options_.nproc_per_node - 1, assignment->world_size);
    AttemptResult result;
    try {
      memory_->begin_attempt(memory_attempt(*assignment));
      // A standby still importing is waited for (never longer than a fresh worker's start): beat meanwhile.
      Attempt attempt(
          *assignment, rdzv, progress_root_, options_.nproc_per_node, options_.progress,
          [&](const ProgressMonitor& progress) {
            GroupSpec spec = group_spec(*assignment, rdzv, progress);
            settings_ = spec.settings;
            return spec;
          },
          standbys_ != nullptr ? to_ms(options_.rdzv_conf.keep_alive_interval_s) : Ms(0));
      say_standby_starts(attempt.group);
      result = supervise(attempt);
      last_attempt_at_ = std::chrono::steady_clock::now();
      attempt.progress.close_accounts(last_attempt_at_);
      last_attempt_ = milestones_at(attempt.clock, attempt.progress, *memory_, last_attempt_at_);
    } catch (const SpawnError& e) {
      rdzv.leave(std::string("cannot start workers: ") + e.what(), false, {});
      throw EntrypointError("cannot start '" + command_.executable + "': " + e.what());
    }
    // The job's first failure across nodes, named after a settle time for late reports (failure/).
    root_cause_.flush(rdzv);
    if (assignment->group_world_size > 1) root_cause_.expect(ending_of(assignment->round, result));
    if (!will_restart(result)) root_cause_.flush(rdzv);
    if (const auto exit_code = conclude(result, rdzv)) return *exit_code;
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

Agent::AttemptResult Agent::supervise(Attempt& attempt) {
  using Clock = std::chrono::steady_clock;
  const Ms monitor = to_ms(options_.monitor_interval_s);
  const Ms keep_alive = to_ms(options_.rdzv_conf.keep_alive_interval_s);
  HeartbeatSchedule heartbeats{Clock::now() + keep_alive, 0};
  auto next_hang_check = Clock::now() + kHangCheckEvery;
  for (;;) {
    const Ms until_beat = std::max(Ms(0), std::chrono::duration_cast<Ms>(heartbeats.next - Clock::now()));
    const auto signals = attempt.group.wait(signals_, std::min(monitor, until_beat), attempt.progress.fds());
    attempt.progress.drain(Clock::now());
    if (!attempt.clock.settled()) attempt.clock.observe(attempt.progress.summaries(Clock::now()), Clock::now());
    keep_standbys(attempt);
    root_cause_.poll(attempt.rdzv);
    if (auto r = on_signals(attempt, signals)) return *r;
    if (auto r = on_worker_exits(attempt)) return *r;
    if (Clock::now() >= next_hang_check) {
      next_hang_check = Clock::now() + kHangCheckEvery;
      if (auto r = on_hang(attempt)) return *r;
    }
    // Arrival answers go out as soon as they are all in, beside the schedule (an early heartbeat moves nothing).
    const auto pids = attempt.group.running_pids();
    attempt.progress.ask_arrivals_again(pids, Clock::now());
    const bool answers_in = attempt.progress.take_arrival_answers(pids);
    const bool due = Clock::now() >= heartbeats.next;
    if (!due && !answers_in) continue;
    if (due) heartbeats.next = Clock::now() + keep_alive;
    if (auto r = on_heartbeat(attempt, heartbeats, !due)) return *r;
  }
}

// SIGINT/SIGTERM/SIGHUP/SIGQUIT stop the attempt; SIGUSR1/SIGUSR2 are forwarded and the workers decide
// (checkpoint, then exit or go on).
std::optional<Agent::AttemptResult> Agent::on_signals(Attempt& attempt, const std::vector<int>& signals) {
  WorkerGroup& group = attempt.group;
  for (int sig : signals) {
    if (!is_terminating_signal(sig)) {
      group.signal_all(sig);
      continue;
    }
    say("got " + signal_name(sig) + ": forwarding it to the workers and stopping them");
    stop_workers(attempt, grace_, sig);
    AttemptResult result{AttemptResult::Kind::kSignaled, 128 + sig, "launcher got " + signal_name(sig)};
    for (const auto& w : group.workers()) {
      if (w.process && w.process->status() && checkpointed_on_signal(*w.process->status())) {
        say("checkpointed on signal: the workers wrote a checkpoint before stopping (exit " +
            std::to_string(kCheckpointedOnSignalExit) + ")");
        result.exit_code = kCheckpointedOnSignalExit;
        break;
      }
    }
    return result;
  }
  return std::nullopt;
}

std::optional<Agent::AttemptResult> Agent::on_worker_exits(Attempt& attempt) {
  WorkerGroup& group = attempt.group;
  if (const auto failed = group.first_failure()) {
    const auto found = std::chrono::steady_clock::now();
    group.drain_output(*failed);  // its last words (the traceback) before the report
    const FailureInfo first = group.failure_info(*failed);
    if (checkpointed_on_signal(first.status)) {
      stop_workers(attempt, grace_);
      // A forwarded USR1 (or a scheduler's signal): a deliberate stop after a checkpoint, not a failure.
      say("checkpointed on signal: rank " + std::to_string(first.rank) + " wrote a checkpoint and stopped (exit " +
          std::to_string(kCheckpointedOnSignalExit) + "); not restarting");
      return AttemptResult{AttemptResult::Kind::kSignaled, kCheckpointedOnSignalExit, "checkpointed on signal"};
    }
    // At once, before the stop's grace period: other nodes' ranks are about to fail because of this one.
    attempt.rdzv.record_failure(failure_report(first, group.attempt()), attempt.account_now());
    stop_workers(attempt, fault_grace_);
    const FailureInfo info = group.failure_info(*failed);  // with all the output, now that the group stopped
    std::fputs(format_failure_summary(info).c_str(), stderr);
    return AttemptResult{
        AttemptResult::Kind::kWorkerFailed, info.status.exit_code(),
        "rank " + std::to_string(info.rank) + " on " + info.host + " failed with " + info.status.describe(), found};
  }
  if (group.all_exited()) {
    stop_workers(attempt, grace_);  // reaps, kills leftovers of the workers' groups, drains output
    return AttemptResult{AttemptResult::Kind::kSucceeded, 0, "all workers exited 0"};
  }
  return std::nullopt;
}

// A hang suspected here (beats, a stopped worker, a collective waited on past its budget) or by another
// node (its request in the workers' store): every node judges every rank's record the same way.
std::optional<Agent::AttemptResult> Agent::on_hang(Attempt& attempt) {
  ProgressMonitor& progress = attempt.progress;
  const auto now = std::chrono::steady_clock::now();
  const auto pids = attempt.group.running_pids();
  progress.watch_activity(pids, now);
  auto hang = progress.find_hang(pids, now);
  if (!hang) hang = progress.find_collective_wait(pids, now);
  // The suspicion is said only when the verdict is a hang: a late rank (busy) gets its own line instead.
  if (hang) {
    progress.mark_hung(hang->local_rank);
    spdlog::info("suspected hang: rank {}: {}; gathering every rank's collective record", hang->rank, hang->reason);
    return conclude_hang(
        attempt,
        proto::HangRequest{attempt.assignment.group_rank, hang->rank, hang->reason, hang->waited_s, hang->route}, true);
  }
  if (const auto request = attempt.exchange.poll(now)) {
    spdlog::info("another node suspects a hang (rank {}: {}); gathering this node's collective records", request->rank,
                 request->reason);
    return conclude_hang(attempt, *request, false);
  }
  return std::nullopt;
}

namespace {

std::string without_prefix(const std::string& line) { return line.starts_with("hang: ") ? line.substr(6) : line; }

// What a late line is about, without its figures: who is late, where, and what each does (busy, or what it waits on).
std::string late_subject(const HangVerdict& v) { return format_ranks(v.culprits) + " " + v.late_subject; }

}  // namespace

std::optional<Agent::AttemptResult> Agent::conclude_hang(Attempt& attempt, const proto::HangRequest& suspicion,
                                                         bool requested_here) {
  WorkerGroup& group = attempt.group;
  ProgressMonitor& progress = attempt.progress;
  HangExchange& exchange = attempt.exchange;
  const int node = attempt.assignment.group_rank;
  const int nodes = attempt.assignment.group_world_size;
  const auto found = std::chrono::steady_clock::now();
  HeartbeatKeeper keeper(attempt.rdzv, to_ms(options_.rdzv_conf.keep_alive_interval_s), progress.summaries(found));
  proto::HangRequest standing = suspicion;
  if (requested_here && nodes > 1) {
    try {
      standing = exchange.request(suspicion);  // the first request wins on every node
    } catch (const std::exception& e) {
      spdlog::warn("cannot tell the other nodes about the hang through the workers' store: {}", e.what());
    }
  }
  HangInquiry inquiry(progress, group, exchange,
                      HangInquirySite{node, nodes, attempt.rdzv.hostname(), group.attempt_dir(), command_.executable,
                                      attempt.assignment.master_addr, attempt.assignment.master_port});
  const FallbackSuspect suspect{standing.rank, standing.reason,
                                standing.route == proto::SuspicionRoute::kCollectiveWait};
  const HangVerdict verdict = inquiry.judge(
      suspect.rank >= 0 ? std::optional(suspect) : std::nullopt,
      LatenessRule{standing.waited_s, options_.progress.busy_timeout_s, options_.progress.outside_timeout_s});
  if (verdict.outcome == HangOutcome::kLate) {
    on_late(attempt, verdict);
    return std::nullopt;
  }
  if (verdict.outcome == HangOutcome::kResolved) {  // the hook's next report shows it; until then, no new suspicion
    spdlog::info("hang inquiry: {}", verdict.line);
    progress.clear_suspicion();
    progress.defer_suspicions(std::chrono::steady_clock::now() + kResolvedQuiet);
    exchange.next_inquiry();
    return std::nullopt;
  }
  const int named = !verdict.culprits.empty() ? verdict.culprits.front() : suspect.rank;
  const auto& workers = group.workers();
  const auto local = std::find_if(workers.begin(), workers.end(), [named](const Worker& w) { return w.rank == named; });
  const bool reporter = local != workers.end();
  // A rank of this node that ended by itself while it was judged (a zombie until the loop reaps it) was finishing,
  // not hung (a job's teardown after its last step, slow on a loaded machine): its exit decides, as for any worker.
  if (reporter && local->process && process_state(local->process->pid()) == 'Z') {
    spdlog::info("hang inquiry: rank {} ended while it was judged; its exit decides", named);
    progress.clear_suspicion();
    progress.defer_suspicions(std::chrono::steady_clock::now() + kResolvedQuiet);
    exchange.next_inquiry();
    return std::nullopt;
  }
  say(requested_here
          ? "suspected hang: rank " + std::to_string(suspicion.rank) + ": " + suspicion.reason
          : "another node suspected a hang (rank " + std::to_string(standing.rank) + ": " + standing.reason + ")");
  say(verdict.line);
  for (const auto& note : verdict.notes) say("  " + note);
  // The report first (the root cause on every node waits for it), the stacks after.
  // A verdict from beats or silence alone names the rank the suspicion named, for the suspicion's reason.
  const std::string reason = verdict.kind == HangKind::kNoCollective && named == suspect.rank && !suspect.reason.empty()
                                 ? suspect.reason
                                 : without_prefix(verdict.line);
  const auto with_hang = [&](FailureInfo info) {
    info.hang_reason = reason;
    info.time = std::chrono::system_clock::now();
    return info;
  };
  if (reporter) {
    const auto lr = static_cast<size_t>(local - workers.begin());
    proto::FailureReport report = failure_report(with_hang(group.failure_info(lr)), group.attempt());
    report.hang_kind = std::string(to_string(verdict.kind));
    const proto::AttemptMilestones account = attempt.account_now();
    keeper.with_rendezvous([&](RendezvousBackend& r) { r.record_failure(report, account); });
  }
  const auto stacks = inquiry.stacks();
  if (!stacks.empty()) {
    std::fprintf(stderr,
                 "meshrun: every rank's stack, identical ones once (each also in <log dir>/<run "
                 "id>/attempt_%d/<rank>/stack.txt):\n%s",
                 group.attempt(), format_stack_groups(stacks).c_str());
  }
  say("hang verdict written to " + inquiry.verdict_file());
  group.stop(signals_, fault_grace_);
  if (reporter) {
    FailureInfo info = with_hang(group.failure_info(static_cast<size_t>(local - workers.begin())));
    for (const auto& s : stacks) {
      if (s.rank != named) continue;
      info.stack_tool = s.tool;
      info.stack = s.text;
      info.stack_file = local->dir + "/stack.txt";
    }
    std::fputs(format_failure_summary(info).c_str(), stderr);
  }
  AttemptResult result{AttemptResult::Kind::kWorkerHung, 1, reason, found};
  result.expected_report_rank = named;
  return result;
}

// Every rank the others wait for is busy, or waits on the world outside the job: a late rank, not a hang. Every
// node says so (once, again when what the rank does changes, then every kLateRepeat while it lasts), marks its own
// late ranks for status, and looks again after kLateRecheck (or when --hang-busy-timeout or --hang-outside-timeout
// runs out), in a new inquiry: a late rank whose wait has become proof of a hang is then named hung.
void Agent::on_late(Attempt& attempt, const HangVerdict& verdict) {
  const auto now = std::chrono::steady_clock::now();
  const std::string subject = late_subject(verdict);
  if (subject != late_said_.subject || now - late_said_.at >= kLateRepeat) {
    say(verdict.line);
    late_said_ = LateSaid{subject, now};
  }
  const Ms window{static_cast<int64_t>(kActivityWindowS * 1000)};
  auto recheck = now + std::clamp(to_ms(verdict.waited_s), window, kLateRecheck);
  for (const auto& timeout : {options_.progress.busy_timeout_s, options_.progress.outside_timeout_s}) {
    if (timeout) recheck = std::min(recheck, now + std::max(Ms(1000), to_ms(*timeout - verdict.waited_s)));
  }
  const auto& workers = attempt.group.workers();
  for (size_t lr = 0; lr < workers.size(); ++lr) {
    if (std::find(verdict.culprits.begin(), verdict.culprits.end(), workers[lr].rank) == verdict.culprits.end())
      continue;
    attempt.progress.mark_late(lr, LateMark{verdict.line, verdict.group, verdict.seq, now, recheck + kLateRecheck});
  }
  attempt.progress.clear_suspicion();
  attempt.progress.defer_suspicions(recheck);
  attempt.exchange.next_inquiry();
}

void Agent::stop_workers(Attempt& attempt, Ms grace, int first_signal) {
  if (attempt.group.all_exited()) {
    attempt.group.stop(signals_, grace, first_signal);  // reaps and sweeps at once: nothing to wait for
    return;
  }
  const HeartbeatKeeper keeper(attempt.rdzv, to_ms(options_.rdzv_conf.keep_alive_interval_s),
                               attempt.progress.summaries(std::chrono::steady_clock::now()));
  attempt.group.stop(signals_, grace, first_signal);
}

std::optional<Agent::AttemptResult> Agent::on_heartbeat(Attempt& attempt, HeartbeatSchedule& schedule, bool early) {
  RendezvousBackend& rdzv = attempt.rdzv;
  ProgressMonitor& progress = attempt.progress;
  try {
    const auto now = std::chrono::steady_clock::now();
    const auto beat = rdzv.heartbeat(progress.summaries(now, rdzv.clock_offset()),
                                     milestones_at(attempt.clock, progress, *memory_, now));
    schedule.failures = 0;
    report_stragglers(beat.stragglers);
    report_recovery(beat);
    progress.ask_clocks();  // the answers come before the next heartbeat, which carries what they allow
    progress.ask_arrivals(beat.arrival_probe, now);
    if (beat.action == proto::HeartbeatAction::kRestart) {
      say("the rendezvous asks for a restart: " + beat.reason);
      stop_workers(attempt, beat.cause == proto::RestartCause::kScaleUp ? grace_ : fault_grace_);
      const auto kind = beat.cause == proto::RestartCause::kScaleUp ? AttemptResult::Kind::kScaleUp
                                                                    : AttemptResult::Kind::kRemoteRestart;
      return AttemptResult{kind, 1, beat.reason};
    }
    if (beat.action == proto::HeartbeatAction::kFail) {
      say("the run failed: " + beat.reason + "; stopping the workers");
      stop_workers(attempt, fault_grace_);
      return AttemptResult{AttemptResult::Kind::kRunFailed, 1, beat.reason};
    }
    return std::nullopt;
  } catch (const Error& e) {
    if (early) {  // only the answers' head start is lost: the scheduled heartbeat counts the failures
      spdlog::debug("an early heartbeat with arrival answers failed: {}", e.what());
      return std::nullopt;
    }
    // A dead or unreachable rendezvous host must not leave this node running (or hanging) forever:
    // after keep_alive_max_attempt silent beats, stop like the daemon would for a dead node.
    ++schedule.failures;
    spdlog::warn("heartbeat {} of {} to the rendezvous failed: {}", schedule.failures,
                 options_.rdzv_conf.keep_alive_max_attempt, e.what());
    if (schedule.failures < options_.rdzv_conf.keep_alive_max_attempt) return std::nullopt;
    const std::string endpoint = (options_.backend == RdzvBackend::kEtcd ? "etcd " : "") + rdzv.endpoint_text();
    const std::string reason = "lost the rendezvous at " + endpoint + ": " + std::to_string(schedule.failures) +
                               " heartbeats in a row failed (last: " + e.what() + ")";
    const std::string hint = options_.backend == RdzvBackend::kEtcd
                                 ? "are the etcd members up and reachable from this node?"
                                 : "is the rendezvous host up? see `meshrun ping " + endpoint + "`";
    say(reason + "; stopping the workers (" + hint + ")");
    attempt.group.stop(signals_, fault_grace_);
    return AttemptResult{AttemptResult::Kind::kRendezvousLost, 1, reason};
  }
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

void Agent::report_recovery(const proto::HeartbeatReply& beat) {
  if (beat.recovered_round <= recovery_printed_) return;
  recovery_printed_ = beat.recovered_round;
  say("recovery of round " + std::to_string(beat.recovered_round) + ": " + proto::describe(beat.recovery));
}

void Agent::report_stragglers(const std::vector<proto::Straggler>& stragglers) {
  std::vector<int> ranks;
  for (const auto& s : stragglers) ranks.push_back(s.rank);
  if (ranks == straggler_ranks_) return;
  straggler_ranks_ = ranks;
  if (stragglers.empty()) {
    say("no stragglers any more");
    return;
  }
  for (const auto& s : stragglers) {
    char line[320];
    if (s.measure == proto::StragglerMeasure::kArrivals) {
      std::snprintf(line, sizeof line,
                    "straggler: rank %d on %s computes %.1f ms between collectives, %.2fx the run's median "
                    "(%.1f ms; the others wait for it: from when each rank entered its collectives)",
                    s.rank, s.host.c_str(), s.seconds * 1e3, s.seconds / s.median_seconds, s.median_seconds * 1e3);
    } else {  // compute_s from its beats, or its step time
      std::snprintf(line, sizeof line, "straggler: rank %d on %s %s %.3f s per step, %.2fx the run's median (%.3f s)",
                    s.rank, s.host.c_str(), s.measure == proto::StragglerMeasure::kCompute ? "computes" : "takes",
                    s.seconds, s.seconds / s.median_seconds, s.median_seconds);
    }
    say(line);
  }
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
