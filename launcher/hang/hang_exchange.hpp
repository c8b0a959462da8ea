// HangExchange: how the agents of one attempt agree on a hang, through the workers' own store (the
// daemon's run port, or node rank 0's store under etcd): the first agent that suspects a hang raises a
// request; every agent sees it (poll, once a second), posts its ranks' records and then their stacks;
// each reads every node's post. An inquiry whose verdict is "late" (every rank waited for is busy) leaves
// the job running; every node then moves to the next inquiry number, so a later suspicion starts afresh.
// Keys (each attempt's store is fresh, and the round keeps them apart anyway):
//   meshrun/hang/<round>/<inquiry>/request          the first suspicion (proto::HangRequest, JSON)
//   meshrun/hang/<round>/<inquiry>/records/<node>   that node's RankRecords (JSON)
//   meshrun/hang/<round>/<inquiry>/stacks/<node>    that node's ranks' stacks (JSON: [{rank, tool, text}])
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/endpoint.hpp"
#include "proto/agents/hang_request.hpp"
#include "proto/store/store_board.hpp"

namespace meshrun::launcher {

class HangExchange {
 public:
  using Clock = std::chrono::steady_clock;
  /// How often an agent looks for another node's request.
  static constexpr std::chrono::milliseconds kPollEvery{1000};

  /// `store` is the attempt's MASTER_ADDR:MASTER_PORT; nothing connects until first used.
  HangExchange(Endpoint store, int64_t round, int node, int nodes);

  /// Raises `request` unless another node raised one first in this inquiry; returns the one that stands,
  /// which every node then uses.
  proto::HangRequest request(const proto::HangRequest& request);
  /// Another node's request in this inquiry, if one stands (rate-limited to kPollEvery; never throws: a
  /// store that cannot be reached is logged once and reads as no request).
  std::optional<proto::HangRequest> poll(Clock::time_point now);
  /// The inquiry ended without stopping the job (a late rank): the next suspicion is a new inquiry.
  void next_inquiry() { ++inquiry_; }
  int inquiry() const { return inquiry_; }
  /// This node's group rank.
  int node() const { return node_; }
  /// Posts this node's part under `kind` ("records" or "stacks").
  void post(const std::string& kind, const nlohmann::json& part);
  /// Every node's part of `kind` that arrived before `deadline` (node -> part); this node's included.
  std::map<int, nlohmann::json> gather(const std::string& kind, Clock::time_point deadline);

 private:
  std::string key(const std::string& part) const;

  proto::StoreBoard board_;
  int64_t round_;
  int inquiry_ = 0;
  int node_;
  int nodes_;
  Clock::time_point next_poll_{};
};

}  // namespace meshrun::launcher
