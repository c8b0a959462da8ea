#include "rendezvous/membership.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "common/error.hpp"
#include "proto/rendezvous/goodput.hpp"
#include "proto/rendezvous/join_auth.hpp"
#include "proto/rules/group_ranks.hpp"
#include "proto/rules/round_policy.hpp"
#include "rendezvous/straggler.hpp"

namespace meshrun::rendezvous {
namespace {

using proto::AwaitStatus;
using proto::HeartbeatAction;
using proto::RestartCause;

// A joiner of an open round is alive while it is blocked in an await. Between two awaits (a round trip,
// a progress line, a reconnect) it gets this much beyond its keep-alive timeout before it is dropped.
constexpr double kJoinerGapGraceSeconds = 10.0;
// A survivor of an invalidated round stops its workers before it re-joins; that takes up to the
// launcher's SIGTERM -> SIGKILL grace (--shutdown-timeout, 30 s by default), on top of its keep-alive.
// Only a survivor heard from since the restart gets it: one silent since before it is dead (a node
// killed with its workers makes the others' workers fail first; its silence is counted from its last
// heartbeat, so the next round does not wait for it).
constexpr double kSurvivorStopGraceSeconds = 30.0;
// Runs remembered after they ended well, so a hot spare still waiting learns that instead of "not known".
constexpr size_t kCompletedKept = 256;
// What one client may make the daemon hold: its runs, and the times it keeps a node, a round open or a join
// waiting. Far above any real job's, so that a client that asks for more is refused, not served for ever.
constexpr size_t kMaxRuns = 10000;
constexpr double kMaxKeepAliveSeconds = 3600;      // a node silent this long is gone
constexpr double kMaxLastCallSeconds = 24 * 3600;  // a round's wait for stragglers
constexpr double kMaxJoinSeconds = 7 * 24 * 3600;  // a node's wait to be admitted

std::string describe(const proto::JoinRequest& r) { return fmt::format("{} (pid {})", r.host, r.pid); }

void check_timeout(const proto::JoinRequest& r, const char* name, double value, double most) {
  if (!(value >= 0 && value <= most)) {
    throw RemoteError(
        fmt::format("{} asks for {} {} s: this daemon allows 0 to {} s (--rdzv-conf)", describe(r), name, value, most));
  }
}

/// The survivor key: what stays the same when an agent re-joins under a new node id.
std::string identity(const proto::JoinRequest& r) { return fmt::format("{}/{}", r.host, r.pid); }

proto::AwaitReply failed(proto::AwaitReply reply, std::string reason) {
  reply.status = AwaitStatus::kFailed;
  reply.reason = std::move(reason);
  return reply;
}

proto::HeartbeatReply fail(proto::HeartbeatReply reply, std::string reason) {
  reply.action = HeartbeatAction::kFail;
  reply.reason = std::move(reason);
  return reply;
}

}  // namespace

bool Membership::Run::has_participant(const std::string& node_id) const {
  const auto it = nodes.find(node_id);
  return it != nodes.end() && it->second.participant;
}

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
  check_timeout(r, "keep_alive timeout", r.keep_alive_timeout_s, kMaxKeepAliveSeconds);
  check_timeout(r, "last_call_timeout", r.last_call_timeout_s, kMaxLastCallSeconds);
  check_timeout(r, "join_timeout", r.join_timeout_s, kMaxJoinSeconds);
  auto it = runs_.find(r.run_id);
  if (it != runs_.end() && !it->second.fatal_error.empty() && it->second.nodes.empty()) {
    runs_.erase(it);  // a failed run that everyone left: a fresh job may reuse the id
    it = runs_.end();
  }
  if (it == runs_.end()) {
    if (runs_.size() >= kMaxRuns) {
      throw RemoteError(
          fmt::format("{} cannot start run '{}': this daemon holds {} runs, its most; finish some, or "
                      "run this job on another daemon",
                      describe(r), r.run_id, runs_.size()));
    }
    Run run;
    run.id = r.run_id;
    run.secret = proto::make_run_secret();
    run.min_nodes = r.min_nodes;
    run.max_nodes = r.max_nodes;
    run.last_event = "run created by " + describe(r);
    run.telemetry = RunTelemetry(clock_.now());
    it = runs_.emplace(r.run_id, std::move(run)).first;
    std::erase(completed_, r.run_id);  // the id is a live run again: its spares are not told it finished
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

// A node rank requested twice in the same round is a configuration error: name both hosts.
void Membership::check_duplicate_rank(Run& run, const proto::JoinRequest& request) {
  if (request.requested_rank < 0) return;
  const auto& pool = run.closed ? run.waiting : run.participants;
  for (const auto& other_id : pool) {
    const Node& other = run.nodes.at(other_id);
    if (other.request.requested_rank != request.requested_rank) continue;
    const std::string dup =
        fmt::format("rank {}: {}, {}", request.requested_rank, describe(other.request), describe(request));
    if (std::find(run.duplicate_ranks.begin(), run.duplicate_ranks.end(), dup) == run.duplicate_ranks.end()) {
      run.duplicate_ranks.push_back(dup);
    }
    throw RemoteError(fmt::format("node rank {} is requested by both {} and {}: give every node its own --node-rank",
                                  request.requested_rank, describe(other.request), describe(request)));
  }
}

int Membership::survivor_returned(Run& run, const proto::JoinRequest& request) {
  auto it = run.survivors.find(identity(request));
  if (it == run.survivors.end()) return -1;
  it->second.last_seen = clock_.now();
  it->second.heard_since_restart = true;
  run.telemetry.survivor_back(clock_.now());
  const int previous_rank = it->second.rejoins_expected == 1 ? it->second.previous_rank : -1;
  if (--it->second.rejoins_expected == 0) run.survivors.erase(it);
  return previous_rank;
}

std::string Membership::join(const proto::JoinRequest& request) {
  Run& run = run_for_join(request);
  const auto now = clock_.now();
  check_duplicate_rank(run, request);
  Node node;
  node.request = request;
  node.id = fmt::format("{}#{}", run.id, ++run.next_node);
  node.joined_at = now;
  node.last_seen = now;
  const std::string id = node.id;
  run.nodes.emplace(id, std::move(node));
  const double cooldown = run.slow_nodes.cooldown_left(identity(request), now);
  if (run.closed || identity(request) == run.evicted || cooldown > 0) {
    run.waiting.push_back(id);
    run.last_event = fmt::format("{} is waiting for the next round{}", describe(request),
                                 cooldown > 0 ? fmt::format(" (evicted as slow: not a spare for {:.0f} s)", cooldown)
                                 : run.closed ? ""
                                              : " (evicted: a spare took its place)");
  } else {
    run.participants.push_back(id);
    run.nodes.at(id).participant = true;
    run.nodes.at(id).previous_rank = survivor_returned(run, request);
    run.last_event = fmt::format("{} joined round {}", describe(request), run.round);
    if (static_cast<int>(run.participants.size()) >= run.min_nodes) {
      run.last_call_deadline = now + from_seconds(request.last_call_timeout_s);
    }
    maybe_close(run);
  }
  return id;
}

// The round policy is shared with the etcd backend (proto/rules/round_policy.hpp); this feeds it the daemon's view.
void Membership::maybe_close(Run& run) {
  if (run.closed) return;
  proto::OpenRound round;
  round.joined = static_cast<int>(run.participants.size());
  round.min_nodes = run.min_nodes;
  round.max_nodes = run.max_nodes;
  round.restart = run.round > 0;
  round.survivors_out = static_cast<int>(run.survivors.size());
  // Due: a survivor that may be alive (heard since the restart, or still connected and within its keep-alive:
  // its workers may not have failed yet), not a gone one (connection closed, or silent: a spare replaces it).
  const auto now = clock_.now();
  round.survivors_due =
      static_cast<int>(std::count_if(run.survivors.begin(), run.survivors.end(), [now](const auto& s) {
        const Survivor& survivor = s.second;
        return survivor.heard_since_restart ||
               (!survivor.disconnected && to_seconds(now - survivor.last_seen) <= survivor.keep_alive_timeout_s);
      }));
  round.last_call_passed = run.last_call_deadline && now >= *run.last_call_deadline;
  // Scanned only when it can matter (past the last call, a survivor due): a 10k-node re-join calls this on
  // every join.
  round.newcomer_joined = round.last_call_passed && round.survivors_due > 0 &&
                          std::any_of(run.participants.begin(), run.participants.end(),
                                      [&run](const auto& id) { return run.nodes.at(id).previous_rank < 0; });
  if (proto::round_closes(round)) close_round(run);
}

void Membership::trim_to_max(Run& run) {
  if (static_cast<int>(run.participants.size()) <= run.max_nodes) return;
  std::vector<bool> survivor;
  for (const auto& id : run.participants) survivor.push_back(run.nodes.at(id).previous_rank >= 0);
  std::vector<bool> has_seat(run.participants.size(), false);
  for (size_t i : proto::seated(survivor, run.max_nodes)) has_seat[i] = true;
  std::vector<std::string> seated;
  std::vector<std::string> spares;
  for (size_t i = 0; i < run.participants.size(); ++i) {
    (has_seat[i] ? seated : spares).push_back(run.participants[i]);
    run.nodes.at(run.participants[i]).participant = has_seat[i];
  }
  run.participants = std::move(seated);
  run.waiting.insert(run.waiting.begin(), spares.begin(), spares.end());
}

void Membership::close_round(Run& run) {
  trim_to_max(run);
  const int n = static_cast<int>(run.participants.size());
  std::vector<Node*> nodes;
  for (const auto& id : run.participants) nodes.push_back(&run.nodes.at(id));
  std::vector<proto::RankRequest> requests;
  for (const Node* node : nodes) {
    requests.push_back({.requested_rank = node->request.requested_rank,
                        .previous_rank = node->previous_rank,
                        .host = node->request.host,
                        .pid = node->request.pid});
  }
  const std::vector<int> ranks = proto::assign_group_ranks(requests);
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i]->group_rank = ranks[i];
  std::sort(nodes.begin(), nodes.end(), [](const Node* a, const Node* b) { return a->group_rank < b->group_rank; });
  run.assigned.clear();
  run.world_size = 0;
  for (Node* node : nodes) {
    node->rank_offset = run.world_size;  // once here, not per await: 10k awaits must not cost 10k^2
    run.world_size += node->request.local_world_size;
    run.assigned.push_back(info(*node));
  }
  run.closed = true;
  ++version_;
  run.survivors.clear();
  run.last_call_deadline.reset();
  run.evicted.clear();
  run.last_event = fmt::format("round {} closed with {} node(s)", run.round, n);
  const std::string replaced = run.round > 0 ? replacements(run) : "";
  if (!replaced.empty()) run.last_event += "; " + replaced;
  run.telemetry.round_closed(run.round, run.participants, replaced, clock_.now());
  run.slow_nodes.round_closed(clock_.now());
}

void Membership::invalidate(Run& run, RestartCause cause, const std::string& reason, std::string lost_node) {
  // Survivors of the closed round must re-join; late joiners carry over into the new round.
  const auto now = clock_.now();
  const auto lost = run.nodes.find(lost_node);
  const TimePoint lost_seen = lost != run.nodes.end() ? lost->second.last_seen : now;  // it died after that
  run.retired.clear();
  run.survivors.clear();
  for (const auto& id : run.participants) {
    const Node& node = run.nodes.at(id);
    if (id != lost_node && !node.finished) {
      const std::string who = identity(node.request);
      Survivor& survivor = run.survivors[who];
      ++survivor.rejoins_expected;
      survivor.last_seen = node.last_seen;
      survivor.keep_alive_timeout_s = node.request.keep_alive_timeout_s;
      survivor.previous_rank = node.group_rank;
      survivor.disconnected = node.disconnected;
      // A node that reported its own workers' failure in this round is alive (stopping them): the next
      // round waits for it, as for one heard from after the restart, before spares fill its place.
      const auto& reports = run.failures.reports();
      survivor.heard_since_restart = std::any_of(
          reports.begin(), reports.end(), [&](const auto& r) { return r.node_id == id && r.round == run.round; });
      run.retired[id] = who;
    }
    run.nodes.erase(id);
  }
  run.participants = ready_waiting(run);  // a node cooling down after its eviction waits on
  for (const auto& id : run.participants) run.nodes.at(id).participant = true;
  std::erase_if(run.waiting, [&run](const auto& id) { return run.nodes.at(id).participant; });
  run.closed = false;
  run.assigned.clear();
  run.last_call_deadline.reset();
  ++run.round;
  ++version_;
  run.last_event = reason;
  run.restart_cause = cause;
  run.restart_reason = reason;
  run.telemetry.restarted(run.round, cause, reason, lost_seen, now);
  run.slow_nodes.restarted();
  int alive = static_cast<int>(run.participants.size());
  for (const auto& [who, survivor] : run.survivors) alive += survivor.rejoins_expected;
  if (const auto too_few = proto::too_few_nodes(reason, alive, run.min_nodes); too_few && !lost_node.empty()) {
    run.fatal_error = *too_few;
    run.last_event = run.fatal_error;
  }
  if (static_cast<int>(run.participants.size()) >= run.min_nodes) {
    run.last_call_deadline = now;  // waiting nodes already had their last call
  }
}

void Membership::expire_survivors(Run& run) {
  // A survivor that has shown no sign of life for its keep-alive timeout plus the stop grace is gone.
  const auto now = clock_.now();
  std::vector<std::string> lost;
  for (const auto& [who, survivor] : run.survivors) {
    const double silent = to_seconds(now - survivor.last_seen);
    const double grace = survivor.heard_since_restart ? kSurvivorStopGraceSeconds : 0.0;
    if (silent > survivor.keep_alive_timeout_s + grace) lost.push_back(who);
  }
  if (lost.empty()) return;
  std::string names;
  for (const auto& who : lost) {
    names += (names.empty() ? "" : ", ") + who;
    run.survivors.erase(who);
  }
  ++version_;
  run.last_event = "did not re-join after the restart: " + names;
  if (static_cast<int>(run.participants.size()) < run.min_nodes && run.survivors.empty()) {
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
  return run->closed && run->has_participant(node_id);
}

proto::AwaitReply Membership::poll(const std::string& run_id, const std::string& node_id) const {
  proto::AwaitReply reply;
  const Run* run = find_run(run_id);
  if (run == nullptr) {
    if (std::find(completed_.begin(), completed_.end(), run_id) != completed_.end()) {
      reply.status = AwaitStatus::kFinished;
      reply.reason = "run '" + run_id + "' finished";
      return reply;
    }
    return failed(reply,
                  "run '" + run_id + "' is not known to this daemon (it finished, failed, or the daemon restarted)");
  }
  reply.min_nodes = run->min_nodes;
  reply.max_nodes = run->max_nodes;
  if (!run->fatal_error.empty()) return failed(reply, run->fatal_error);
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end()) {
    return failed(reply, "node " + node_id + " is no longer part of run '" + run_id + "': " + run->last_event);
  }
  const Node& self = it->second;
  if (!self.error.empty()) return failed(reply, self.error);
  if (run->closed && run->has_participant(node_id)) {
    reply.status = AwaitStatus::kAssigned;
    reply.assignment = assignment(*run, self);
    return reply;
  }
  reply.status = AwaitStatus::kWaiting;
  reply.cooldown_s = run->slow_nodes.cooldown_left(identity(self.request), clock_.now());
  reply.spare = run->closed && static_cast<int>(run->participants.size()) >= run->max_nodes && reply.cooldown_s <= 0;
  for (const auto& id : run->participants) reply.joined.push_back(info(run->nodes.at(id)));
  reply.missing_ranks = missing_ranks(*run);
  reply.waited_s = to_seconds(clock_.now() - self.joined_at);
  reply.join_timeout_s = self.request.join_timeout_s;
  return reply;
}

proto::Assignment Membership::assignment(const Run& run, const Node& node) const {
  proto::Assignment a;
  a.round = run.round;
  a.group_rank = node.group_rank;
  a.group_world_size = static_cast<int>(run.assigned.size());
  a.master_port = run.master_port;
  // The node list is informational; sending it to every node is O(n^2) bytes, so large rounds skip it.
  if (run.assigned.size() <= proto::kMaxNodesInAssignment) a.nodes = run.assigned;
  a.world_size = run.world_size;
  a.rank_offset = node.rank_offset;
  a.steps_done = run.telemetry.steps_done();
  a.run_secret = run.secret;
  return a;
}

void Membership::set_awaiting(const std::string& run_id, const std::string& node_id, bool awaiting) {
  Run* run = find_run(run_id);
  if (run == nullptr) return;
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end()) return;
  it->second.awaiting = awaiting;
  it->second.last_seen = clock_.now();
}

void Membership::connection_closed(const std::string& run_id, const std::string& node_id) {
  Run* run = find_run(run_id);
  if (run == nullptr) return;
  if (auto it = run->nodes.find(node_id); it != run->nodes.end()) {
    it->second.disconnected = true;
  } else if (const auto retired = run->retired.find(node_id); retired != run->retired.end()) {
    if (auto survivor = run->survivors.find(retired->second); survivor != run->survivors.end())
      survivor->second.disconnected = true;
  }
  ++version_;
  maybe_close(*run);  // a round that waited for it as a survivor
}

proto::HeartbeatReply Membership::heartbeat(const std::string& run_id, const std::string& node_id,
                                            std::vector<proto::RankProgress> progress, proto::ClockReading clock,
                                            const proto::AttemptMilestones& attempt) {
  proto::HeartbeatReply reply;  // continue
  Run* run = find_run(run_id);
  if (run == nullptr) return fail(reply, "run '" + run_id + "' is not known to this daemon (did it restart?)");
  reply.round = run->round;
  reply.waiting_nodes = static_cast<int>(run->waiting.size());
  if (!run->fatal_error.empty()) return fail(reply, run->fatal_error);
  auto it = run->nodes.find(node_id);
  const bool in_closed_round = it != run->nodes.end() && run->closed && run->has_participant(node_id);
  if (in_closed_round) {
    it->second.last_seen = clock_.now();
    if (auto event = run->telemetry.milestones(run->round, node_id, attempt, clock_.now(), true)) {
      run->last_event = std::move(*event);
    }
    if (const proto::RestartRecord* recovered = run->telemetry.recovered()) {
      reply.recovered_round = recovered->round;
      reply.recovery = recovered->recovery;
    }
    it->second.progress = std::move(progress);
    it->second.clock = clock;
    std::set<int> fresh;
    for (const auto& p : it->second.progress) fresh.insert(p.rank);
    auto ranks = hosted_ranks(*run);
    run->telemetry.progress(ranks, fresh, run->world_size, straggler_threshold(*run), clock_.now());
    const auto ready = ready_waiting(*run);
    auto slow = stragglers(*run);
    if (replace_slow_node(*run, slow)) {
      // the round is invalidated: the restart below
    } else if (ready.empty() || static_cast<int>(run->participants.size()) >= run->max_nodes) {
      reply.stragglers = std::move(slow);
      reply.arrival_probe = run->telemetry.arrival_probe();
      reply.slow_nodes = run->slow_nodes.note();
      return reply;
    } else {  // scale-up: a node is waiting and the round has room -> everyone re-rendezvouses to admit it
      invalidate(*run, RestartCause::kScaleUp,
                 fmt::format("{} is waiting to join: re-rendezvous to admit it",
                             describe(run->nodes.at(ready.front()).request)));
    }
  } else {
    heard_from_survivor(*run, node_id);
  }
  reply.action = HeartbeatAction::kRestart;
  reply.reason = run->restart_reason.empty() ? run->last_event : run->restart_reason;
  reply.cause = run->restart_cause;
  reply.round = run->round;
  return reply;
}

void Membership::heard_from_survivor(Run& run, const std::string& node_id) {
  // A node of the last round, alive and still stopping its workers: the next round waits for it, and its
  // re-join window restarts.
  const auto retired = run.retired.find(node_id);
  if (retired == run.retired.end()) return;
  if (auto survivor = run.survivors.find(retired->second); survivor != run.survivors.end()) {
    survivor->second.last_seen = clock_.now();
    survivor->second.heard_since_restart = true;
  }
}

void Membership::record_failure(const std::string& run_id, const std::string& node_id, proto::FailureReport failure,
                                int64_t now_unix_ms, const proto::AttemptMilestones& attempt) {
  Run* run = find_run(run_id);
  if (run == nullptr) return;
  if (run->nodes.count(node_id) == 0) {
    // A node of the last round whose own workers failed after the restart began: alive, and its report
    // belongs to the root cause of the round it names.
    if (run->retired.count(node_id) == 0) return;
    heard_from_survivor(*run, node_id);
  }
  failure.node_id = node_id;
  if (run->closed) {
    run->telemetry.milestones(run->round, node_id, attempt, clock_.now(), false);
    run->telemetry.fault(clock_.now() - std::chrono::milliseconds(std::max<int64_t>(0, now_unix_ms - failure.unix_ms)),
                         clock_.now());
  }
  if (failure.cause == RestartCause::kHung) run->telemetry.hang(failure.hang_kind);
  if (failure.cause == RestartCause::kHung && failure.step >= 0) {
    if (auto culprit = hung_elsewhere(*run, node_id, failure, now_unix_ms)) run->failures.record(std::move(*culprit));
  }
  run->failures.record(std::move(failure));
}

std::optional<proto::FailureReport> Membership::hung_elsewhere(const Run& run, const std::string& reporter,
                                                               const proto::FailureReport& hang,
                                                               int64_t now_unix_ms) const {
  struct Candidate {
    const Node* node = nullptr;
    size_t local_rank = 0;
    double silence = 0;  // seconds since its last beat
  };
  std::optional<Candidate> best;
  for (const auto& id : run.participants) {
    if (id == reporter) continue;
    const Node& node = run.nodes.at(id);
    const double since_heartbeat = to_seconds(clock_.now() - node.last_seen);
    for (size_t lr = 0; lr < node.progress.size(); ++lr) {
      const proto::RankProgress& p = node.progress[lr];
      const Candidate c{&node, lr, since_heartbeat + p.since_beat_s};
      if (p.phase.empty() || p.step >= hang.step) continue;  // no beats: its step says nothing
      const proto::RankProgress* b = best ? &best->node->progress[best->local_rank] : nullptr;
      if (!b || p.step < b->step || (p.step == b->step && c.silence > best->silence)) best = c;
    }
  }
  if (!best) return std::nullopt;
  const proto::RankProgress& p = best->node->progress[best->local_rank];
  for (const auto& r : run.failures.reports()) {
    if (r.round == hang.round && r.rank == p.rank) return std::nullopt;  // its own agent reported it
  }
  proto::FailureReport culprit;
  culprit.round = hang.round;
  culprit.rank = p.rank;
  culprit.local_rank = static_cast<int>(best->local_rank);
  culprit.host = best->node->request.host;
  culprit.node_id = best->node->id;
  culprit.cause = RestartCause::kHung;
  culprit.step = p.step;
  culprit.unix_ms = now_unix_ms - static_cast<int64_t>(best->silence * 1000);
  culprit.exit = fmt::format(
      "hung: no progress beat for {:.1f} s after step {} ({}), the lowest step in the job (from the heartbeats; "
      "rank {} on {} was found hung at step {})",
      best->silence, p.step, p.phase, hang.rank, hang.host, hang.step);
  return culprit;
}

void Membership::report_failure(const std::string& run_id, const std::string& node_id, const std::string& reason,
                                RestartCause cause) {
  Run* run = find_run(run_id);
  if (run == nullptr) return;
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end()) {
    heard_from_survivor(*run, node_id);  // a node of the last round: the restart began, and it is alive
    return;
  }
  if (!run->closed || !run->has_participant(node_id)) return;  // already restarting
  const char* what = cause == RestartCause::kHung ? "hung worker" : "worker failure";
  std::string text =
      fmt::format("{} on node {} ({}): {}", what, it->second.group_rank, it->second.request.host, reason);
  const std::string evict = cause == RestartCause::kHung ? hang_suspect_to_evict(*run) : "";
  if (!evict.empty()) {
    const Node& suspect = run->nodes.at(evict);
    run->evicted = identity(suspect.request);
    text += fmt::format("; node {} ({}), the verdict's suspect, makes way for a spare", suspect.group_rank,
                        describe(suspect.request));
  }
  invalidate(*run, cause == RestartCause::kHung ? RestartCause::kHung : RestartCause::kWorkerFailed, text, evict);
}

std::string Membership::replacements(const Run& run) const {
  std::string out;
  for (const auto& id : run.participants) {
    const Node& node = run.nodes.at(id);
    if (node.previous_rank >= 0) continue;
    out += fmt::format("{}{} took node rank {}", out.empty() ? "" : ", ", describe(node.request), node.group_rank);
  }
  return out;
}

std::string Membership::hang_suspect_to_evict(const Run& run) const {
  if (ready_waiting(run).empty()) return "";      // no spare: the job keeps the node rather than shrink
  for (const auto& r : run.failures.reports()) {  // ordered by time: the first hang report names the suspect
    if (r.round != run.round || r.cause != RestartCause::kHung) continue;
    const auto it = run.nodes.find(r.node_id);
    if (it == run.nodes.end() || !it->second.participant || !it->second.request.evict_suspects) return "";
    return r.node_id;
  }
  return "";
}

std::vector<HostedRank> Membership::hosted_ranks(const Run& run) const {
  std::vector<HostedRank> ranks;
  for (const auto& id : run.participants) {
    const Node& node = run.nodes.at(id);
    for (const auto& p : node.progress) {
      ranks.push_back(HostedRank{node.request.host, p});
      ranks.back().progress.arrival_compute_s = run.telemetry.arrival_compute_s(p.rank);
    }
  }
  return ranks;
}

double Membership::straggler_threshold(const Run& run) const {
  return run.participants.empty() ? 0 : run.nodes.at(run.participants.front()).request.straggler_threshold;
}

std::vector<proto::Straggler> Membership::stragglers(const Run& run) const {
  if (!run.closed || run.participants.empty()) return {};
  return run.telemetry.stragglers(hosted_ranks(run), straggler_threshold(run));
}

std::optional<proto::GoodputReport> Membership::leave(const std::string& run_id, const std::string& node_id,
                                                      const std::string& reason, bool ok,
                                                      const proto::AttemptMilestones& attempt) {
  ++version_;
  Run* run = find_run(run_id);
  if (run == nullptr) return std::nullopt;
  auto it = run->nodes.find(node_id);
  if (it == run->nodes.end()) {
    // A node of the last round that gives up instead of re-joining: the next round does not wait for it.
    if (const auto retired = run->retired.find(node_id); retired != run->retired.end()) {
      run->survivors.erase(retired->second);
      maybe_close(*run);
    }
    return std::nullopt;
  }
  const bool participant = run->has_participant(node_id);
  if (run->closed && participant) run->telemetry.milestones(run->round, node_id, attempt, clock_.now(), false);
  if (ok && run->closed && participant) return finish_node(*run, it->second);
  // Another node's workers already ended well: the job's work is done (its ranks ran in lockstep), so a node
  // that leaves now, whatever its reason, ends with it rather than restarting a finished job.
  if (run->closed && participant && run->finished_nodes > 0) return finish_node(*run, it->second);
  if (run->closed && participant) {
    invalidate(*run, RestartCause::kNodeLeft, fmt::format("{} left: {}", describe(it->second.request), reason),
               node_id);
    return run->telemetry.goodput(clock_.now(), false);
  }
  remove_node(*run, node_id);
  if (run->nodes.empty() && run->participants.empty()) {
    finished_.push_back(run_id);
    runs_.erase(run_id);
  }
  return std::nullopt;
}

proto::GoodputReport Membership::finish_node(Run& run, Node& node) {
  proto::GoodputReport goodput = run.telemetry.goodput(clock_.now(), true);
  if (node.finished) return goodput;
  node.finished = true;
  ++run.finished_nodes;
  run.last_event = fmt::format("{} finished", describe(node.request));
  if (run.finished_nodes >= static_cast<int>(run.participants.size())) {
    goodput.ended = true;
    const std::string id = run.id;  // erased with the run
    finished_.push_back(id);
    completed_.push_back(id);
    if (completed_.size() > kCompletedKept) completed_.pop_front();
    runs_.erase(id);  // `run` and `node` are gone
  }
  return goodput;
}

int Membership::spare_count(const Run& run) const {
  const bool full = run.closed && static_cast<int>(run.participants.size()) >= run.max_nodes;
  return full ? static_cast<int>(ready_waiting(run).size()) : 0;
}

bool Membership::cooling(const Run& run, const Node& node) const {
  return run.slow_nodes.cooldown_left(identity(node.request), clock_.now()) > 0;
}

std::vector<std::string> Membership::ready_waiting(const Run& run) const {
  std::vector<std::string> ready;
  for (const auto& id : run.waiting) {
    if (!cooling(run, run.nodes.at(id))) ready.push_back(id);
  }
  return ready;
}

std::vector<NamedSlowNode> Membership::slow_nodes_now(const Run& run, const std::vector<proto::Straggler>& slow) const {
  std::vector<NamedSlowNode> named;
  for (const auto& id : run.participants) {
    const Node& node = run.nodes.at(id);
    double slowdown = 0;
    for (const auto& s : slow) {
      const bool its = s.rank >= node.rank_offset && s.rank < node.rank_offset + node.request.local_world_size;
      if (its && s.median_seconds > 0) slowdown = std::max(slowdown, s.seconds / s.median_seconds);
    }
    if (slowdown <= 0) continue;
    named.push_back(NamedSlowNode{
        identity(node.request),
        proto::SlowNode{
            .node_rank = node.group_rank, .host = node.request.host, .pid = node.request.pid, .slowdown = slowdown}});
  }
  return named;
}

bool Membership::replace_slow_node(Run& run, const std::vector<proto::Straggler>& slow) {
  const proto::SlowNodePolicy policy = run.nodes.at(run.participants.front()).request.slow_nodes;
  if (!policy.replace) return false;
  // Every node's heartbeat brings the run here; the rule's streaks and medians go by time, so once a second is
  // enough, and a run of many nodes does not weigh its stragglers once per node.
  const auto now = clock_.now();
  if (run.slow_nodes_judged && now - *run.slow_nodes_judged < kSlowNodeJudgeEvery) return false;
  run.slow_nodes_judged = now;
  SlowNodeContext context{.policy = policy, .spares = spare_count(run)};
  for (const auto& id : run.participants) {
    for (const auto& p : run.nodes.at(id).progress) {
      context.beats = context.beats || !p.phase.empty();
      context.checkpointing = context.checkpointing || proto::phase_kind(p.phase) == proto::PhaseKind::kCheckpoint;
    }
  }
  if (const proto::RestartRecord* recovered = run.telemetry.recovered())
    context.recovery_s = recovered->recovery.total_s;
  const proto::SlowNodeDecision decision = run.slow_nodes.update(slow_nodes_now(run, slow), context, now);
  if (decision.verdict != proto::SlowNodeVerdict::kEvict) return false;
  const auto seat = std::find_if(run.participants.begin(), run.participants.end(), [&](const auto& id) {
    return run.nodes.at(id).group_rank == decision.node.node_rank;
  });
  if (seat == run.participants.end()) return false;
  const std::string node_id = *seat;
  const std::string who = identity(run.nodes.at(node_id).request);
  run.slow_nodes.evicted(who, decision, run.round, policy.cooldown_s, now);
  run.evicted = who;
  invalidate(run, RestartCause::kSlowNode, decision.line(), node_id);
  return true;
}

bool Membership::tick() {
  bool changed = false;
  std::vector<std::string> ended;
  for (auto& [id, run] : runs_) {
    run.telemetry.spares(spare_count(run), clock_.now());
    if (!run.fatal_error.empty()) continue;
    const bool run_changed = run.closed ? expire_waiting(run) || expire_participants(run) : tick_open_round(run);
    changed = changed || run_changed;
    if (run.closed && run.finished_nodes > 0 && run.finished_nodes >= static_cast<int>(run.participants.size()))
      ended.push_back(id);
  }
  for (const auto& id : ended) {  // every node finished (or was lost after the job ended well)
    finished_.push_back(id);
    completed_.push_back(id);
    if (completed_.size() > kCompletedKept) completed_.pop_front();
    runs_.erase(id);
  }
  return changed;
}

bool Membership::expire_waiting(Run& run) {
  // A spare (or a node waiting for room) is alive while it is blocked in an await; a dead one must not be
  // promoted into the next round, where the job would wait for it once more.
  const auto now = clock_.now();
  std::vector<std::string> gone;
  for (const auto& node_id : run.waiting) {
    const Node& node = run.nodes.at(node_id);
    if (!node.awaiting && to_seconds(now - node.last_seen) > node.request.keep_alive_timeout_s) gone.push_back(node_id);
  }
  for (const auto& node_id : gone) {
    run.last_event =
        fmt::format("{} stopped waiting: gone (no await for {:.1f} s)", describe(run.nodes.at(node_id).request),
                    to_seconds(now - run.nodes.at(node_id).last_seen));
    remove_node(run, node_id);
  }
  return !gone.empty();
}

bool Membership::expire_participants(Run& run) {
  const auto now = clock_.now();
  for (const auto& node_id : run.participants) {
    Node& node = run.nodes.at(node_id);
    if (node.finished) continue;
    const double silent = to_seconds(now - node.last_seen);
    if (silent > node.request.keep_alive_timeout_s && run.finished_nodes > 0) {
      // Lost after another node's workers ended well: the job is done; the run ends once every node has.
      node.finished = true;
      ++run.finished_nodes;
      run.last_event =
          fmt::format("{} went silent after the job ended well: counted as finished", describe(node.request));
      return true;
    }
    if (silent > node.request.keep_alive_timeout_s) {
      invalidate(run, RestartCause::kNodeLost,
                 fmt::format("node {} on {} is dead: no heartbeat for {:.1f} s (keep-alive timeout {:.1f} s)",
                             node.group_rank, describe(node.request), silent, node.request.keep_alive_timeout_s),
                 node_id);
      return true;
    }
  }
  return false;
}

bool Membership::tick_open_round(Run& run) {
  bool changed = false;
  const auto now = clock_.now();
  std::vector<std::string> gone;
  for (const auto& node_id : run.participants) {
    Node& node = run.nodes.at(node_id);
    if (!node.error.empty()) continue;
    if (!node.awaiting &&
        to_seconds(now - node.last_seen) > node.request.keep_alive_timeout_s + kJoinerGapGraceSeconds) {
      gone.push_back(node_id);
    } else if (to_seconds(now - node.joined_at) > node.request.join_timeout_s) {
      node.error = join_timeout_error(run, node);
      ++version_;
      changed = true;
    }
  }
  for (const auto& node_id : gone) {
    remove_node(run, node_id);
    changed = true;
  }
  if (run.round > 0 && !run.survivors.empty()) {
    const auto before = version_;
    expire_survivors(run);
    changed = changed || version_ != before;
    if (!run.fatal_error.empty()) return changed;
  }
  maybe_close(run);
  return changed || run.closed;
}

std::string Membership::join_timeout_error(const Run& run, const Node& node) const {
  std::string joined;
  for (const auto& other : run.participants) {
    joined += (joined.empty() ? "" : ", ") + describe(run.nodes.at(other).request);
  }
  std::string missing;
  for (int r : missing_ranks(run)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  return fmt::format(
      "rendezvous '{}' timed out after {:.0f} s: {}/{} node(s) joined ({}); missing node rank(s): {}. Start the "
      "missing nodes, or lower --nnodes",
      run.id, node.request.join_timeout_s, run.participants.size(), run.min_nodes, joined,
      missing.empty() ? "none" : missing);
}

std::vector<proto::RunStatus> Membership::status(const std::string& run_id) const {
  std::vector<proto::RunStatus> out;
  for (const auto& [id, run] : runs_) {
    if (!run_id.empty() && id != run_id) continue;
    proto::RunStatus s;
    s.run_id = id;
    s.round = run.round;
    s.state = !run.fatal_error.empty() ? proto::RunState::kFailed
              : run.closed             ? proto::RunState::kClosed
                                       : proto::RunState::kOpen;
    s.min_nodes = run.min_nodes;
    s.max_nodes = run.max_nodes;
    const auto slow = stragglers(run);
    for (const auto& node_id : run.participants) {
      const Node& node = run.nodes.at(node_id);
      proto::NodeInfo n = info(node);
      n.clock = node.clock;
      n.ranks = node.progress;
      for (auto& r : n.ranks) {
        r.arrival_compute_s = run.telemetry.arrival_compute_s(r.rank);
        r.straggler = std::any_of(slow.begin(), slow.end(), [&](const auto& x) { return x.rank == r.rank; });
      }
      s.nodes.push_back(std::move(n));
    }
    for (const auto& node_id : run.waiting) {
      s.waiting.push_back(info(run.nodes.at(node_id)));
      s.waiting.back().cooldown_s = run.slow_nodes.cooldown_left(identity(run.nodes.at(node_id).request), clock_.now());
    }
    s.spares = spare_count(run);
    s.missing_ranks = missing_ranks(run);
    s.duplicate_ranks = run.duplicate_ranks;
    s.last_event = run.last_event;
    s.master_port = run.master_port;
    run.telemetry.fill(s, clock_.now());
    run.slow_nodes.fill(s, clock_.now());
    s.failures = run.failures.reports();
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
