// ProgressMonitor: one attempt's progress channels on this node. It owns a BeatSocket and a RankTracker
// per local rank, reads the beats, judges hangs (HangPolicy; stopped workers too) and summarises the
// ranks for the daemon.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/activity/activity_monitor.hpp"
#include "launcher/progress/beat_socket.hpp"
#include "launcher/progress/collective_accountant.hpp"
#include "launcher/progress/collective_watch.hpp"
#include "launcher/progress/hang_policy.hpp"
#include "launcher/progress/rank_tracker.hpp"
#include "launcher/progress/step_accountant.hpp"
#include "proto/hang_request.hpp"
#include "proto/rendezvous_messages.hpp"

namespace meshrun::launcher {

/// The environment variable naming a worker's progress socket.
inline constexpr const char* kProgressEnv = "MESHRUN_PROGRESS";
/// The agent's socket for the collective reporter's messages is the progress socket's path with this
/// suffix: a Unix datagram socket queues 10 datagrams, and the reports (up to 10 a second) must not crowd
/// out the script's beats while the agent is busy.
inline constexpr const char* kHookReportSuffix = ".fr";

/// A rank judged hung, and why ("no progress beat for 12.3 s (budget 10.0 s) after step 42 (train)").
struct HangReport {
  size_t local_rank = 0;
  int rank = 0;
  std::string reason;
  int64_t step = -1;    // the last step it beat (-1: it never beat)
  double waited_s = 0;  // how long it has waited in its collective, or been silent
  proto::SuspicionRoute route = proto::SuspicionRoute::kUnknown;
};

/// A rank this node's agent judged late (busy while others wait for it): shown in status until it enters
/// the collective, beats again, or `until` passes without a new verdict renewing it.
struct LateMark {
  std::string line;   // the late line
  std::string group;  // the collective it had not entered ("" for a suspicion from beats)
  int64_t seq = -1;
  std::chrono::steady_clock::time_point marked_at{};
  std::chrono::steady_clock::time_point until{};
};

/// The state letter of /proc/<pid>/stat ('R', 'S', 'T'...), or '\0' when unreadable (the worker exited).
char process_state(pid_t pid);

class ProgressMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kAskAgainAfter{1};

  /// Binds one socket per rank in `dir` (<dir>/<local rank>.sock); `ranks` are the global ranks of local
  /// ranks 0..n-1; `steps_done`: the highest step the run finished before this attempt (-1: none), for the
  /// step accounts. Throws Error when a socket cannot be made.
  ProgressMonitor(const std::string& dir, const std::vector<int>& ranks, HangPolicy policy, int64_t steps_done = -1);

  /// The socket path of each local rank (the workers' MESHRUN_PROGRESS).
  std::vector<std::string> socket_paths() const;
  /// The sockets' descriptors (beats and reports), to poll alongside the workers' pipes.
  std::vector<int> fds() const;
  /// Reads every waiting beat. A malformed one is reported once per rank (it never stops the job).
  void drain(Clock::time_point now);
  /// Marks the attempt as judged hung (a verdict was reached some other way): no further reports.
  void mark_hung(size_t lr) { hung_ = lr; }
  /// The verdict was "late": the attempt goes on, and later suspicions are reported again.
  void clear_suspicion() { hung_.reset(); }
  /// Samples the workers' process trees (once a second) and asks hooked ranks for their stacks (every other
  /// sample), for activity(). `pids` by local rank (0: exited).
  void watch_activity(const std::vector<pid_t>& pids, Clock::time_point now);
  /// Stuck or busy: what local rank `lr`'s process tree did over the last seconds, at most `window_s` (how
  /// long the others have waited for it).
  Activity activity(size_t lr, double window_s) const;
  /// A late verdict named local rank `lr`.
  void mark_late(size_t lr, LateMark mark) { late_[lr] = std::move(mark); }
  /// The late line of local rank `lr`, while its mark stands.
  [[nodiscard]] std::optional<std::string> late(size_t lr, Clock::time_point now) const;
  /// No suspicion from silence or a collective wait before `until` (a late verdict stands until then; a
  /// stopped worker is still suspected at once).
  void defer_suspicions(Clock::time_point until) { quiet_until_ = until; }
  /// The first rank that is hung now, if any. `pids` are the running workers' pids by local rank (0:
  /// exited), read for the stopped state (T) in /proc.
  std::optional<HangReport> find_hang(const std::vector<pid_t>& pids, Clock::time_point now);
  /// The first rank that waits in one collective longer than its budget (HangPolicy::collective_budget_s),
  /// if any; the caller gathers every rank's record to name the culprit.
  std::optional<HangReport> find_collective_wait(const std::vector<pid_t>& pids, Clock::time_point now);
  /// Asks local rank `lr`'s hook to write its collective record to `path` (retrying a full queue for up to
  /// a second): "" when asked, else why not.
  std::string request_dump(size_t lr, const std::string& path);
  const CollectiveWatch& watch(size_t lr) const { return watches_[lr]; }
  CollectiveWatch& watch(size_t lr) { return watches_[lr]; }
  size_t size() const { return trackers_.size(); }
  /// Local rank `lr`'s last beaten step, -1 before its first beat.
  int64_t last_step(size_t lr) const;
  /// Asks every hooked rank for its wall clock (its offset from this agent's; answers come with the beats).
  void ask_clocks();
  /// Relays the daemon's arrival probe (from a heartbeat reply) to every hooked rank, once per probe; an
  /// empty one (none open) ends the wait for answers.
  void ask_arrivals(const proto::ArrivalProbe& probe, Clock::time_point now);
  /// Asks the ranks that have not answered the probe yet again, kAskAgainAfter after the last ask (a datagram
  /// lost either way costs a second, not the daemon's give-up). `pids` by local rank (0: exited, not asked).
  void ask_arrivals_again(const std::vector<pid_t>& pids, Clock::time_point now);
  /// True once per relayed probe, when every hooked rank still running has answered it: the caller sends the
  /// answers at once rather than with the next heartbeat, a keep-alive later (the probe's round trip is the
  /// straggler route's latency: docs/progress.md). `pids` as for ask_arrivals_again.
  [[nodiscard]] bool take_arrival_answers(const std::vector<pid_t>& pids);
  /// One entry per rank that has beaten or whose hook reported collectives (none when neither). With
  /// `node_clock` (this node's clock minus the daemon's), answers to the arrival probe go along, on the
  /// daemon's clock.
  std::vector<proto::RankProgress> summaries(Clock::time_point now,
                                             std::optional<OffsetEstimate> node_clock = std::nullopt) const;
  /// How the node's first rank with step beats spent the attempt; for a script that beats no steps, as its
  /// collectives tell it (CollectiveAccountant); an empty account when neither.
  proto::StepAccount step_account(Clock::time_point now) const;
  /// The workers ended: the accounts stop at `now`.
  void close_accounts(Clock::time_point now);

 private:
  /// One datagram from local rank `lr`: a progress beat or a reporter's message.
  void take(size_t lr, const std::string& datagram, Clock::time_point now);
  [[nodiscard]] std::optional<std::string> silence_verdict(size_t local_rank, Clock::time_point now) const;
  /// Whether this range is the last probe relayed.
  bool asked_for(const std::string& group, int64_t first_seq, int64_t last_seq) const;
  /// Whether local rank `lr` answered the last probe relayed.
  bool answered(size_t lr) const;
  /// Whether an answer from local rank `lr` is still to come: hooked, running (`pids`), not answered.
  bool awaited(size_t lr, const std::vector<pid_t>& pids) const;
  /// Sends the relayed probe to the ranks `ask` picks; false when it picked none.
  bool send_arrival_requests(const std::function<bool(size_t)>& ask);
  /// Where local rank `lr`'s hook listens for the agent's requests.
  std::string hook_path(size_t lr) const;
  [[nodiscard]] std::optional<std::string> stopped_verdict(size_t local_rank, pid_t pid, Clock::time_point now);
  std::optional<HangReport> stopped_now(const std::vector<pid_t>& pids, Clock::time_point now,
                                        const std::string& context);

  HangPolicy policy_;
  std::vector<BeatSocket> sockets_;         // the beats (<dir>/<lr>.sock, the workers' MESHRUN_PROGRESS)
  std::vector<BeatSocket> report_sockets_;  // the reporter's messages (<MESHRUN_PROGRESS>.fr)
  std::vector<RankTracker> trackers_;
  std::vector<StepAccountant> accountants_;
  std::vector<CollectiveAccountant> collective_accountants_;  // for ranks that beat no steps
  std::vector<CollectiveWatch> watches_;
  std::vector<std::optional<Clock::time_point>> stopped_since_;
  std::set<size_t> warned_bad_beat_;
  std::optional<size_t> hung_;  // reported once; the caller stops the attempt
  proto::ArrivalProbe asked_;   // the last probe relayed
  Clock::time_point asked_at_{};
  bool answers_pending_ = false;  // some hooked rank has not answered asked_ yet
  ActivityMonitor activity_;
  int activity_samples_ = 0;
  std::vector<std::optional<LateMark>> late_;
  Clock::time_point quiet_until_{};
};

}  // namespace meshrun::launcher
