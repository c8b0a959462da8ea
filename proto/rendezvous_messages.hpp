// The rendezvous vocabulary carried in MESHRUN (0x40) requests. Each request is a JSON object with an
// "op" member; each response is a JSON object, or {"error": "..."} when the daemon refuses the request.
//
//   hello      {}                                  -> Hello
//   join       JoinRequest                         -> {"node_id", "round"}     (returns at once)
//   await      {run_id, node_id, timeout_s}        -> AwaitReply: waiting | assigned | failed
//   heartbeat  {run_id, node_id}                   -> HeartbeatReply
//   fail       {run_id, node_id, reason}           -> {}  (a worker failed: every node re-rendezvouses)
//   leave      {run_id, node_id, reason, ok}       -> {}
//   status     {run_id?}                           -> StatusReply
//
// Round life cycle, per run:  OPEN --(max joined, or min joined + last call)--> CLOSED (ranks assigned)
//   CLOSED --(node dead / failure reported / late joiner waiting and room left)--> OPEN with round+1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshrun::proto {

inline constexpr const char* kServerName = "meshrun-rendezvous";
/// Assignment::nodes lists every node only for rounds up to this size (status has the full list).
inline constexpr size_t kMaxNodesInAssignment = 32;

struct Hello {
  std::string server;        // kServerName
  std::string version;       // meshrun version
  int64_t unix_time_ms = 0;  // daemon's wall clock, for skew checks
  std::string peer;          // how the daemon sees the caller ("ip:port")
};

struct JoinRequest {
  std::string run_id;
  std::string host;          // host name, for messages
  std::string addr;          // address other nodes can reach this node at
  int local_world_size = 1;  // workers on this node
  int min_nodes = 1;
  int max_nodes = 1;
  int requested_rank = -1;          // --node-rank, or -1
  double last_call_timeout_s = 30;  // wait for stragglers after min_nodes joined
  double join_timeout_s = 600;      // give up joining after this
  double keep_alive_timeout_s = 3;  // declared dead after this long without a heartbeat
  int64_t pid = 0;
};

struct NodeInfo {
  std::string node_id;
  std::string host;
  std::string addr;
  int local_world_size = 0;
  int group_rank = -1;  // -1 until assigned
  int requested_rank = -1;
  double since_heartbeat_s = 0;
  bool alive = true;
  int64_t pid = 0;
};

/// What an agent learns when its round closes.
struct Assignment {
  int64_t round = 0;
  int group_rank = 0;
  int group_world_size = 0;
  int world_size = 0;           // sum of local_world_size over the round
  int rank_offset = 0;          // global rank of this node's local rank 0
  std::string master_addr;      // workers' TCPStore host: the daemon's host as the agent reaches it
  int master_port = 0;          // a store port private to this run (isolated key space)
  std::vector<NodeInfo> nodes;  // every node, in group-rank order (empty above kMaxNodesInAssignment)
};

struct AwaitReply {
  std::string status;  // "waiting", "assigned" or "failed"
  // waiting:
  std::vector<NodeInfo> joined;
  int min_nodes = 0;
  int max_nodes = 0;
  std::vector<int> missing_ranks;  // requested ranks < min_nodes not yet seen
  double waited_s = 0;
  double join_timeout_s = 0;
  // assigned:
  Assignment assignment;
  // failed: why (named "reason", not "error": an "error" member marks a refused request)
  std::string reason;
};

struct HeartbeatReply {
  int64_t round = 0;
  std::string action;  // "continue", "restart" or "fail"
  std::string reason;  // why a restart is needed (the event that opened the current round)
  std::string cause;   // restart cause: "node_lost", "worker_failed", "node_left", "scale_up"
  int waiting_nodes = 0;
};

struct RunStatus {
  std::string run_id;
  int64_t round = 0;
  std::string state;  // "open", "closed", "finished", "failed"
  int min_nodes = 0;
  int max_nodes = 0;
  std::vector<NodeInfo> nodes;
  std::vector<NodeInfo> waiting;
  std::vector<int> missing_ranks;
  std::vector<std::string> duplicate_ranks;  // "rank 1: host-a, host-b"
  std::string last_event;
  int master_port = 0;
  int64_t keys = 0;
};

struct StatusReply {
  std::string server;
  std::string version;
  double uptime_s = 0;
  int64_t keys = 0;  // keys in the shared (main port) store
  int connections = 0;
  std::vector<RunStatus> runs;
};

// JSON mapping: member names are the JSON keys; missing keys keep their defaults (older peers).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Hello, server, version, unix_time_ms, peer)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JoinRequest, run_id, host, addr, local_world_size, min_nodes, max_nodes,
                                                requested_rank, last_call_timeout_s, join_timeout_s,
                                                keep_alive_timeout_s, pid)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeInfo, node_id, host, addr, local_world_size, group_rank,
                                                requested_rank, since_heartbeat_s, alive, pid)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Assignment, round, group_rank, group_world_size, world_size,
                                                rank_offset, master_addr, master_port, nodes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AwaitReply, status, joined, min_nodes, max_nodes, missing_ranks,
                                                waited_s, join_timeout_s, assignment, reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(HeartbeatReply, round, action, reason, cause, waiting_nodes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunStatus, run_id, round, state, min_nodes, max_nodes, nodes, waiting,
                                                missing_ranks, duplicate_ranks, last_event, master_port, keys)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(StatusReply, server, version, uptime_s, keys, connections, runs)

}  // namespace meshrun::proto
