#include "launcher/hang/hang_watch.hpp"

#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <algorithm>

#include "common/say.hpp"
#include "launcher/activity/activity_rule.hpp"
#include "launcher/workers/worker_group.hpp"

namespace meshrun::launcher {
namespace {

using Ms = std::chrono::milliseconds;

// A late rank (busy, or waiting outside the job, while the others wait for it) is judged again after as long as
// the first judgment took (the wait so far), between one activity window and kLateRecheck: one whose wait becomes
// proof of a hang is then named hung within that of it, before a short collective timeout of the script's own
// ends the job. The late line itself is repeated far less often (RunReports::kLateRepeat).
constexpr Ms kLateRecheck{30000};
// After an inquiry found the suspected wait over, the hook's next report (every 0.1 s) has caught up by then.
constexpr Ms kResolvedQuiet{2000};

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

Ms to_ms(double seconds) { return std::chrono::duration_cast<Ms>(std::chrono::duration<double>(seconds)); }

// " after step 42 (train)" for a rank that has beaten, else "".
std::string after_step(const RankTracker& t) {
  return t.has_beaten() ? fmt::format(" after step {} ({})", t.last().step, t.last().phase) : "";
}

std::string without_prefix(const std::string& line) { return line.starts_with("hang: ") ? line.substr(6) : line; }

}  // namespace

HangWatch::HangWatch(ProgressMonitor& progress, WorkerGroup& group, HangPolicy policy, HangExchange exchange)
    : progress_(progress),
      group_(group),
      policy_(policy),
      exchange_(std::move(exchange)),
      activity_(progress.size()),
      stopped_since_(progress.size()),
      late_(progress.size()) {}

std::optional<Suspicion> HangWatch::suspect(const std::vector<pid_t>& pids, Clock::time_point now) {
  if (activity_.sample(pids, now) && activity_samples_++ % 2 == 0) {
    for (size_t lr = 0; lr < progress_.size(); ++lr) {
      if (progress_.watch(lr).hooked()) progress_.ask_hook(lr, proto::HookRequest::frames());
    }
  }
  auto found = find_hang(pids, now);
  if (!found) found = find_collective_wait(pids, now);
  // The suspicion is said only when the verdict is a hang: a late rank (busy) gets its own line instead.
  if (found) {
    hung_ = found->local_rank;
    spdlog::info("suspected hang: rank {}: {}; gathering every rank's collective record", found->rank, found->reason);
    return Suspicion{proto::HangRequest{exchange_.node(), found->rank, found->reason, found->waited_s, found->route},
                     true};
  }
  if (auto request = exchange_.poll(now)) {
    spdlog::info("another node suspects a hang (rank {}: {}); gathering this node's collective records", request->rank,
                 request->reason);
    return Suspicion{std::move(*request), false};
  }
  return std::nullopt;
}

HangJudgment HangWatch::judge(const Suspicion& suspicion, const HangInquirySite& site) {
  proto::HangRequest standing = suspicion.request;
  if (suspicion.here && site.nodes > 1) {
    try {
      standing = exchange_.request(suspicion.request);  // the first request wins on every node
    } catch (const std::exception& e) {
      spdlog::warn("cannot tell the other nodes about the hang through the workers' store: {}", e.what());
    }
  }
  HangJudgment j;
  j.inquiry.emplace(progress_, activity_, group_, exchange_, site);
  const FallbackSuspect fallback{standing.rank, standing.reason,
                                 standing.route == proto::SuspicionRoute::kCollectiveWait};
  j.verdict = j.inquiry->judge(fallback.rank >= 0 ? std::optional(fallback) : std::nullopt,
                               LatenessRule{standing.waited_s, policy_.busy_timeout_s, policy_.outside_timeout_s});
  j.outcome = j.verdict.outcome;
  if (j.outcome == HangOutcome::kLate) {
    on_late(j.verdict);
    return j;
  }
  if (j.outcome == HangOutcome::kResolved) {  // the hook's next report shows it; until then, no new suspicion
    spdlog::info("hang inquiry: {}", j.verdict.line);
    quiet_until(Clock::now() + kResolvedQuiet);
    return j;
  }
  j.named = !j.verdict.culprits.empty() ? j.verdict.culprits.front() : fallback.rank;
  // A rank of this node that ended by itself while it was judged (a zombie until the loop reaps it) was finishing,
  // not hung (a job's teardown after its last step, slow on a loaded machine): its exit decides, as for any worker.
  if (const Worker* local = local_worker(j.named);
      local && local->process && process_state(local->process->pid()) == 'Z') {
    spdlog::info("hang inquiry: rank {} ended while it was judged; its exit decides", j.named);
    quiet_until(Clock::now() + kResolvedQuiet);
    j.outcome = HangOutcome::kResolved;
    return j;
  }
  say(suspicion.here
          ? "suspected hang: rank " + std::to_string(suspicion.request.rank) + ": " + suspicion.request.reason
          : "another node suspected a hang (rank " + std::to_string(standing.rank) + ": " + standing.reason + ")");
  say(j.verdict.line);
  for (const auto& note : j.verdict.notes) say("  " + note);
  // A verdict from beats or silence alone names the rank the suspicion named, for the suspicion's reason.
  j.reason = j.verdict.kind == HangKind::kNoCollective && j.named == fallback.rank && !fallback.reason.empty()
                 ? fallback.reason
                 : without_prefix(j.verdict.line);
  return j;
}

RankMarks HangWatch::marks(Clock::time_point now) const {
  RankMarks m{.hung = hung_, .late = {}};
  for (size_t lr = 0; lr < late_.size(); ++lr) m.late.push_back(late(lr, now));
  return m;
}

// The culprit, not the first rank to notice: when one rank stops or blocks, the others go silent too,
// waiting for it in a collective. So a stopped worker is named first (it explains everyone's silence),
// then among the silent ranks the one whose last step is lowest (the others got further), then the one
// silent longest.
std::optional<HangWatch::Suspect> HangWatch::find_hang(const std::vector<pid_t>& pids, Clock::time_point now) {
  if (hung_) return std::nullopt;
  std::optional<size_t> silent_culprit;
  std::optional<std::string> silent_reason;
  for (size_t lr = 0; lr < progress_.size(); ++lr) {
    const pid_t pid = lr < pids.size() ? pids[lr] : 0;
    if (pid <= 0) continue;
    if (auto stopped = stopped_verdict(lr, pid, now)) {
      return Suspect{lr, progress_.tracker(lr).rank(),   *stopped, progress_.last_step(lr),
                     0,  proto::SuspicionRoute::kStopped};
    }
    auto reason = silence_verdict(lr, now);
    if (!reason) continue;
    const auto earlier = [&](size_t a, size_t b) {
      const auto& x = progress_.tracker(a);
      const auto& y = progress_.tracker(b);
      return x.last().step != y.last().step ? x.last().step < y.last().step : x.last_at() < y.last_at();
    };
    if (!silent_culprit || earlier(lr, *silent_culprit)) {
      silent_culprit = lr;
      silent_reason = reason;
    }
  }
  if (!silent_culprit) return std::nullopt;
  const RankTracker& culprit = progress_.tracker(*silent_culprit);
  if (auto stopped = stopped_now(pids, now, fmt::format("rank {}: {}", culprit.rank(), *silent_reason))) {
    return stopped;
  }
  return Suspect{*silent_culprit,
                 culprit.rank(),
                 *silent_reason,
                 progress_.last_step(*silent_culprit),
                 seconds(now - culprit.last_at()),
                 proto::SuspicionRoute::kSilence};
}

std::optional<std::string> HangWatch::silence_verdict(size_t lr, Clock::time_point now) const {
  if (now < quiet_until_) return std::nullopt;
  const RankTracker& t = progress_.tracker(lr);
  const auto budget = policy_.budget_s(t);
  if (!budget) return std::nullopt;
  const double silent = seconds(now - t.last_at());
  if (silent <= *budget) return std::nullopt;
  return fmt::format("no progress beat for {:.1f} s (budget {:.1f} s) after step {} ({})", silent, *budget,
                     t.last().step, t.last().phase);
}

std::optional<std::string> HangWatch::stopped_verdict(size_t lr, pid_t pid, Clock::time_point now) {
  const auto budget = policy_.stopped_budget_s();
  if (!budget || pid <= 0 || process_state(pid) != 'T') {
    stopped_since_[lr].reset();
    return std::nullopt;
  }
  if (!stopped_since_[lr]) stopped_since_[lr] = now;
  const double stopped = seconds(now - *stopped_since_[lr]);
  if (stopped <= *budget) return std::nullopt;
  const RankTracker& t = progress_.tracker(lr);
  const std::string where = after_step(t);
  return fmt::format("stopped by a signal (state T) for {:.1f} s (budget {:.1f} s){}", stopped, *budget, where);
}

// A worker stopped right now, even for less than its own budget, is the better culprit than a rank found
// waiting (or silent): it explains the wait. `context` is what was found ("rank 0: waits in ...").
std::optional<HangWatch::Suspect> HangWatch::stopped_now(const std::vector<pid_t>& pids, Clock::time_point now,
                                                         const std::string& context) const {
  for (size_t lr = 0; lr < progress_.size(); ++lr) {
    if (lr >= pids.size() || pids[lr] <= 0 || !stopped_since_[lr]) continue;
    const RankTracker& t = progress_.tracker(lr);
    const std::string where = after_step(t);
    return Suspect{lr,
                   t.rank(),
                   fmt::format("stopped by a signal (state T) for {:.1f} s{} while the other ranks wait ({})",
                               seconds(now - *stopped_since_[lr]), where, context),
                   progress_.last_step(lr),
                   0,
                   proto::SuspicionRoute::kStopped};
  }
  return std::nullopt;
}

std::optional<HangWatch::Suspect> HangWatch::find_collective_wait(const std::vector<pid_t>& pids,
                                                                  Clock::time_point now) {
  if (hung_ || now < quiet_until_) return std::nullopt;
  for (size_t lr = 0; lr < progress_.size(); ++lr) {
    // A stopped worker's hook is stopped too: its last status (perhaps inside an earlier collective) is stale.
    if (lr >= pids.size() || pids[lr] <= 0 || stopped_since_[lr]) continue;
    const CollectiveWatch& watch = progress_.watch(lr);
    const auto wait = watch.oldest_wait();
    const auto budget = policy_.collective_budget_s(watch, progress_.tracker(lr));
    if (!wait || !budget) continue;
    const double waited = seconds(now - wait->since);
    if (waited <= *budget) continue;
    const std::string reason = fmt::format("waits in collective #{} of group {} for {:.1f} s (budget {:.1f} s)",
                                           wait->seq, wait->group, waited, *budget);
    const int rank = progress_.tracker(lr).rank();
    if (auto stopped = stopped_now(pids, now, fmt::format("rank {} {}", rank, reason))) return stopped;
    return Suspect{lr, rank, reason, progress_.last_step(lr), waited, proto::SuspicionRoute::kCollectiveWait};
  }
  return std::nullopt;
}

std::optional<std::string> HangWatch::late(size_t lr, Clock::time_point now) const {
  const auto& mark = late_[lr];
  if (!mark || now >= mark->until) return std::nullopt;
  if (!mark->group.empty() && progress_.watch(lr).last_enqueued(mark->group) >= mark->seq) {
    return std::nullopt;  // it entered
  }
  const RankTracker& t = progress_.tracker(lr);
  if (mark->group.empty() && t.has_beaten() && t.last_at() > mark->marked_at) return std::nullopt;  // it beat again
  return mark->line;
}

// Every rank the others wait for is busy, or waits on the world outside the job: a late rank, not a hang. Every
// node marks its own late ranks for status, and looks again after kLateRecheck (or when --hang-busy-timeout or
// --hang-outside-timeout runs out), in a new inquiry: a late rank whose wait has become proof of a hang is then
// named hung. (The attempt says the late line, through the run's reports.)
void HangWatch::on_late(const HangVerdict& verdict) {
  const auto now = Clock::now();
  const Ms window{static_cast<int64_t>(kActivityWindowS * 1000)};
  auto recheck = now + std::clamp(to_ms(verdict.waited_s), window, kLateRecheck);
  for (const auto& timeout : {policy_.busy_timeout_s, policy_.outside_timeout_s}) {
    if (timeout) recheck = std::min(recheck, now + std::max(Ms(1000), to_ms(*timeout - verdict.waited_s)));
  }
  for (size_t lr = 0; lr < progress_.size(); ++lr) {
    if (std::find(verdict.culprits.begin(), verdict.culprits.end(), progress_.tracker(lr).rank()) ==
        verdict.culprits.end())
      continue;
    late_[lr] = LateMark{verdict.line, verdict.group, verdict.seq, now, recheck + kLateRecheck};
  }
  quiet_until(recheck);
}

void HangWatch::quiet_until(Clock::time_point until) {
  hung_.reset();
  quiet_until_ = until;
  exchange_.next_inquiry();
}

const Worker* HangWatch::local_worker(int rank) const {
  for (const auto& w : group_.workers()) {
    if (w.rank == rank) return &w;
  }
  return nullptr;
}

}  // namespace meshrun::launcher
