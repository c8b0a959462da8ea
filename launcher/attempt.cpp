#include "launcher/attempt.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/say.hpp"
#include "launcher/failure/exit_status.hpp"
#include "launcher/failure/failure_summary.hpp"
#include "launcher/failure/root_cause.hpp"
#include "launcher/hang/stack_groups.hpp"
#include "launcher/memory/memory_keeper.hpp"
#include "launcher/rdzv/rendezvous_backend.hpp"
#include "launcher/run_reports.hpp"

namespace meshrun::launcher {
namespace {

using Ms = std::chrono::milliseconds;

/// A restart the daemon asked for: a membership change the agents opted into (a node admitted, a slow node
/// replaced) is not counted against --max-restarts; a failure elsewhere is.
AttemptResult::Kind remote_restart_kind(proto::RestartCause cause) {
  switch (cause) {
    case proto::RestartCause::kScaleUp: return AttemptResult::Kind::kScaleUp;
    case proto::RestartCause::kSlowNode: return AttemptResult::Kind::kSlowNodeReplaced;
    default: return AttemptResult::Kind::kRemoteRestart;
  }
}

// Hangs are judged this often: fine enough next to budgets of seconds, cheap next to beats that may
// arrive a thousand times a second.
constexpr Ms kHangCheckEvery{250};
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
      progress(progress_dir, node_ranks(assignment_, nproc_per_node), assignment_.steps_done),
      group(beating_while_spawning(spec_for(progress), beat_every)),
      hangs(progress, group, policy,
            HangExchange(
                Endpoint{strip_brackets(assignment_.master_addr), static_cast<uint16_t>(assignment_.master_port)},
                assignment_.round, assignment_.group_rank, assignment_.group_world_size)),
      arrivals(progress),
      clock(assignment_.round, static_cast<size_t>(nproc_per_node), std::chrono::steady_clock::now()) {
  spawning_.reset();
}

GroupSpec Attempt::beating_while_spawning(GroupSpec spec, std::chrono::milliseconds every) {
  // Nothing to mark yet: the hang watch is made after the group.
  if (every.count() > 0) spawning_.emplace(rdzv, every, progress.summaries(std::chrono::steady_clock::now()));
  return spec;
}

std::vector<proto::RankProgress> Attempt::summaries(std::chrono::steady_clock::time_point now,
                                                    std::optional<OffsetEstimate> node_clock) const {
  return progress.summaries(now, hangs.marks(now), node_clock);
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
    if (!clock.settled()) clock.observe(summaries(Clock::now()), Clock::now());
    services_->chores(*this);
    if (auto r = on_signals(signals)) return *r;
    if (auto r = on_worker_exits()) return *r;
    if (Clock::now() >= next_hang_check) {
      next_hang_check = Clock::now() + kHangCheckEvery;
      if (auto r = on_hang()) return *r;
    }
    // Arrival answers go out as soon as they are all in, beside the schedule (an early heartbeat moves nothing).
    const auto pids = group.running_pids();
    arrivals.ask_again(pids, Clock::now());
    const bool answers_in = arrivals.take_answers(pids);
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
    if (auto planned = planned_restart()) return planned;
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

std::optional<AttemptResult> Attempt::planned_restart() {
  try {
    const auto now = std::chrono::steady_clock::now();
    const auto beat = rdzv.heartbeat(summaries(now, rdzv.clock_offset()), milestones(now, services_->memory));
    const auto kind = remote_restart_kind(beat.cause);
    if (beat.action != proto::HeartbeatAction::kRestart || kind == AttemptResult::Kind::kRemoteRestart) {
      return std::nullopt;
    }
    say("the rendezvous asks for a restart: " + beat.reason + " (a worker here ended with the other nodes' stop)");
    stop_workers(services_->settings.fault_grace);
    return AttemptResult{kind, 1, beat.reason};
  } catch (const Error& e) {
    spdlog::debug("could not ask the rendezvous whether a restart is under way: {}", e.what());
    return std::nullopt;
  }
}

// A hang suspected here (beats, a stopped worker, a collective waited on past its budget) or by another
// node (its request in the workers' store): every node judges every rank's record the same way.
std::optional<AttemptResult> Attempt::on_hang() {
  const auto found = std::chrono::steady_clock::now();
  const auto suspicion = hangs.suspect(group.running_pids(), found);
  if (!suspicion) return std::nullopt;
  HeartbeatKeeper keeper(rdzv, services_->settings.keep_alive, summaries(found));
  HangJudgment judgment = hangs.judge(*suspicion, inquiry_site());
  if (judgment.outcome == HangOutcome::kLate) {
    services_->reports.late(late_subject(judgment.verdict), judgment.verdict.line, std::chrono::steady_clock::now());
  }
  if (judgment.outcome != HangOutcome::kHung) return std::nullopt;
  AttemptResult result{AttemptResult::Kind::kWorkerHung, 1, judgment.reason, found};
  result.expected_report_rank = judgment.named;
  stop_for_hang(keeper, judgment);
  return result;
}

HangInquirySite Attempt::inquiry_site() const {
  return HangInquirySite{assignment.group_rank, assignment.group_world_size,    rdzv.hostname(),
                         group.attempt_dir(),   services_->settings.executable, assignment.master_addr,
                         assignment.master_port};
}

void Attempt::stop_for_hang(HeartbeatKeeper& keeper, HangJudgment& hung) {
  const auto& workers = group.workers();
  const auto local =
      std::find_if(workers.begin(), workers.end(), [&](const Worker& w) { return w.rank == hung.named; });
  const auto local_rank = static_cast<size_t>(local != workers.end() ? local - workers.begin() : 0);
  const auto with_hang = [&](FailureInfo info) {
    info.hang_reason = hung.reason;
    info.time = std::chrono::system_clock::now();
    return info;
  };
  // The report first (the root cause on every node waits for it), the stacks after.
  if (local != workers.end()) {
    proto::FailureReport report = failure_report(with_hang(group.failure_info(local_rank)), group.attempt());
    report.hang_kind = std::string(to_string(hung.verdict.kind));
    const proto::AttemptMilestones account = account_now();
    keeper.with_rendezvous([&](RendezvousBackend& r) { r.record_failure(report, account); });
  }
  const auto stacks = hung.inquiry->stacks();
  if (!stacks.empty()) {
    std::fprintf(stderr,
                 "meshrun: every rank's stack, identical ones once (each also in <log dir>/<run "
                 "id>/attempt_%d/<rank>/stack.txt):\n%s",
                 group.attempt(), format_stack_groups(stacks).c_str());
  }
  say("hang verdict written to " + hung.inquiry->verdict_file());
  group.stop(services_->signals, services_->settings.fault_grace);
  if (local == workers.end()) return;
  FailureInfo info = with_hang(group.failure_info(local_rank));
  for (const auto& s : stacks) {
    if (s.rank != hung.named) continue;
    info.stack_tool = s.tool;
    info.stack = s.text;
    info.stack_file = local->dir + "/stack.txt";
  }
  std::fputs(format_failure_summary(info).c_str(), stderr);
}

void Attempt::stop_workers(Ms grace, int first_signal) {
  if (group.all_exited()) {
    group.stop(services_->signals, grace, first_signal);  // reaps and sweeps at once: nothing to wait for
    return;
  }
  const HeartbeatKeeper keeper(rdzv, services_->settings.keep_alive, summaries(std::chrono::steady_clock::now()));
  group.stop(services_->signals, grace, first_signal);
}

std::optional<AttemptResult> Attempt::on_heartbeat(HeartbeatSchedule& schedule, bool early) {
  try {
    const auto now = std::chrono::steady_clock::now();
    const auto beat = rdzv.heartbeat(summaries(now, rdzv.clock_offset()), milestones(now, services_->memory));
    schedule.failures = 0;
    services_->reports.stragglers(beat.stragglers);
    services_->reports.slow_nodes(beat.slow_nodes);
    services_->reports.recovery(beat);
    progress.ask_clocks();  // the answers come before the next heartbeat, which carries what they allow
    arrivals.ask(beat.arrival_probe, now);
    if (beat.action == proto::HeartbeatAction::kRestart) {
      say("the rendezvous asks for a restart: " + beat.reason);
      stop_workers(beat.cause == proto::RestartCause::kScaleUp ? services_->settings.grace
                                                               : services_->settings.fault_grace);
      return AttemptResult{remote_restart_kind(beat.cause), 1, beat.reason};
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
