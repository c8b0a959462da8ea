#include "launcher/attempt.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/say.hpp"
#include "launcher/activity/activity_rule.hpp"
#include "launcher/failure/exit_status.hpp"
#include "launcher/failure/failure_summary.hpp"
#include "launcher/failure/root_cause.hpp"
#include "launcher/hang/hang_inquiry.hpp"
#include "launcher/hang/stack_groups.hpp"
#include "launcher/memory/memory_keeper.hpp"
#include "launcher/rdzv/rendezvous_backend.hpp"
#include "launcher/run_reports.hpp"

namespace meshrun::launcher {
namespace {

using Ms = std::chrono::milliseconds;

Ms to_ms(double seconds) { return std::chrono::duration_cast<Ms>(std::chrono::duration<double>(seconds)); }

// Hangs are judged this often: fine enough next to budgets of seconds, cheap next to beats that may
// arrive a thousand times a second.
constexpr Ms kHangCheckEvery{250};
// A late rank (busy, or waiting outside the job, while the others wait for it) is judged again after as long as
// the first judgment took (the wait so far), between one activity window and kLateRecheck: one whose wait becomes
// proof of a hang is then named hung within that of it, before a short collective timeout of the script's own
// ends the job. The late line itself is repeated far less often (RunReports::kLateRepeat).
constexpr Ms kLateRecheck{30000};
// After an inquiry found the suspected wait over, the hook's next report (every 0.1 s) has caught up by then.
constexpr Ms kResolvedQuiet{2000};

std::string without_prefix(const std::string& line) { return line.starts_with("hang: ") ? line.substr(6) : line; }

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

// What a late line is about, without its figures: who is late, where, and what each does (busy, or what it waits on).
std::string late_subject(const HangVerdict& v) { return format_ranks(v.culprits) + " " + v.late_subject; }

std::vector<int> node_ranks(const proto::Assignment& assignment, int nproc_per_node) {
  std::vector<int> ranks;
  for (int lr = 0; lr < nproc_per_node; ++lr) ranks.push_back(assignment.rank_offset + lr);
  return ranks;
}

}  // namespace

Attempt::Attempt(const proto::Assignment& assignment_, RendezvousBackend& rdzv_, const std::string& progress_dir,
                 int nproc_per_node, const HangPolicy& policy, const SpecFor& spec_for,
                 std::chrono::milliseconds beat_every)
    : assignment(assignment_),
      rdzv(rdzv_),
      progress(progress_dir, node_ranks(assignment_, nproc_per_node), policy, assignment_.steps_done),
      group(beating_while_spawning(spec_for(progress), beat_every)),
      exchange(Endpoint{strip_brackets(assignment_.master_addr), static_cast<uint16_t>(assignment_.master_port)},
               assignment_.round, assignment_.group_rank, assignment_.group_world_size),
      clock(assignment_.round, static_cast<size_t>(nproc_per_node), std::chrono::steady_clock::now()) {
  spawning_.reset();
}

GroupSpec Attempt::beating_while_spawning(GroupSpec spec, std::chrono::milliseconds every) {
  if (every.count() > 0) spawning_.emplace(rdzv, every, progress.summaries(std::chrono::steady_clock::now()));
  return spec;
}

proto::AttemptMilestones Attempt::account_now() const {
  proto::AttemptMilestones m;
  m.round = assignment.round;
  m.steps = progress.step_account(std::chrono::steady_clock::now());
  return m;
}

proto::AttemptMilestones Attempt::milestones(std::chrono::steady_clock::time_point now,
                                             const MemoryKeeper& memory) const {
  proto::AttemptMilestones m = clock.milestones(now);
  m.steps = progress.step_account(now);
  m.load_source = memory.load_source();
  return m;
}

AttemptResult Attempt::run(const AttemptServices& services) {
  services_ = &services;
  say_standby_starts(group);
  using Clock = std::chrono::steady_clock;
  const Ms monitor = services_->settings.monitor;
  const Ms keep_alive = services_->settings.keep_alive;
  HeartbeatSchedule heartbeats{Clock::now() + keep_alive, 0};
  auto next_hang_check = Clock::now() + kHangCheckEvery;
  for (;;) {
    const Ms until_beat = std::max(Ms(0), std::chrono::duration_cast<Ms>(heartbeats.next - Clock::now()));
    const auto signals = group.wait(services_->signals, std::min(monitor, until_beat), progress.fds());
    progress.drain(Clock::now());
    if (!clock.settled()) clock.observe(progress.summaries(Clock::now()), Clock::now());
    services_->chores(*this);
    if (auto r = on_signals(signals)) return *r;
    if (auto r = on_worker_exits()) return *r;
    if (Clock::now() >= next_hang_check) {
      next_hang_check = Clock::now() + kHangCheckEvery;
      if (auto r = on_hang()) return *r;
    }
    // Arrival answers go out as soon as they are all in, beside the schedule (an early heartbeat moves nothing).
    const auto pids = group.running_pids();
    progress.ask_arrivals_again(pids, Clock::now());
    const bool answers_in = progress.take_arrival_answers(pids);
    const bool due = Clock::now() >= heartbeats.next;
    if (!due && !answers_in) continue;
    if (due) heartbeats.next = Clock::now() + keep_alive;
    if (auto r = on_heartbeat(heartbeats, !due)) return *r;
  }
}

// SIGINT/SIGTERM/SIGHUP/SIGQUIT stop the attempt; SIGUSR1/SIGUSR2 are forwarded and the workers decide
// (checkpoint, then exit or go on).
std::optional<AttemptResult> Attempt::on_signals(const std::vector<int>& signals) {
  for (int sig : signals) {
    if (!is_terminating_signal(sig)) {
      group.signal_all(sig);
      continue;
    }
    say("got " + signal_name(sig) + ": forwarding it to the workers and stopping them");
    stop_workers(services_->settings.grace, sig);
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

std::optional<AttemptResult> Attempt::on_worker_exits() {
  if (const auto failed = group.first_failure()) {
    const auto found = std::chrono::steady_clock::now();
    group.drain_output(*failed);  // its last words (the traceback) before the report
    const FailureInfo first = group.failure_info(*failed);
    if (checkpointed_on_signal(first.status)) {
      stop_workers(services_->settings.grace);
      // A forwarded USR1 (or a scheduler's signal): a deliberate stop after a checkpoint, not a failure.
      say("checkpointed on signal: rank " + std::to_string(first.rank) + " wrote a checkpoint and stopped (exit " +
          std::to_string(kCheckpointedOnSignalExit) + "); not restarting");
      return AttemptResult{AttemptResult::Kind::kSignaled, kCheckpointedOnSignalExit, "checkpointed on signal"};
    }
    // At once, before the stop's grace period: other nodes' ranks are about to fail because of this one.
    rdzv.record_failure(failure_report(first, group.attempt()), account_now());
    stop_workers(services_->settings.fault_grace);
    const FailureInfo info = group.failure_info(*failed);  // with all the output, now that the group stopped
    std::fputs(format_failure_summary(info).c_str(), stderr);
    return AttemptResult{
        AttemptResult::Kind::kWorkerFailed, info.status.exit_code(),
        "rank " + std::to_string(info.rank) + " on " + info.host + " failed with " + info.status.describe(), found};
  }
  if (group.all_exited()) {
    stop_workers(services_->settings.grace);  // reaps, kills leftovers of the workers' groups, drains output
    return AttemptResult{AttemptResult::Kind::kSucceeded, 0, "all workers exited 0"};
  }
  return std::nullopt;
}

// A hang suspected here (beats, a stopped worker, a collective waited on past its budget) or by another
// node (its request in the workers' store): every node judges every rank's record the same way.
std::optional<AttemptResult> Attempt::on_hang() {
  const auto now = std::chrono::steady_clock::now();
  const auto pids = group.running_pids();
  progress.watch_activity(pids, now);
  auto hang = progress.find_hang(pids, now);
  if (!hang) hang = progress.find_collective_wait(pids, now);
  // The suspicion is said only when the verdict is a hang: a late rank (busy) gets its own line instead.
  if (hang) {
    progress.mark_hung(hang->local_rank);
    spdlog::info("suspected hang: rank {}: {}; gathering every rank's collective record", hang->rank, hang->reason);
    return conclude_hang(
        proto::HangRequest{assignment.group_rank, hang->rank, hang->reason, hang->waited_s, hang->route}, true);
  }
  if (const auto request = exchange.poll(now)) {
    spdlog::info("another node suspects a hang (rank {}: {}); gathering this node's collective records", request->rank,
                 request->reason);
    return conclude_hang(*request, false);
  }
  return std::nullopt;
}

std::optional<AttemptResult> Attempt::conclude_hang(const proto::HangRequest& suspicion, bool requested_here) {
  const auto found = std::chrono::steady_clock::now();
  HeartbeatKeeper keeper(rdzv, services_->settings.keep_alive, progress.summaries(found));
  proto::HangRequest standing = suspicion;
  if (requested_here && assignment.group_world_size > 1) {
    try {
      standing = exchange.request(suspicion);  // the first request wins on every node
    } catch (const std::exception& e) {
      spdlog::warn("cannot tell the other nodes about the hang through the workers' store: {}", e.what());
    }
  }
  HangInquiry inquiry(
      progress, group, exchange,
      HangInquirySite{assignment.group_rank, assignment.group_world_size, rdzv.hostname(), group.attempt_dir(),
                      services_->settings.executable, assignment.master_addr, assignment.master_port});
  const FallbackSuspect suspect{standing.rank, standing.reason,
                                standing.route == proto::SuspicionRoute::kCollectiveWait};
  const HangVerdict verdict = inquiry.judge(
      suspect.rank >= 0 ? std::optional(suspect) : std::nullopt,
      LatenessRule{standing.waited_s, services_->settings.busy_timeout_s, services_->settings.outside_timeout_s});
  if (verdict.outcome == HangOutcome::kLate) {
    on_late(verdict);
    return std::nullopt;
  }
  if (verdict.outcome == HangOutcome::kResolved) {  // the hook's next report shows it; until then, no new suspicion
    spdlog::info("hang inquiry: {}", verdict.line);
    quiet_after_inquiry();
    return std::nullopt;
  }
  const int named = !verdict.culprits.empty() ? verdict.culprits.front() : suspect.rank;
  // A rank of this node that ended by itself while it was judged (a zombie until the loop reaps it) was finishing,
  // not hung (a job's teardown after its last step, slow on a loaded machine): its exit decides, as for any worker.
  if (const Worker* local = local_worker(named);
      local && local->process && process_state(local->process->pid()) == 'Z') {
    spdlog::info("hang inquiry: rank {} ended while it was judged; its exit decides", named);
    quiet_after_inquiry();
    return std::nullopt;
  }
  say(requested_here
          ? "suspected hang: rank " + std::to_string(suspicion.rank) + ": " + suspicion.reason
          : "another node suspected a hang (rank " + std::to_string(standing.rank) + ": " + standing.reason + ")");
  say(verdict.line);
  for (const auto& note : verdict.notes) say("  " + note);
  // A verdict from beats or silence alone names the rank the suspicion named, for the suspicion's reason.
  const std::string reason = verdict.kind == HangKind::kNoCollective && named == suspect.rank && !suspect.reason.empty()
                                 ? suspect.reason
                                 : without_prefix(verdict.line);
  AttemptResult result{AttemptResult::Kind::kWorkerHung, 1, reason, found};
  result.expected_report_rank = named;
  stop_for_hang(inquiry, keeper, verdict, named, reason);
  return result;
}

const Worker* Attempt::local_worker(int rank) const {
  for (const auto& w : group.workers()) {
    if (w.rank == rank) return &w;
  }
  return nullptr;
}

void Attempt::quiet_after_inquiry() {
  progress.clear_suspicion();
  progress.defer_suspicions(std::chrono::steady_clock::now() + kResolvedQuiet);
  exchange.next_inquiry();
}

void Attempt::stop_for_hang(HangInquiry& inquiry, HeartbeatKeeper& keeper, const HangVerdict& verdict, int named,
                            const std::string& reason) {
  const Worker* local = local_worker(named);
  const auto local_rank = static_cast<size_t>(local != nullptr ? local - group.workers().data() : 0);
  const auto with_hang = [&](FailureInfo info) {
    info.hang_reason = reason;
    info.time = std::chrono::system_clock::now();
    return info;
  };
  // The report first (the root cause on every node waits for it), the stacks after.
  if (local != nullptr) {
    proto::FailureReport report = failure_report(with_hang(group.failure_info(local_rank)), group.attempt());
    report.hang_kind = std::string(to_string(verdict.kind));
    const proto::AttemptMilestones account = account_now();
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
  group.stop(services_->signals, services_->settings.fault_grace);
  if (local == nullptr) return;
  FailureInfo info = with_hang(group.failure_info(local_rank));
  for (const auto& s : stacks) {
    if (s.rank != named) continue;
    info.stack_tool = s.tool;
    info.stack = s.text;
    info.stack_file = local->dir + "/stack.txt";
  }
  std::fputs(format_failure_summary(info).c_str(), stderr);
}

// Every rank the others wait for is busy, or waits on the world outside the job: a late rank, not a hang. Every
// node says so (once, again when what the rank does changes, then every kLateRepeat while it lasts), marks its own
// late ranks for status, and looks again after kLateRecheck (or when --hang-busy-timeout or --hang-outside-timeout
// runs out), in a new inquiry: a late rank whose wait has become proof of a hang is then named hung.
void Attempt::on_late(const HangVerdict& verdict) {
  const auto now = std::chrono::steady_clock::now();
  services_->reports.late(late_subject(verdict), verdict.line, now);
  const Ms window{static_cast<int64_t>(kActivityWindowS * 1000)};
  auto recheck = now + std::clamp(to_ms(verdict.waited_s), window, kLateRecheck);
  for (const auto& timeout : {services_->settings.busy_timeout_s, services_->settings.outside_timeout_s}) {
    if (timeout) recheck = std::min(recheck, now + std::max(Ms(1000), to_ms(*timeout - verdict.waited_s)));
  }
  const auto& workers = group.workers();
  for (size_t lr = 0; lr < workers.size(); ++lr) {
    if (std::find(verdict.culprits.begin(), verdict.culprits.end(), workers[lr].rank) == verdict.culprits.end())
      continue;
    progress.mark_late(lr, LateMark{verdict.line, verdict.group, verdict.seq, now, recheck + kLateRecheck});
  }
  progress.clear_suspicion();
  progress.defer_suspicions(recheck);
  exchange.next_inquiry();
}

void Attempt::stop_workers(Ms grace, int first_signal) {
  if (group.all_exited()) {
    group.stop(services_->signals, grace, first_signal);  // reaps and sweeps at once: nothing to wait for
    return;
  }
  const HeartbeatKeeper keeper(rdzv, services_->settings.keep_alive,
                               progress.summaries(std::chrono::steady_clock::now()));
  group.stop(services_->signals, grace, first_signal);
}

std::optional<AttemptResult> Attempt::on_heartbeat(HeartbeatSchedule& schedule, bool early) {
  try {
    const auto now = std::chrono::steady_clock::now();
    const auto beat = rdzv.heartbeat(progress.summaries(now, rdzv.clock_offset()), milestones(now, services_->memory));
    schedule.failures = 0;
    services_->reports.stragglers(beat.stragglers);
    services_->reports.recovery(beat);
    progress.ask_clocks();  // the answers come before the next heartbeat, which carries what they allow
    progress.ask_arrivals(beat.arrival_probe, now);
    if (beat.action == proto::HeartbeatAction::kRestart) {
      say("the rendezvous asks for a restart: " + beat.reason);
      stop_workers(beat.cause == proto::RestartCause::kScaleUp ? services_->settings.grace
                                                               : services_->settings.fault_grace);
      const auto kind = beat.cause == proto::RestartCause::kScaleUp ? AttemptResult::Kind::kScaleUp
                                                                    : AttemptResult::Kind::kRemoteRestart;
      return AttemptResult{kind, 1, beat.reason};
    }
    if (beat.action == proto::HeartbeatAction::kFail) {
      say("the run failed: " + beat.reason + "; stopping the workers");
      stop_workers(services_->settings.fault_grace);
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
                 services_->settings.keep_alive_max_attempt, e.what());
    if (schedule.failures < services_->settings.keep_alive_max_attempt) return std::nullopt;
    const std::string endpoint = (services_->settings.etcd ? "etcd " : "") + rdzv.endpoint_text();
    const std::string reason = "lost the rendezvous at " + endpoint + ": " + std::to_string(schedule.failures) +
                               " heartbeats in a row failed (last: " + e.what() + ")";
    const std::string hint = services_->settings.etcd
                                 ? "are the etcd members up and reachable from this node?"
                                 : "is the rendezvous host up? see `meshrun ping " + endpoint + "`";
    say(reason + "; stopping the workers (" + hint + ")");
    group.stop(services_->signals, services_->settings.fault_grace);
    return AttemptResult{AttemptResult::Kind::kRendezvousLost, 1, reason};
  }
}

}  // namespace meshrun::launcher
