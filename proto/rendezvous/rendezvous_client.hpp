// RendezvousClient: the agent's side of the rendezvous (join, await ranks, heartbeat, report, leave),
// over one StoreClient connection. Blocking; every call has a deadline.
#pragma once

#include <optional>
#include <string>

#include "proto/rendezvous/rendezvous_messages.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::proto {

class RendezvousClient {
 public:
  explicit RendezvousClient(StoreClient client) : client_(std::move(client)) {}

  Hello hello();
  /// Proves this connection knows the join token and checks the daemon knows it too (proto/rendezvous/join_auth.hpp).
  /// An empty token checks only that the daemon requires none. Throws RemoteError naming the mismatch.
  void authenticate(const std::string& token);
  /// Registers this node for the run's next round; returns the daemon-assigned node id.
  std::string join(const JoinRequest& request);
  /// Blocks up to `timeout` for the round to close. "waiting" replies carry progress for the user.
  AwaitReply await(const std::string& run_id, const std::string& node_id, Duration timeout);
  /// Carries this node's ranks' progress (may be empty) and its clock reading (shown in status); `timeout`
  /// bounds the exchange (default: the connection's op timeout).
  HeartbeatReply heartbeat(const std::string& run_id, const std::string& node_id,
                           const std::vector<RankProgress>& progress = {},
                           std::optional<Duration> timeout = std::nullopt, const ClockReading& clock = {},
                           const AttemptMilestones& attempt = {});
  /// Reports a local worker failure (cause kWorkerFailed or kHung): the daemon opens a new round for every
  /// node of the run.
  void report_failure(const std::string& run_id, const std::string& node_id, const std::string& reason,
                      RestartCause cause = RestartCause::kWorkerFailed);
  /// Records a failed or hung worker for the root cause (proto::FailureReport); restarts nothing.
  void record_failure(const std::string& run_id, const std::string& node_id, const FailureReport& failure,
                      const AttemptMilestones& attempt = {});
  /// Leaves the run (ok=true: this node finished successfully).
  /// `attempt`: the node's last milestones (its final step account). Returns the run's goodput as the
  /// node leaves (nothing from a daemon that keeps no ledger).
  std::optional<GoodputReport> leave(const std::string& run_id, const std::string& node_id, const std::string& reason,
                                     bool ok, const AttemptMilestones& attempt = {});
  /// Status of one run, or of all runs when `run_id` is empty.
  StatusReply status(const std::string& run_id = "");

  StoreClient& store() { return client_; }

 private:
  StoreClient client_;
};

/// The hello query, encoded (a QueryType::kMeshrun request; its reply is a Hello), for a client that runs
/// its own socket (meshrun ping's probe).
std::string encode_hello_request();

}  // namespace meshrun::proto
