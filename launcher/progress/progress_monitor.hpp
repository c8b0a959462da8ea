// ProgressMonitor: one attempt's progress channels on this node. It owns a BeatSocket and a RankTracker
// per local rank, reads the beats and the hooks' reports, keeps the step accounts and summarises the ranks
// for the daemon. What the ranks said, only: the hang watch (launcher/hang/hang_watch.hpp) judges it, and
// the arrival relay (arrival_relay.hpp) relays the daemon's probes through it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/progress/beat_socket.hpp"
#include "launcher/progress/collective_accountant.hpp"
#include "launcher/progress/collective_watch.hpp"
#include "launcher/progress/rank_tracker.hpp"
#include "launcher/progress/step_accountant.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"
#include "proto/worker/hook_messages.hpp"

namespace meshrun::launcher {

/// The environment variable naming a worker's progress socket.
inline constexpr const char* kProgressEnv = "MESHRUN_PROGRESS";
/// The agent's socket for the collective reporter's messages is the progress socket's path with this
/// suffix: a Unix datagram socket queues 10 datagrams, and the reports (up to 10 a second) must not crowd
/// out the script's beats while the agent is busy.
inline constexpr const char* kHookReportSuffix = ".fr";

/// What the hang watch (launcher/hang/hang_watch.hpp) says of this node's ranks, carried in their summaries: the
/// rank it reported hung, and each local rank's late line while its mark stands.
struct RankMarks {
  std::optional<size_t> hung;
  std::vector<std::optional<std::string>> late;  // by local rank; shorter: none
};

/// The state letter of /proc/<pid>/stat ('R', 'S', 'T'...), or '\0' when unreadable (the worker exited).
char process_state(pid_t pid);

class ProgressMonitor {
 public:
  using Clock = std::chrono::steady_clock;

  /// Binds one socket per rank in `dir` (<dir>/<local rank>.sock); `ranks` are the global ranks of local
  /// ranks 0..n-1; `steps_done`: the highest step the run finished before this attempt (-1: none), for the
  /// step accounts. Throws Error when a socket cannot be made.
  ProgressMonitor(const std::string& dir, const std::vector<int>& ranks, int64_t steps_done = -1);

  /// The socket path of each local rank (the workers' MESHRUN_PROGRESS).
  std::vector<std::string> socket_paths() const;
  /// The sockets' descriptors (beats and reports), to poll alongside the workers' pipes.
  std::vector<int> fds() const;
  /// Reads every waiting beat. A malformed one is reported once per rank (it never stops the job).
  void drain(Clock::time_point now);
  /// Sends `request` to local rank `lr`'s hook, without waiting: 0, or the errno (EAGAIN: its queue is full).
  int ask_hook(size_t lr, const proto::HookRequest& request) const;
  /// Asks local rank `lr`'s hook to write its collective record to `path` (retrying a full queue for up to
  /// a second): "" when asked, else why not.
  std::string request_dump(size_t lr, const std::string& path);
  const CollectiveWatch& watch(size_t lr) const { return watches_[lr]; }
  const RankTracker& tracker(size_t lr) const { return trackers_[lr]; }
  size_t size() const { return trackers_.size(); }
  /// Local rank `lr`'s last beaten step, -1 before its first beat.
  int64_t last_step(size_t lr) const;
  /// Asks every hooked rank for its wall clock (its offset from this agent's; answers come with the beats).
  void ask_clocks() const;
  /// One entry per rank that has beaten, whose hook reported collectives, or that `marks` names late (none when
  /// neither). With `node_clock` (this node's clock minus the daemon's), answers to the arrival probe go along, on
  /// the daemon's clock.
  std::vector<proto::RankProgress> summaries(Clock::time_point now, const RankMarks& marks = {},
                                             std::optional<OffsetEstimate> node_clock = std::nullopt) const;
  /// How the node's first rank with step beats spent the attempt; for a script that beats no steps, as its
  /// collectives tell it (CollectiveAccountant); an empty account when neither.
  proto::StepAccount step_account(Clock::time_point now) const;
  /// The workers ended: the accounts stop at `now`.
  void close_accounts(Clock::time_point now);

 private:
  /// One datagram from local rank `lr`: a progress beat or a reporter's message.
  void take(size_t lr, const std::string& datagram, Clock::time_point now);
  /// Where local rank `lr`'s hook listens for the agent's requests.
  std::string hook_path(size_t lr) const;

  std::vector<BeatSocket> sockets_;         // the beats (<dir>/<lr>.sock, the workers' MESHRUN_PROGRESS)
  std::vector<BeatSocket> report_sockets_;  // the reporter's messages (<MESHRUN_PROGRESS>.fr)
  std::vector<RankTracker> trackers_;
  std::vector<StepAccountant> accountants_;
  std::vector<CollectiveAccountant> collective_accountants_;  // for ranks that beat no steps
  std::vector<CollectiveWatch> watches_;
  std::set<size_t> warned_bad_beat_;
};

}  // namespace meshrun::launcher
