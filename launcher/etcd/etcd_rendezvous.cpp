#include "launcher/etcd/etcd_rendezvous.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/say.hpp"
#include "common/signal_set.hpp"
#include "launcher/net/host_identity.hpp"
#include "launcher/net/route_interface.hpp"
#include "proto/rendezvous/join_auth.hpp"
#include "proto/rules/round_policy.hpp"
#include "rendezvous/server.hpp"

namespace meshrun::launcher {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
using etcd::RoundPhase;
using etcd::RunRecord;

// One wait on a watch; short, so signals and deadlines are noticed quickly.
constexpr auto kWaitSlice = 1s;
// How often the user hears what the rendezvous waits for.
constexpr auto kProgressEvery = 5s;
// One call to one etcd member: a member that does not answer in this time is skipped for the next.
constexpr auto kCallTimeout = 2s;

int64_t lease_ttl_s(const RdzvConf& conf) {
  // etcd's smallest lease is about 2 s (1.5 election timeouts); shorter asks are raised by the server.
  return std::max<int64_t>(2,
                           static_cast<int64_t>(std::ceil(conf.keep_alive_interval_s * conf.keep_alive_max_attempt)));
}

RunRecord fresh_run(int64_t round, const RendezvousSettings& options) {
  RunRecord run;
  run.round = round;
  run.min_nodes = options.min_nodes;
  run.max_nodes = options.max_nodes;
  // A new run (or a new job under an old id); never in plain text in etcd when the run has a join token.
  run.secret = etcd::seal_secret(proto::make_run_secret(), options.rdzv_conf.token, options.run_id);
  return run;
}

const proto::NodeInfo* find_member(const RunRecord& run, const std::string& node_id) {
  for (const auto& node : run.members) {
    if (node.node_id == node_id) return &node;
  }
  return nullptr;
}

std::string describe_waiting(const RunRecord& run, const std::vector<proto::NodeInfo>& joined, double waited_s,
                             double timeout_s) {
  std::string have;
  for (const auto& node : joined) {
    const std::string rank = node.requested_rank >= 0 ? "node " + std::to_string(node.requested_rank) : "a node";
    have += (have.empty() ? "" : ", ") + rank + " on " + node.host;
  }
  char line[512];
  std::snprintf(line, sizeof line, "waiting for nodes (etcd): %zu/%d joined%s (have %s) \u2014 %.0f s of %.0f s",
                joined.size(), run.min_nodes,
                run.max_nodes != run.min_nodes ? (" (max " + std::to_string(run.max_nodes) + ")").c_str() : "",
                have.empty() ? "none yet" : have.c_str(), waited_s, timeout_s);
  return line;
}

}  // namespace

EtcdRendezvous::EtcdRendezvous(const RendezvousSettings& options, SignalSet& signals)
    : options_(options),
      signals_(signals),
      client_(options.etcd_endpoints, kCallTimeout,
              etcd::EtcdCredentials{.user = options.rdzv_conf.etcd_user, .password = options.rdzv_conf.etcd_password},
              etcd::EtcdTls{.enabled = options.rdzv_conf.etcd_https.value_or(false),
                            .ca_file = options.rdzv_conf.etcd_ca_file,
                            .cert_file = options.rdzv_conf.etcd_cert_file,
                            .key_file = options.rdzv_conf.etcd_key_file}),
      keys_(options.run_id),
      run_id_(options.run_id),
      hostname_(local_hostname()),
      // How the other nodes reach this one: --local-addr, else this node's address on the route to the
      // first etcd member (no DNS needed), else the host name.
      addr_(!options.local_addr.empty() ? options.local_addr
                                        : own_address(options.etcd_endpoints.front().host).value_or(local_hostname())),
      goodput_(SteadyClock::now()) {
  const auto start = SteadyClock::now();
  const auto deadline = start + from_seconds(options.rdzv_conf.join_timeout_s);
  auto next_note = start + kProgressEvery;
  for (;;) {
    try {
      lease_ = client_.grant_lease(lease_ttl_s(options.rdzv_conf));
      lease_renewed_ = SteadyClock::now();
      return;
    } catch (const NetworkError& e) {
      if (check_signals()) return;
      const auto now = SteadyClock::now();
      if (now >= deadline) {
        throw TimeoutError("cannot reach etcd at " + client_.endpoints_text() + " within the join timeout (" +
                           std::to_string(static_cast<int>(options.rdzv_conf.join_timeout_s)) + " s): " + e.what() +
                           " (are the etcd members up? is --rdzv-endpoint right?)");
      }
      if (now >= next_note) {
        say("waiting for etcd at " + client_.endpoints_text() + " (" + e.what() + ")");
        next_note = now + kProgressEvery;
      }
      std::this_thread::sleep_for(200ms);
    }
  }
}

EtcdRendezvous::~EtcdRendezvous() {
  if (store_) store_->stop();
  if (lease_ != 0) client_.revoke(lease_);
}

bool EtcdRendezvous::check_signals() {
  if (const int sig = signals_.drain_terminating()) interrupted_by_ = sig;
  return interrupted_by_ != 0;
}

void EtcdRendezvous::renew_lease(bool force) {
  const auto now = SteadyClock::now();
  if (!force && now - lease_renewed_ < from_seconds(options_.rdzv_conf.keep_alive_interval_s)) return;
  const int64_t ttl = client_.keep_alive(lease_);
  lease_renewed_ = now;
  if (ttl > 0) return;
  // Silent past the TTL (stopped, cut off): etcd dropped this node's keys. Start over with a new lease.
  spdlog::warn("this node's etcd lease expired (silent for more than {} s): re-joining",
               lease_ttl_s(options_.rdzv_conf));
  lease_ = client_.grant_lease(lease_ttl_s(options_.rdzv_conf));
  entered_round_ = -1;
  spare_marked_ = false;  // its key went with the old lease
}

proto::Assignment EtcdRendezvous::sealed_secret_opened(proto::Assignment a) const {
  a.run_secret = etcd::unseal_secret(a.run_secret, options_.rdzv_conf.token, run_id_);
  return a;
}

EtcdRendezvous::Snapshot EtcdRendezvous::read_state() { return snapshot_of(client_.range(keys_.state())); }

EtcdRendezvous::Snapshot EtcdRendezvous::snapshot_of(const etcd::RangeResult& r) {
  Snapshot s;
  s.revision = r.revision;
  if (r.kvs.empty()) return s;
  s.exists = true;
  s.mod_revision = r.kvs.front().mod_revision;
  s.run = json::parse(r.kvs.front().value).get<RunRecord>();
  return s;
}

EtcdRendezvous::Snapshot EtcdRendezvous::ensure_state(const JoinWait& wait) {
  Snapshot s = read_state();
  if (s.exists) return s;
  check_finished(wait);
  const std::string first = json(fresh_run(0, options_)).dump();
  client_.txn({etcd::absent(keys_.state())}, {etcd::put_op(keys_.state(), first)});
  return read_state();
}

EtcdRendezvous::RoundView EtcdRendezvous::read_round(int64_t round) {
  const std::string prefix = keys_.round(round);
  return view_of(prefix, client_.range(prefix, etcd::prefix_end(prefix)));
}

EtcdRendezvous::RoundView EtcdRendezvous::view_of(const std::string& prefix, const etcd::RangeResult& r) {
  RoundView view;
  view.revision = r.revision;
  std::vector<std::pair<int64_t, proto::NodeInfo>> joined;
  for (const auto& kv : r.kvs) {
    const std::string name = kv.key.substr(prefix.size());
    if (name.rfind("n/", 0) == 0) {
      joined.emplace_back(kv.create_revision, json::parse(kv.value).get<proto::NodeInfo>());
      view.alive.insert(name.substr(2));
    } else if (name.rfind("done/", 0) == 0) {
      view.done.insert(name.substr(5));
    } else if (name.rfind("f/", 0) == 0) {
      view.reported.insert(name.substr(2, name.find('/', 2) - 2));
    } else if (name == "store") {
      view.store = parse_endpoint(kv.value, 0);
    } else if (name.rfind("p/", 0) == 0) {
      view.progress[name.substr(2)] =
          etcd::NodeProgress{json::parse(kv.value).get<std::vector<proto::RankProgress>>(), kv.mod_revision};
    } else if (name == "judged") {
      view.judged = json::parse(kv.value).get<etcd::SlowNodeJudgement>();
    }
  }
  std::sort(joined.begin(), joined.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [revision, node] : joined) view.joined.push_back(std::move(node));
  return view;
}

bool EtcdRendezvous::replace_state(const Snapshot& seen, const RunRecord& next) {
  return client_
      .txn({etcd::mod_revision_is(keys_.state(), seen.mod_revision)}, {etcd::put_op(keys_.state(), json(next).dump())})
      .succeeded;
}

bool EtcdRendezvous::enter_round(const Snapshot& seen) {
  const int64_t round = seen.run.round;
  proto::NodeInfo me;
  me.node_id = hostname_ + ":" + std::to_string(::getpid()) + ":" + std::to_string(round);
  me.host = hostname_;
  me.addr = addr_;
  me.local_world_size = options_.nproc_per_node;
  me.pid = ::getpid();
  if (options_.node_rank_given) me.requested_rank = options_.node_rank;
  std::vector<etcd::Compare> compares{etcd::mod_revision_is(keys_.state(), seen.mod_revision)};
  std::vector<etcd::Operation> puts{etcd::put_op(keys_.node(round, me.node_id), json(me).dump(), lease_)};
  if (spare_marked_) puts.push_back(etcd::delete_op(spare_key()));  // a spare no more: it takes a seat
  const std::string claim = me.requested_rank >= 0 ? keys_.rank_claim(round, me.requested_rank) : std::string();
  if (!claim.empty()) {
    compares.push_back(etcd::absent(claim));
    puts.push_back(etcd::put_op(claim, hostname_ + " (pid " + std::to_string(me.pid) + ")", lease_));
  }
  const etcd::TxnResult result = client_.txn(compares, puts, {etcd::range_op(claim.empty() ? keys_.state() : claim)});
  if (result.succeeded) {
    node_id_ = me.node_id;
    entered_round_ = round;
    spare_marked_ = false;
    return true;
  }
  if (!claim.empty() && !result.ranges.empty() && !result.ranges.front().kvs.empty()) {
    throw RemoteError("node rank " + std::to_string(me.requested_rank) + " of run '" + run_id_ +
                      "' is requested by both " + result.ranges.front().kvs.front().value + " and " + hostname_ +
                      " (pid " + std::to_string(me.pid) + "): give every node its own --node-rank");
  }
  return false;  // the state moved on: look again
}

void EtcdRendezvous::wait_for_state(int64_t revision, std::chrono::milliseconds wait) {
  watch(keys_.state(), "", revision, wait);
}

void EtcdRendezvous::wait_for_change(int64_t revision, std::chrono::milliseconds wait) {
  watch(keys_.prefix, etcd::prefix_end(keys_.prefix), revision, wait);
}

void EtcdRendezvous::watch(const std::string& key, const std::string& range_end, int64_t revision,
                           std::chrono::milliseconds wait) {
  try {
    client_.watch(key, range_end, revision + 1, wait);
  } catch (const NetworkError& e) {
    spdlog::warn("watching the etcd rendezvous failed: {}", e.what());
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(wait, 200ms));
  }
}

std::optional<proto::Assignment> EtcdRendezvous::join() {
  const int64_t previous = assigned_round_;
  const auto started = SteadyClock::now();
  auto assignment = join_round();
  if (!assignment) return assignment;
  assignment->steps_done = steps_beaten_;
  if (previous < 0) {
    goodput_.first_round(assignment->round);  // a late joiner's first round need not be 0
  } else {
    goodput_.restarted(assignment->round, assigned_run_.cause, fault_.value_or(started));
  }
  fault_.reset();
  return assignment;
}

std::optional<proto::Assignment> EtcdRendezvous::join_round() {
  JoinWait wait;
  wait.start = SteadyClock::now();
  wait.deadline = wait.start + from_seconds(options_.rdzv_conf.join_timeout_s);
  wait.next_note = wait.start + kProgressEvery;
  while (!check_signals()) {
    renew_lease(false);
    const Snapshot s = ensure_state(wait);
    wait.saw_run = true;
    check_sizes(s.run);
    if (s.run.phase != RoundPhase::kFailed && wait_cooling(s, wait)) continue;
    switch (s.run.phase) {
      case RoundPhase::kFailed: on_failed_run(s); break;
      case RoundPhase::kClosed:
        if (auto a = on_closed_round(s, wait)) return a;
        break;
      case RoundPhase::kOpen: on_open_round(s, wait); break;
    }
  }
  return std::nullopt;
}

void EtcdRendezvous::check_finished(const JoinWait& wait) {
  if (client_.range(keys_.finished).kvs.empty()) return;
  // The run ended well. A node that saw it while it waited was a spare it did not need; one that never saw it
  // starts the id afresh.
  if (wait.saw_run) throw RunFinished("run '" + run_id_ + "' finished");
  client_.txn({}, {etcd::delete_op(keys_.finished)});
}

void EtcdRendezvous::check_sizes(const RunRecord& run) const {
  if (run.min_nodes == options_.min_nodes && run.max_nodes == options_.max_nodes) return;
  throw RemoteError("run '" + run_id_ + "' in etcd has --nnodes " + std::to_string(run.min_nodes) + ":" +
                    std::to_string(run.max_nodes) + " but this node was started with " +
                    std::to_string(options_.min_nodes) + ":" + std::to_string(options_.max_nodes) +
                    ": start every node with the same --nnodes (or use another --rdzv-id)");
}

void EtcdRendezvous::on_failed_run(const Snapshot& s) {
  if (read_round(s.run.round - 1).alive.empty()) {  // a failed job whose nodes are all gone: start afresh
    replace_state(s, fresh_run(s.run.round + 1, options_));
    return;
  }
  throw RemoteError("rendezvous for run '" + run_id_ + "' failed: " + s.run.reason);
}

std::optional<proto::Assignment> EtcdRendezvous::on_closed_round(const Snapshot& s, JoinWait& wait) {
  const RunRecord& run = s.run;
  if (entered_round_ == run.round && find_member(run, node_id_) != nullptr) return assignment(s);
  // A late joiner: take the next round when there is room, else wait for the job to restart.
  const RoundView view = read_round(run.round);
  if (view.alive.empty()) {  // every member is gone (an earlier job under this id): start afresh
    replace_state(s, fresh_run(run.round + 1, options_));
    return std::nullopt;
  }
  if (static_cast<int>(run.members.size()) < run.max_nodes) {
    replace_state(
        s, etcd::next_round(run, proto::RestartCause::kScaleUp, hostname_ + " is waiting to join (scale-up)", ""));
    return std::nullopt;
  }
  mark_spare();
  const auto now = SteadyClock::now();
  if (now >= wait.deadline) {
    throw TimeoutError("run '" + run_id_ + "' is full (" + std::to_string(run.max_nodes) +
                       " nodes, --nnodes max) and did not restart within the join timeout");
  }
  if (now >= wait.next_note) {
    say("round " + std::to_string(run.round) + " is full (" + std::to_string(run.max_nodes) +
        " nodes): this node joins when the job next restarts");
    wait.next_note = now + kProgressEvery;
  }
  wait_for_state(s.revision, kWaitSlice);
  return std::nullopt;
}

void EtcdRendezvous::on_open_round(const Snapshot& s, JoinWait& wait) {
  const RunRecord& run = s.run;
  if (entered_round_ != run.round) {
    enter_round(s);
    return;
  }
  const RoundView view = read_round(run.round);
  if (view.alive.count(node_id_) == 0) {  // our key is gone (the lease expired): enter again
    entered_round_ = -1;
    return;
  }
  const auto now = SteadyClock::now();
  if (static_cast<int>(view.joined.size()) < run.min_nodes) {
    wait.min_joined_round = -1;
  } else if (wait.min_joined_round != run.round) {
    wait.min_joined_at = now;
    wait.min_joined_round = run.round;
  }
  const auto last_call = from_seconds(options_.rdzv_conf.last_call_timeout_s);
  const bool last_call_running = wait.min_joined_round == run.round;
  RunRecord judged = run;             // waits only for survivors that are still alive (they matter from min_nodes on)
  std::vector<std::string> reported;  // survivors that reported their own workers' failure
  if (!run.survivors.empty() && last_call_running) {
    const RoundView previous = read_round(run.round - 1);
    judged.survivors = etcd::live_survivors(run, previous.joined, view.joined);
    for (const auto& node : previous.joined) {
      if (previous.reported.count(node.node_id) != 0) reported.push_back(etcd::survivor_key(node));
    }
  }
  if (auto members = etcd::close_now(judged, view.joined, last_call_running && now - wait.min_joined_at >= last_call,
                                     reported, unix_time_ms())) {
    close_round(s, view, std::move(*members));
    return;
  }
  if (now >= wait.deadline) {
    throw TimeoutError(etcd::join_timeout_message(run_id_, run, view.joined, options_.rdzv_conf.join_timeout_s));
  }
  if (now >= wait.next_note) {
    say(describe_waiting(run, view.joined, to_seconds(now - wait.start), options_.rdzv_conf.join_timeout_s));
    wait.next_note = now + kProgressEvery;
  }
  auto slice = std::chrono::duration_cast<std::chrono::milliseconds>(kWaitSlice);
  if (last_call_running) {  // wake up when the last call ends, whatever else happens
    slice = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(wait.min_joined_at + last_call - now),
                       std::chrono::milliseconds(10), slice);
  }
  wait_for_change(std::max(s.revision, view.revision), slice);
}

void EtcdRendezvous::close_round(const Snapshot& s, const RoundView& view, std::vector<proto::NodeInfo> members) {
  RunRecord closed = s.run;
  closed.phase = RoundPhase::kClosed;
  closed.members = std::move(members);
  closed.evicted.clear();  // barred from that round only; its cool-down goes on
  const std::string nodes = keys_.nodes(s.run.round);
  // Closes only if no node joined since the round was read (its key would be newer than that).
  client_.txn({etcd::mod_revision_is(keys_.state(), s.mod_revision),
               etcd::unchanged_since(nodes, etcd::prefix_end(nodes), view.revision)},
              {etcd::put_op(keys_.state(), json(closed).dump())});
}

std::optional<proto::Assignment> EtcdRendezvous::assignment(const Snapshot& closed) {
  const RunRecord& run = closed.run;
  const proto::NodeInfo& me = *find_member(run, node_id_);
  assigned_round_ = run.round;
  assigned_run_ = run;
  if (store_) {  // the last round's store: its workers are gone
    store_->stop();
    store_.reset();
  }
  progress_put_.clear();
  judged_put_.clear();
  judge_.reset();
  if (me.group_rank == 0) {  // node rank 0 judges the round's stragglers (slow_node_judge.hpp) and serves the store
    judge_ = std::make_unique<etcd::SlowNodeJudge>(run, options_.straggler_threshold, options_.slow_nodes,
                                                   SteadyClock::now());
    rendezvous::ServerOptions so;
    so.host = options_.hosted_bind.empty() ? wildcard_address_for(addr_) : options_.hosted_bind;
    so.allow = options_.hosted_allow;
    so.port = options_.master_port.value_or(0);
    store_ = std::make_unique<rendezvous::Server>(so);
    store_->start_background();
    const Endpoint store{.host = addr_, .port = store_->port()};
    client_.put(keys_.store(run.round), store.to_string(), lease_);
    spdlog::info("round {}: serving the workers' store on {}", run.round, store.to_string());
    return sealed_secret_opened(etcd::assignment_for(run, node_id_, store.host, store.port));
  }
  const auto deadline = SteadyClock::now() + from_seconds(options_.rdzv_conf.join_timeout_s);
  while (!check_signals()) {
    renew_lease(false);
    const RoundView view = read_round(run.round);
    if (view.store)
      return sealed_secret_opened(etcd::assignment_for(run, node_id_, view.store->host, view.store->port));
    const Snapshot now = read_state();
    if (!now.exists || now.run.round != run.round) return std::nullopt;  // the round moved on
    const auto lost = etcd::lost_members(run, view.alive, view.done);
    if (!lost.empty()) {  // node rank 0 died before serving the store
      replace_state(now, etcd::next_round(run, proto::RestartCause::kNodeLost,
                                          "node " + std::to_string(lost.front().group_rank) + " on " +
                                              lost.front().host + " vanished before the round started",
                                          lost.front().node_id));
      return std::nullopt;
    }
    if (SteadyClock::now() >= deadline) {
      throw TimeoutError("node rank 0 of run '" + run_id_ +
                         "' did not publish the workers' store within the join timeout");
    }
    wait_for_change(std::max(now.revision, view.revision), kWaitSlice);
  }
  return std::nullopt;
}

proto::HeartbeatReply EtcdRendezvous::heartbeat(const std::vector<proto::RankProgress>& progress,
                                                const proto::AttemptMilestones& attempt) {
  for (const auto& p : progress) steps_beaten_ = std::max(steps_beaten_, p.step);
  note_account(attempt);
  proto::HeartbeatReply reply = check_round(progress);
  if (reply.action != proto::HeartbeatAction::kContinue && !fault_) fault_ = SteadyClock::now();
  return reply;
}

proto::HeartbeatReply EtcdRendezvous::check_round(const std::vector<proto::RankProgress>& progress) {
  renew_lease(true);
  const std::string prefix = keys_.round(assigned_round_);
  // This node's progress, when it changed (a step, a phase such as a checkpoint, a hang): node rank 0 names the
  // stragglers from every node's, and evicts none while a rank saves. The beats' ages alone are no change.
  std::vector<proto::RankProgress> sent = progress;
  for (auto& p : sent) p.since_beat_s = 0;
  std::string text = sent.empty() ? std::string() : json(sent).dump();
  const bool moved = text != progress_put_;
  std::vector<etcd::Operation> ops;
  if (moved) ops.push_back(etcd::put_op(keys_.progress(assigned_round_) + node_id_, text, lease_));
  ops.push_back(etcd::range_op(keys_.state()));
  if (judge_) {  // the whole round, every node's progress with it, and the spares
    ops.push_back(etcd::range_op(prefix, etcd::prefix_end(prefix)));
    ops.push_back(etcd::range_op(keys_.spares(), etcd::prefix_end(keys_.spares())));
  } else {  // what tells a lost node, and the judgement: not every node's progress (N x N bytes a second)
    for (const std::string& part : {keys_.nodes(assigned_round_), keys_.done(assigned_round_)})
      ops.push_back(etcd::range_op(part, etcd::prefix_end(part)));
    ops.push_back(etcd::range_op(keys_.judged(assigned_round_)));
  }
  const etcd::TxnResult read = client_.txn({}, ops);
  proto::HeartbeatReply reply;
  reply.round = assigned_round_;
  if (read.ranges.size() != (judge_ ? 3U : 4U)) return reply;
  if (moved) progress_put_ = std::move(text);
  const Snapshot s = snapshot_of(read.ranges[0]);
  if (!s.exists) return reply;  // the run finished and was cleaned up
  RunRecord next = s.run;
  if (s.run.round == assigned_round_) {
    etcd::RangeResult round = read.ranges[1];
    for (size_t i = 2; !judge_ && i < read.ranges.size(); ++i)
      round.kvs.insert(round.kvs.end(), read.ranges[i].kvs.begin(), read.ranges[i].kvs.end());
    const RoundView view = view_of(prefix, round);
    const auto lost = etcd::lost_members(s.run, view.alive, view.done);
    if (lost.empty()) {
      if (!judge_) {
        if (view.judged) {
          reply.stragglers = view.judged->stragglers;
          reply.slow_nodes = view.judged->note;
        }
        return reply;
      }
      if (!judge_round(s, view, read.ranges[2], reply)) return reply;
      next = read_state().run;  // evicted a slow node: the next round
    } else {
      next = etcd::next_round(s.run, proto::RestartCause::kNodeLost,
                              "node " + std::to_string(lost.front().group_rank) + " on " + lost.front().host +
                                  " stopped renewing its etcd lease (dead, stopped or cut off)",
                              lost.front().node_id);
      if (!replace_state(s, next)) next = read_state().run;
    }
  }
  reply.round = next.round;
  reply.action = next.phase == RoundPhase::kFailed ? proto::HeartbeatAction::kFail : proto::HeartbeatAction::kRestart;
  reply.cause = next.cause;
  reply.reason = next.reason;
  return reply;
}

bool EtcdRendezvous::judge_round(const Snapshot& s, const RoundView& view, const etcd::RangeResult& spares,
                                 proto::HeartbeatReply& reply) {
  const int64_t now_ms = unix_time_ms();
  int ready = 0;  // spares that may take a seat: not cooling down
  for (const auto& kv : spares.kvs) {
    if (etcd::cooldown_left_s(s.run, kv.value, now_ms) <= 0) ++ready;
  }
  const bool full = static_cast<int>(s.run.members.size()) >= s.run.max_nodes;
  const etcd::SlowNodeJudgement judged = judge_->judge(view.progress, full ? ready : 0, SteadyClock::now());
  reply.stragglers = judged.stragglers;
  reply.slow_nodes = judged.note;
  if (std::string text = json(judged).dump(); text != judged_put_) {
    try {
      client_.put(keys_.judged(assigned_round_), text, lease_);
      judged_put_ = std::move(text);
    } catch (const Error& e) {
      spdlog::warn("could not put the run's stragglers in etcd: {}", e.what());
    }
  }
  const auto& order = judge_->eviction();
  if (!order) return false;
  const RunRecord next =
      etcd::evicted_round(s.run, order->decision.line(), order->node_id, order->identity,
                          now_ms + static_cast<int64_t>(options_.slow_nodes.cooldown_s * 1000), now_ms);
  if (!replace_state(s, next)) return false;  // the round moved on meanwhile: the next heartbeat reads why
  spdlog::info("round {}: {}", assigned_round_, order->decision.line());
  return true;
}

bool EtcdRendezvous::wait_cooling(const Snapshot& s, JoinWait& wait) {
  const std::string me = identity();
  const double left = etcd::cooldown_left_s(s.run, me, unix_time_ms());
  if (left <= 0 && s.run.evicted != me) return false;  // the round after its eviction never takes it back
  if (!wait.told_cooling) {
    say(cooling_down_line(left));
    wait.told_cooling = true;
    if (store_) {  // evicted as node rank 0: the next round's node rank 0 serves a store of its own
      store_->stop();
      store_.reset();
    }
    judge_.reset();
  }
  // Cooling down is no join: its time is not counted against the join timeout.
  wait.deadline = SteadyClock::now() + from_seconds(options_.rdzv_conf.join_timeout_s);
  wait_for_state(s.revision, kWaitSlice);
  return true;
}

std::string EtcdRendezvous::identity() const { return hostname_ + "/" + std::to_string(::getpid()); }

std::string EtcdRendezvous::spare_key() const { return keys_.spares() + hostname_ + ":" + std::to_string(::getpid()); }

void EtcdRendezvous::mark_spare() {
  if (spare_marked_) return;
  try {
    client_.put(spare_key(), identity(), lease_);
    spare_marked_ = true;
    became_spare();  // its standby workers start while it waits
  } catch (const Error& e) {
    spdlog::warn("could not mark this node a hot spare in etcd: {}", e.what());
  }
}

void EtcdRendezvous::report_failure(const std::string& reason, proto::RestartCause cause) {
  const Snapshot s = read_state();
  if (s.exists && s.run.round == assigned_round_ && s.run.phase == RoundPhase::kClosed) {
    replace_state(s, etcd::next_round(s.run, cause, reason, ""));
  }
}

void EtcdRendezvous::note_account(const proto::AttemptMilestones& attempt) {
  goodput_.milestones(attempt.round, attempt, SteadyClock::now());
  steps_beaten_ = std::max(steps_beaten_, attempt.steps.last_step);
}

void EtcdRendezvous::record_failure(const proto::FailureReport& failure, const proto::AttemptMilestones& attempt) {
  note_account(attempt);
  proto::FailureReport report = failure;
  report.node_id = node_id_;
  // Dated by this node's clock: etcd keeps no time, so reports from several nodes are ordered as well
  // as their clocks agree (NTP keeps them within milliseconds).
  report.unix_ms = unix_time_ms() - static_cast<int64_t>(failure.age_s * 1000);
  const auto failed = SteadyClock::now() - from_seconds(std::max(0.0, failure.age_s));
  if (!fault_ || failed < *fault_) fault_ = failed;
  try {
    client_.put(keys_.failures(report.round) + node_id_ + "/" + std::to_string(report.rank), json(report).dump());
  } catch (const Error& e) {
    spdlog::warn("could not record the failure in etcd: {}", e.what());
  }
}

std::vector<proto::FailureReport> EtcdRendezvous::failures() {
  std::vector<proto::FailureReport> reports;
  if (assigned_round_ < 0) return reports;
  try {
    const std::string prefix = keys_.failures(assigned_round_);
    for (const auto& kv : client_.range(prefix, etcd::prefix_end(prefix)).kvs) {
      reports.push_back(json::parse(kv.value).get<proto::FailureReport>());
    }
  } catch (const Error& e) {
    spdlog::warn("could not read the run's failures from etcd: {}", e.what());
  }
  std::sort(reports.begin(), reports.end(), [](const auto& a, const auto& b) { return a.unix_ms < b.unix_ms; });
  return reports;
}

std::optional<proto::GoodputReport> EtcdRendezvous::leave(const std::string& reason, bool ok,
                                                          const proto::AttemptMilestones& attempt) {
  if (assigned_round_ < 0) return std::nullopt;
  note_account(attempt);
  const proto::GoodputReport goodput = goodput_.report(SteadyClock::now(), ok);
  try {
    client_.put(keys_.goodput(run_id_, hostname_, ::getpid()), json(goodput).dump());
    client_.put(keys_.done(assigned_round_) + node_id_, json{{"ok", ok}, {"reason", reason}}.dump());
    if (ok) return goodput;
    // Leaving for good: the others go on without this node (or fail when too few are left).
    const Snapshot s = read_state();
    if (!s.exists || s.run.phase == RoundPhase::kFailed) return goodput;
    const std::string who = hostname_ + " (pid " + std::to_string(::getpid()) + ") left: " + reason;
    if (s.run.round == assigned_round_ && s.run.phase == RoundPhase::kClosed) {
      replace_state(s, etcd::next_round(s.run, proto::RestartCause::kNodeLeft, who, node_id_));
      return goodput;
    }
    const std::string me = identity();
    RunRecord next = s.run;
    const auto it = std::find(next.survivors.begin(), next.survivors.end(), me);
    if (s.run.phase != RoundPhase::kOpen || it == next.survivors.end()) return goodput;
    next.survivors.erase(it);
    if (const auto too_few = proto::too_few_nodes(who, static_cast<int>(next.survivors.size()), next.min_nodes)) {
      next.phase = RoundPhase::kFailed;
      next.reason = *too_few;
    }
    replace_state(s, next);
  } catch (const Error& e) {
    spdlog::warn("could not leave the etcd rendezvous cleanly: {}", e.what());
  }
  return goodput;
}

void EtcdRendezvous::wait_for_other_nodes() {
  if (!store_) return;  // only node rank 0 serves the others (their workers' store)
  auto next_note = SteadyClock::now() + kProgressEvery;
  while (!check_signals()) {
    renew_lease(false);
    const RoundView view = read_round(assigned_round_);
    const bool others_done =
        std::all_of(assigned_run_.members.begin(), assigned_run_.members.end(),
                    [&](const auto& n) { return view.done.count(n.node_id) != 0 || view.alive.count(n.node_id) == 0; });
    if (others_done) {
      const Snapshot s = read_state();
      if (s.exists && s.run.round == assigned_round_) {  // the job is over: its keys go
        // Every member left well: a spare still waiting is told the run finished (as meshrun-rendezvous does).
        const bool well = std::all_of(assigned_run_.members.begin(), assigned_run_.members.end(),
                                      [&](const auto& n) { return view.done.count(n.node_id) != 0; });
        std::vector<etcd::Operation> ops{etcd::delete_op(keys_.prefix, etcd::prefix_end(keys_.prefix))};
        if (well) ops.push_back(etcd::put_op(keys_.finished, json{{"round", assigned_round_}}.dump()));
        client_.txn({etcd::mod_revision_is(keys_.state(), s.mod_revision)}, ops);
      }
      return;
    }
    if (SteadyClock::now() >= next_note) {
      say("this node is done; still serving the workers' store until the other nodes finish");
      next_note = SteadyClock::now() + 10 * kProgressEvery;
    }
    wait_for_change(view.revision, kWaitSlice);
  }
}

}  // namespace meshrun::launcher
