// Attempt: one round's workers and what watches them, from their spawn to the attempt's end. Agent::run()
// builds one per round; supervise() and its handlers work on it. It owns, in the order they start:
//   progress   the workers' beats and collective reports, hang suspicion (progress/)
//   group      the workers themselves (workers/), spawned from the spec the agent gives for `progress`
//   exchange   the hang inquiries with the other nodes through the workers' store (hang/)
//   clock      the attempt's milestones: spawned, initialized, loaded, first step (progress/)
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/hang/hang_exchange.hpp"
#include "launcher/progress/attempt_clock.hpp"
#include "launcher/progress/progress_monitor.hpp"
#include "launcher/rdzv/heartbeat_keeper.hpp"
#include "launcher/workers/worker_group.hpp"
#include "proto/rendezvous_messages.hpp"

namespace meshrun::launcher {

class RendezvousBackend;

struct Attempt {
  /// What the workers of an attempt are, given its progress monitor (their progress sockets).
  using SpecFor = std::function<GroupSpec(const ProgressMonitor&)>;

  /// Spawns the workers of `assignment` on this node (`nproc_per_node` of them) as `spec_for` describes.
  /// `beat_every` > 0: heartbeats go on while they spawn (a standby still importing is waited for).
  /// Throws SpawnError when they cannot start.
  Attempt(const proto::Assignment& assignment, RendezvousBackend& rdzv, const std::string& progress_dir,
          int nproc_per_node, const HangPolicy& policy, const SpecFor& spec_for, std::chrono::milliseconds beat_every);
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  int64_t round() const { return assignment.round; }
  /// This node's step account now, as milestones of this attempt (sent with a failure report).
  proto::AttemptMilestones account_now() const;

  const proto::Assignment assignment;
  RendezvousBackend& rdzv;
  ProgressMonitor progress;

 private:
  /// Starts the heartbeats that go on while the group spawns (every > 0); returns `spec`.
  GroupSpec beating_while_spawning(GroupSpec spec, std::chrono::milliseconds every);

  std::optional<HeartbeatKeeper> spawning_;  // beats while the group spawns; gone once it has

 public:
  WorkerGroup group;
  HangExchange exchange;
  AttemptClock clock;
};

}  // namespace meshrun::launcher
