// RendezvousBackend: what the agent needs from a rendezvous, whichever keeps its state.
//   NodeRendezvous (c10d, static)  meshrun's daemon, hosted by one agent or run on its own host
//   EtcdRendezvous (etcd-v3)       an etcd cluster; the agent of node rank 0 serves the workers' store
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/clock_offset.hpp"
#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher {

/// The run ended well while this node waited as a hot spare: nothing is left for it to do.
class RunFinished : public Error {
 public:
  using Error::Error;
};

class RendezvousBackend {
 public:
  virtual ~RendezvousBackend() = default;

  /// Joins the next round and waits for its assignment, saying what it waits for every few seconds.
  /// Returns nullopt when a terminating signal arrived (see interrupted_by()). Throws RemoteError
  /// (refused, or the run failed), TimeoutError (join timeout) and RunFinished (the run ended while this
  /// node waited as a spare).
  virtual std::optional<proto::Assignment> join() = 0;
  /// One keep-alive carrying this node's ranks' progress; the reply says whether to go on, restart or
  /// fail. Throws NetworkError/TimeoutError when the rendezvous does not answer in time.
  virtual proto::HeartbeatReply heartbeat(const std::vector<proto::RankProgress>& progress,
                                          const proto::AttemptMilestones& attempt) = 0;
  /// This node's clock minus the rendezvous's, measured from the heartbeats' round trips; nullopt until
  /// measured, or when the backend has no clock of its own to compare with (etcd).
  virtual std::optional<OffsetEstimate> clock_offset() const { return std::nullopt; }
  /// A worker failed or hung here: every node re-rendezvouses.
  virtual void report_failure(const std::string& reason, proto::RestartCause cause) = 0;
  /// Records a failed or hung worker at once, for the root cause across nodes; never throws. `attempt`
  /// carries the node's step account as the attempt ends (the goodput ledger's last word on it).
  virtual void record_failure(const proto::FailureReport& failure, const proto::AttemptMilestones& attempt) = 0;
  /// The reports of the latest failing round, earliest first (empty when unreachable).
  virtual std::vector<proto::FailureReport> failures() = 0;
  /// Leaves the run; `attempt`: this node's last milestones (its final step account). Returns the run's goodput
  /// ledger as the node leaves: the daemon's for the whole run; under etcd, the one this agent kept as its node
  /// saw the run (docs/daemon.md#the-goodput-ledger).
  virtual std::optional<proto::GoodputReport> leave(const std::string& reason, bool ok,
                                                    const proto::AttemptMilestones& attempt) = 0;
  /// After this node succeeded: returns once no other node needs this one any more (it serves their
  /// workers' store), or on a terminating signal.
  virtual void wait_for_other_nodes() = 0;
  /// After the run failed here: keeps serving long enough that the other nodes learn why.
  virtual void linger_for_others() = 0;

  /// Signal that interrupted a wait, or 0.
  virtual int interrupted_by() const = 0;
  virtual const std::string& run_id() const = 0;
  /// Where this node reaches the rendezvous (the first etcd member under etcd-v3).
  virtual const Endpoint& endpoint() const = 0;
  /// The rendezvous as the user named it: "host:port", or the etcd members "h1:2379,h2:2379"
  /// (MESHRUN_RDZV_ENDPOINT, and messages).
  virtual std::string endpoint_text() const = 0;
  virtual const std::string& hostname() const = 0;

  /// `hook` runs when join() learns that this node waits as a hot spare (once per wait); nullptr clears it.
  void on_spare(std::function<void()> hook) { spare_hook_ = std::move(hook); }

 protected:
  /// What a node evicted as slow says while it waits out its cool-down (either backend).
  static std::string cooling_down_line(double seconds_left) {
    return fmt::format(
        "evicted as a slow node: not taken back, not even as a spare, for {:.0f} s more (--slow-node-cooldown); "
        "waiting",
        seconds_left);
  }
  void became_spare() const {
    if (spare_hook_) spare_hook_();
  }

 private:
  std::function<void()> spare_hook_;
};

}  // namespace meshrun::launcher
