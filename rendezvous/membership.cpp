#include "rendezvous/membership.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "common/error.hpp"

namespace meshrun::rendezvous {
namespace {

std::string describe(const proto::JoinRequest& r) { return fmt::format("{} (pid {})", r.host, r.pid); }
std::string identity(const proto::JoinRequest& r) { return fmt::format("{}/{}", r.host, r.pid); }

}  // namespace

const Membership::Run* Membership::find_run(const std::string& run_id) const {
  auto it = runs_.find(run_id);
  return it == runs_.end() ? nullptr : &it->second;
}

Membership::Run* Membership::find_run(const std::string& run_id) {
  auto it = runs_.find(run_id);
  return it == runs_.end() ? nullptr : &it->second;
}

Membership::Run& Membership::run_for_join(const proto::JoinRequest& r) {
  if (r.run_id.empty()) throw RemoteError("join without a run id: pass --rdzv-id");
  if (r.min_nodes < 1 || r.max_nodes < r.min_nodes) {
    throw RemoteError(
        fmt::format("invalid node range {}:{} from {}: need 1 <= min <= max", r.min_nodes, r.max_nodes, describe(r)));
  }
  if (r.local_world_size < 1) {
    throw RemoteError(fmt::format("{} joined with {} local workers: need at least 1", describe(r), r.local_world_size));
  }
  if (r.requested_rank >= r.max_nodes) {
    throw RemoteError(fmt::format("{} asks for node rank {}, out of range for --nnodes {}: use 0..{}", describe(r),
                                  r.requested_rank, r.max_nodes, r.max_nodes - 1));
  }
  auto it = runs_.find(r.run_id);
  if (it != runs_.end() && !it->second.fatal_error.empty() && it->second.nodes.empty()) {
    runs_.erase(it);  // a failed run that everyone left: a fresh job may reuse the id
    it = runs_.end();
  }
  if (it == runs_.end()) {
    Run run;
    run.id = r.run_id;
    run.min_nodes = r.min_nodes;
    run.max_nodes = r.max_nodes;
    run.last_event = "run created by " + describe(r);
    it = runs_.emplace(r.run_id, std::move(run)).first;
  }
  Run& run = it->second;
  if (run.min_nodes != r.min_nodes || run.max_nodes != r.max_nodes) {
    throw RemoteError(
        fmt::format("{} joined run '{}' with --nnodes {}:{}, but the run was started with {}:{}: use "
                    "the same --nnodes on every node",
                    describe(r), r.run_id, r.min_nodes, r.max_nodes, run.min_nodes, run.max_nodes));
  }
  if (!run.fatal_error.empty()) throw RemoteError("run '" + r.run_id + "' has failed: " + run.fatal_error);
  return run;
}

std::string Membership::join(const proto::JoinRequest& request) {
  Run& run = run_for_join(request);
  const auto now = clock_.now();
  // A node rank requested twice in the same round is a configuration error: name both hosts.
  if (request.requested_rank >= 0) {
    const auto& pool = run.closed ? run.waiting : run.participants;
    for (const auto& other_id : pool) {
      const Node& other = run.nodes.at(other_id);
      if (other.request.requested_rank == request.requested_rank) {
        const std::string dup =
            fmt::format("rank {}: {}, {}", request.requested_rank, describe(other.request), describe(request));
        if (std::find(run.duplicate_ranks.begin(), run.duplicate_ranks.end(), dup) == run.duplicate_ranks.end()) {
          run.duplicate_ranks.push_back(dup);
        }
        throw RemoteError(
            fmt::format("node rank {} is requested by both {} and {}: give every node its own --node-rank",
                        request.requested_rank, describe(other.request), describe(request)));
      }
    }
  }
  Node node;
  node.request = request;
  node.id = fmt::format("{}#{}", run.id, ++run.next_node);
  node.joined_at = now;
  node.last_seen = now;
  const std::string id = node.id;
  run.nodes.emplace(id, std::move(node));
  if (run.closed) {
    run.waiting.push_back(id);
    run.last_event = fmt::format("{} is waiting for the next round", describe(request));
  } else {
    run.participants.push_back(id);
    if (auto back = run.expected_back.find(identity(request)); back != run.expected_back.end()) {
      if (--back->second == 0) run.expected_back.erase(back);
    }
    run.survivor_seen[identity(request)] = now;
    run.last_event = fmt::format("{} joined round {}", describe(request), run.round);
    if (static_cast<int>(run.participants.size()) >= run.min_nodes) {
      run.last_call_deadline = now + from_seconds(request.last_call_timeout_s);
    }
    maybe_close(run);
  }
  return id;
}

void Membership::maybe_close(Run& run) {
  if (run.closed) return;
  const int count = static_cast<int>(run.participants.size());
  if (count >= run.max_nodes) return close_round(run);
  if (count < run.min_nodes) return;
  // Re-rendezvous after a restart: close as soon as every survivor is back.
  if (run.round > 0 && run.expected_back.empty()) return close_round(run);
  if (run.last_call_deadline && clock_.now() >= *run.last_call_deadline) close_round(run);
}

void Membership::close_round(Run& run) {
  const int n = static_cast<int>(run.participants.size());
  std::vector<Node*> nodes;
  for (const auto& id : run.participants) nodes.push_back(&run.nodes.at(id));
  // Requested ranks first (when in range), then the rest sorted by host for determinism.
  std::vector<bool> taken(static_cast<size_t>(n), false);
  std::vector<Node*> unranked;
  for (Node* node : nodes) {
    const int want = node->request.requested_rank;
    if (want >= 0 && want < n && !taken[static_cast<size_t>(want)]) {
      node->group_rank = want;
      taken[static_cast<size_t>(want)] = true;
    } else {
      unranked.push_back(node);
    }
  }
  std::stable_sort(unranked.begin(), unranked.end(), [](const Node* a, const Node* b) {
    return std::tie(a->request.host, a->request.pid) < std::tie(b->request.host, b->request.pid);
  });
  int next = 0;
  for (Node* node : unranked) {
    while (taken[static_cast<size_t>(next)]) ++next;
    node->group_rank = next;
    taken[static_cast<size_t>(next)] = true;
  }
  std::sort(nodes.begin(), nodes.end(), [](const Node* a, const Node* b) { return a->group_rank < b->group_rank; });
  run.assigned.clear();
  for (const Node* node : nodes) run.assigned.push_back(info(*node));
  run.closed = true;
  ++version_;
  run.expected_back.clear();
  run.last_call_deadline.reset();
  run.last_event = fmt::format("round {} closed with {} node(s)", run.round, n);
}

void Membership::invalidate(Run& run, const std::string& cause, const std::string& reason, std::string lost_node) {
  // Survivors of the closed round must re-join; late joiners carry over into the new round.
  std::map<std::string, int> survivors;
  const auto now = clock_.now();
  run.retired.clear();
  run.survivor_seen.clear();
  run.survivor_keep_alive.clear();
  for (const auto& id : run.participants) {
    const Node& node = run.nodes.at(id);
    if (id != lost_node && !node.finished) {
      const std::string who = identity(node.request);
      ++survivors[who];
      run.retired[id] = who;
      run.survivor_seen[who] = now;
      run.survivor_keep_alive[who] = node.request.keep_alive_timeout_s;
    }
    run.nodes.erase(id);
  }
  run.participants = run.waiting;
  run.waiting.clear();
  run.expected_back = survivors;
  run.closed = false;
  run.assigned.clear();
  run.last_call_deadline.reset();
  ++run.round;
  ++version_;
  run.last_event = reason;
  run.restart_cause = cause;
  run.restart_reason = reason;
  int alive = static_cast<int>(run.participants.size());
  for (const auto& [who, count] : survivors) alive += count;
  if (!lost_node.empty() && alive < run.min_nodes) {
    run.fatal_error = fmt::format("{}; {} node(s) remain, fewer than the minimum of {}", reason, alive, run.min_nodes);
    run.last_event = run.fatal_error;
  }
  if (static_cast<int>(run.participants.size()) >= run.min_nodes) {
    run.last_call_deadline = now;  // waiting nodes already had their last call
  }
}

void Membership::expire_survivors(Run& run) {
  // A survivor stops its workers (up to their shutdown grace) before it re-joins; one that has shown
  // no sign of life for its keep-alive timeout plus that grace is gone.
  constexpr double kStopGraceSeconds = 30;
  const auto now = clock_.now();
  std::vector<std::string> lost;
  for (const auto& [who, count] : run.expected_back) {
    const auto seen = run.survivor_seen.find(who);
    if (seen == run.survivor_seen.end()) continue;
    const double silent = to_seconds(now - seen->second);
    if (silent > run.survivor_keep_alive[who] + kStopGraceSeconds) lost.push_back(who);
  }
  if (lost.empty()) return;
  std::string names;
  for (const auto& who : lost) {
    names += (names.empty() ? "" : ", ") + who;
    run.expected_back.erase(who);
  }
  ++version_;
  run.last_event = "did not re-join after the restart: " + names;
  if (static_cast<int>(run.participants.size()) < run.min_nodes && run.expected_back.empty()) {
    run.fatal_error = fmt::format(
        "{} (host/pid) did not re-join round {} ({}); {} node(s) remain, fewer than the "
        "minimum of {}",
        names, run.round, run.restart_reason, run.participants.size(), run.min_nodes);
    run.last_event = run.fatal_error;
  }
}

void Membership::remove_node(Run& run, const std::string& node_id) {
  auto drop = [&](std::vector<std::string>& list) {
    list.erase(std::remove(list.begin(), list.end(), node_id), list.end());
  };
  drop(run.participants);
  drop(run.waiting);
  run.nodes.erase(node_id);
}

proto::NodeInfo Membership::info(const Node& node) const {
  proto::NodeInfo out;
  out.node_id = node.id;
  out.host = node.request.host;
  out.addr = node.request.addr;
  out.local_world_size = node.request.local_world_size;
  out.group_rank = node.group_rank;
  out.requested_rank = node.request.requested_rank;
  out.since_heartbeat_s = to_seconds(clock_.now() - node.last_seen);
  out.alive = node.awaiting || out.since_heartbeat_s <= node.request.keep_alive_timeout_s;
  out.pid = node.request.pid;
  return out;
}

std::vector<int> Membership::missing_ranks(const Run& run) const {
  if (run.closed) return {};
  std::set<int> requested;
  int unrequested = 0;
  for (const auto& id : run.participants) {
    const int want = run.nodes.at(id).request.requested_rank;
    if (want >= 0) {
      requested.insert(want);
    } else {
      ++unrequested;
    }
  }
  std::vector<int> missing;
  for (int rank = 0; rank < run.min_nodes; ++rank) {
    if (requested.count(rank)) continue;
    if (unrequested > 0) {
      --unrequested;  // an unranked joiner will take this slot
      continue;
    }
    missing.push_back(rank);
  }
  return missing;
}

bool Membership::settled(const std::string& run_id, const std::string& node_id) const {
  const Run* run = find_run(run_id);
  if (run == nullptr || !run->fatal_error.empty()) return true;
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end() || !it->second.error.empty()) return true;
  if (!run->closed) return false;
  return std::find(run->participants.begin(), run->participants.end(), node_id) != run->participants.end();
}

proto::AwaitReply Membership::poll(const std::string& run_id, const std::string& node_id) const {
  proto::AwaitReply reply;
  const Run* run = find_run(run_id);
  if (run == nullptr) {
    reply.status = "failed";
    reply.reason = "run '" + run_id + "' is not known to this daemon (it finished, failed, or the daemon restarted)";
    return reply;
  }
  reply.min_nodes = run->min_nodes;
  reply.max_nodes = run->max_nodes;
  if (!run->fatal_error.empty()) {
    reply.status = "failed";
    reply.reason = run->fatal_error;
    return reply;
  }
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end()) {
    reply.status = "failed";
    reply.reason = "node " + node_id + " is no longer part of run '" + run_id + "': " + run->last_event;
    return reply;
  }
  const Node& self = it->second;
  if (!self.error.empty()) {
    reply.status = "failed";
    reply.reason = self.error;
    return reply;
  }
  const bool participant =
      std::find(run->participants.begin(), run->participants.end(), node_id) != run->participants.end();
  if (run->closed && participant) {
    reply.status = "assigned";
    auto& a = reply.assignment;
    a.round = run->round;
    a.group_rank = self.group_rank;
    a.group_world_size = static_cast<int>(run->assigned.size());
    a.master_port = run->master_port;
    // The node list is informational; sending it to every node is O(n^2) bytes, so large rounds skip it.
    if (run->assigned.size() <= proto::kMaxNodesInAssignment) a.nodes = run->assigned;
    for (const auto& node : run->assigned) {
      a.world_size += node.local_world_size;
      if (node.group_rank < self.group_rank) a.rank_offset += node.local_world_size;
    }
    return reply;
  }
  reply.status = "waiting";
  for (const auto& id : run->participants) reply.joined.push_back(info(run->nodes.at(id)));
  reply.missing_ranks = missing_ranks(*run);
  reply.waited_s = to_seconds(clock_.now() - self.joined_at);
  reply.join_timeout_s = self.request.join_timeout_s;
  return reply;
}

void Membership::set_awaiting(const std::string& run_id, const std::string& node_id, bool awaiting) {
  Run* run = find_run(run_id);
  if (run == nullptr) return;
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end()) return;
  it->second.awaiting = awaiting;
  it->second.last_seen = clock_.now();
}

proto::HeartbeatReply Membership::heartbeat(const std::string& run_id, const std::string& node_id) {
  proto::HeartbeatReply reply;
  reply.action = "continue";
  Run* run = find_run(run_id);
  if (run == nullptr) {
    reply.action = "fail";
    reply.reason = "run '" + run_id + "' is not known to this daemon (did it restart?)";
    return reply;
  }
  reply.round = run->round;
  reply.waiting_nodes = static_cast<int>(run->waiting.size());
  if (!run->fatal_error.empty()) {
    reply.action = "fail";
    reply.reason = run->fatal_error;
    return reply;
  }
  auto it = run->nodes.find(node_id);
  const bool participant =
      std::find(run->participants.begin(), run->participants.end(), node_id) != run->participants.end();
  if (it == run->nodes.end() || !run->closed || !participant) {
    if (auto retired = run->retired.find(node_id); retired != run->retired.end()) {
      run->survivor_seen[retired->second] = clock_.now();  // alive, still stopping its workers
    }
    reply.action = "restart";
    reply.reason = run->restart_reason.empty() ? run->last_event : run->restart_reason;
    reply.cause = run->restart_cause;
    return reply;
  }
  it->second.last_seen = clock_.now();
  // Scale-up: a node is waiting and the round has room -> everyone re-rendezvouses to admit it.
  if (!run->waiting.empty() && static_cast<int>(run->participants.size()) < run->max_nodes) {
    const Node& newcomer = run->nodes.at(run->waiting.front());
    invalidate(*run, "scale_up",
               fmt::format("{} is waiting to join: re-rendezvous to admit it", describe(newcomer.request)));
    reply.action = "restart";
    reply.reason = run->restart_reason;
    reply.cause = run->restart_cause;
    reply.round = run->round;
  }
  return reply;
}

void Membership::report_failure(const std::string& run_id, const std::string& node_id, const std::string& reason) {
  Run* run = find_run(run_id);
  if (run == nullptr || !run->closed) return;
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end()) return;
  const bool participant =
      std::find(run->participants.begin(), run->participants.end(), node_id) != run->participants.end();
  if (!participant) return;  // already restarting
  invalidate(*run, "worker_failed",
             fmt::format("worker failure on node {} ({}): {}", it->second.group_rank, it->second.request.host, reason));
}

void Membership::leave(const std::string& run_id, const std::string& node_id, const std::string& reason, bool ok) {
  ++version_;
  Run* run = find_run(run_id);
  if (run == nullptr) return;
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end()) return;
  const bool participant =
      std::find(run->participants.begin(), run->participants.end(), node_id) != run->participants.end();
  const std::string who = describe(it->second.request);
  if (ok && run->closed && participant) {
    if (it->second.finished) return;
    it->second.finished = true;
    ++run->finished_nodes;
    run->last_event = fmt::format("{} finished", who);
    if (run->finished_nodes >= static_cast<int>(run->participants.size())) {
      finished_.push_back(run_id);
      runs_.erase(run_id);
    }
    return;
  }
  if (run->closed && participant) {
    invalidate(*run, "node_left", fmt::format("{} left: {}", who, reason), node_id);
    return;
  }
  remove_node(*run, node_id);
  if (run->nodes.empty() && run->participants.empty()) {
    finished_.push_back(run_id);
    runs_.erase(run_id);
  }
}

bool Membership::tick() {
  bool changed = false;
  const auto now = clock_.now();
  for (auto& [id, run] : runs_) {
    if (!run.fatal_error.empty()) continue;
    if (run.closed) {
      // Keep-alive expiry of a participant of the closed round.
      for (const auto& node_id : run.participants) {
        const Node& node = run.nodes.at(node_id);
        if (node.finished) continue;
        const double silent = to_seconds(now - node.last_seen);
        if (silent > node.request.keep_alive_timeout_s) {
          invalidate(run, "node_lost",
                     fmt::format("node {} on {} is dead: no heartbeat for {:.1f} s (keep-alive timeout {:.1f} s)",
                                 node.group_rank, describe(node.request), silent, node.request.keep_alive_timeout_s),
                     node_id);
          changed = true;
          break;
        }
      }
      continue;
    }
    // Open round: drop joiners that went silent, fail joiners past their join timeout.
    std::vector<std::string> gone;
    for (const auto& node_id : run.participants) {
      Node& node = run.nodes.at(node_id);
      if (!node.error.empty()) continue;
      if (!node.awaiting && to_seconds(now - node.last_seen) > node.request.keep_alive_timeout_s + 10.0) {
        gone.push_back(node_id);
      } else if (to_seconds(now - node.joined_at) > node.request.join_timeout_s) {
        std::string joined;
        for (const auto& other : run.participants) {
          const Node& o = run.nodes.at(other);
          joined += (joined.empty() ? "" : ", ") + describe(o.request);
        }
        std::string missing;
        for (int r : missing_ranks(run)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        node.error = fmt::format(
            "rendezvous '{}' timed out after {:.0f} s: {}/{} node(s) joined ({}); missing node rank(s): {}. Start the "
            "missing nodes, or lower --nnodes",
            run.id, node.request.join_timeout_s, run.participants.size(), run.min_nodes, joined,
            missing.empty() ? "none" : missing);
        ++version_;
        changed = true;
      }
    }
    for (const auto& node_id : gone) {
      remove_node(run, node_id);
      changed = true;
    }
    if (run.round > 0 && !run.expected_back.empty()) {
      const auto before = version_;
      expire_survivors(run);
      changed = changed || version_ != before;
      if (!run.fatal_error.empty()) continue;
    }
    const bool was_closed = run.closed;
    maybe_close(run);
    changed = changed || (run.closed != was_closed);
  }
  return changed;
}

std::vector<proto::RunStatus> Membership::status(const std::string& run_id) const {
  std::vector<proto::RunStatus> out;
  for (const auto& [id, run] : runs_) {
    if (!run_id.empty() && id != run_id) continue;
    proto::RunStatus s;
    s.run_id = id;
    s.round = run.round;
    s.state = !run.fatal_error.empty() ? "failed" : run.closed ? "closed" : "open";
    s.min_nodes = run.min_nodes;
    s.max_nodes = run.max_nodes;
    for (const auto& node_id : run.participants) s.nodes.push_back(info(run.nodes.at(node_id)));
    for (const auto& node_id : run.waiting) s.waiting.push_back(info(run.nodes.at(node_id)));
    s.missing_ranks = missing_ranks(run);
    s.duplicate_ranks = run.duplicate_ranks;
    s.last_event = run.last_event;
    s.master_port = run.master_port;
    out.push_back(std::move(s));
  }
  return out;
}

void Membership::set_master_port(const std::string& run_id, int port) {
  if (Run* run = find_run(run_id)) run->master_port = port;
}

int Membership::master_port(const std::string& run_id) const {
  const Run* run = find_run(run_id);
  return run == nullptr ? 0 : run->master_port;
}

std::vector<std::string> Membership::take_finished_runs() { return std::exchange(finished_, {}); }

}  // namespace meshrun::rendezvous
