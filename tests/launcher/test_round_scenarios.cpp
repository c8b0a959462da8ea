// The same round scenarios through both rendezvous backends: the daemon's Membership (on a FakeClock) and
// the etcd backend's run record (its pure decisions, fed what its keys and leases would show). Both apply
// one round policy (proto/rules/round_policy.hpp); each scenario expects the same rounds from both.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "launcher/etcd/run_record.hpp"
#include "rendezvous/membership.hpp"

using namespace meshrun;
using std::chrono::milliseconds;

namespace {

constexpr double kLastCallSeconds = 1;
constexpr double kKeepAliveSeconds = 30;
constexpr int64_t kPid = 100;  // one pid on every host: (host, pid) orders the ranks the same in both

/// What a scenario sees of a run: open (nothing), closed (its hosts in group-rank order), or failed.
struct RoundOutcome {
  bool failed = false;
  std::string reason;              // failed: why
  std::vector<std::string> hosts;  // closed: group-rank order; empty while the round is open
};

/// One backend, driven the way its agents would drive it.
class RoundBackend {
 public:
  virtual ~RoundBackend() = default;
  virtual std::string name() const = 0;
  /// `host` joins (with `node_rank` requested, or -1). A node that finds the round closed waits (a spare).
  virtual void join(const std::string& host, int node_rank = -1) = 0;
  /// The last-call window passes with every node alive.
  virtual void pass_last_call() = 0;
  /// `lost`'s host dies, silently: its keep-alive runs out and the round restarts without it.
  virtual void lose(const std::string& lost) = 0;
  /// `killed`'s host dies (its agent's connection closes, or its lease runs on for a while), and the
  /// `reporters` see their own workers fail: the first one's report restarts the round.
  virtual void workers_fail(const std::vector<std::string>& reporters, const std::string& killed = "") = 0;
  virtual RoundOutcome outcome() = 0;
};

class DaemonBackend : public RoundBackend {
 public:
  DaemonBackend(int min_nodes, int max_nodes) : min_nodes_(min_nodes), max_nodes_(max_nodes) {}
  std::string name() const override { return "daemon"; }

  void join(const std::string& host, int node_rank) override {
    proto::JoinRequest r;
    r.run_id = "job";
    r.host = host;
    r.addr = host;
    r.pid = kPid;
    r.local_world_size = 1;
    r.min_nodes = min_nodes_;
    r.max_nodes = max_nodes_;
    r.requested_rank = node_rank;
    r.last_call_timeout_s = kLastCallSeconds;
    r.keep_alive_timeout_s = kKeepAliveSeconds;
    r.join_timeout_s = 600;
    ids_[host] = membership_.join(r);
    membership_.set_awaiting("job", ids_[host], true);
  }

  void pass_last_call() override {
    clock_.advance(milliseconds(static_cast<int>(kLastCallSeconds * 1000) + 100));
    beat_all_but("");
    membership_.tick();
  }

  void lose(const std::string& lost) override {
    membership_.set_awaiting("job", ids_.at(lost), false);
    for (int s = 0; s <= static_cast<int>(kKeepAliveSeconds); ++s) {
      clock_.advance(std::chrono::seconds(1));
      beat_all_but(lost);
      membership_.tick();
    }
    ids_.erase(lost);
  }

  void workers_fail(const std::vector<std::string>& reporters, const std::string& killed) override {
    if (!killed.empty()) {
      membership_.connection_closed("job", ids_.at(killed));
      ids_.erase(killed);
    }
    for (const auto& host : reporters) {
      proto::FailureReport failure;
      failure.host = host;
      failure.unix_ms = 1'000'000;
      membership_.record_failure("job", ids_.at(host), failure, 1'000'000);
    }
    membership_.report_failure("job", ids_.at(reporters.front()), "a worker exited with code 1");
  }

  RoundOutcome outcome() override {
    RoundOutcome out;
    const auto status = membership_.status("job");
    REQUIRE(status.size() == 1);
    if (status[0].state == proto::RunState::kFailed) {
      out.failed = true;
      out.reason = membership_.poll("job", ids_.begin()->second).reason;
      return out;
    }
    if (status[0].state != proto::RunState::kClosed) return out;
    std::vector<proto::NodeInfo> nodes = status[0].nodes;
    std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a.group_rank < b.group_rank; });
    for (const auto& node : nodes) out.hosts.push_back(node.host);
    return out;
  }

 private:
  void beat_all_but(const std::string& silent) {
    for (const auto& [host, id] : ids_) {
      if (host == silent) continue;
      membership_.heartbeat("job", id);
      membership_.set_awaiting("job", id, true);
    }
  }

  int min_nodes_;
  int max_nodes_;
  FakeClock clock_;
  rendezvous::Membership membership_{clock_};
  std::map<std::string, std::string> ids_;  // host -> its node id now
};

/// The etcd backend's state, as its keys would hold it: the run record, the open round's joined nodes (on
/// their leases), the last round's nodes that still hold their lease, and the failures reported in it.
class EtcdBackend : public RoundBackend {
 public:
  EtcdBackend(int min_nodes, int max_nodes) {
    run_.min_nodes = min_nodes;
    run_.max_nodes = max_nodes;
  }
  std::string name() const override { return "etcd"; }

  void join(const std::string& host, int node_rank) override {
    proto::NodeInfo node;
    node.node_id = host + "#" + std::to_string(++joins_);
    node.host = host;
    node.addr = host;
    node.pid = kPid;
    node.local_world_size = 1;
    node.requested_rank = node_rank;
    if (run_.phase == launcher::etcd::RoundPhase::kClosed) {
      waiting_.push_back(node);  // a spare: it enters the next round when one opens
      return;
    }
    enter(node);
    try_close(false);
  }

  void pass_last_call() override {
    if (static_cast<int>(joined_.size()) >= run_.min_nodes) try_close(true);
  }

  void lose(const std::string& lost) override {
    const auto it =
        std::find_if(run_.members.begin(), run_.members.end(), [&](const auto& n) { return n.host == lost; });
    REQUIRE(it != run_.members.end());
    restart(launcher::etcd::next_round(run_, proto::RestartCause::kNodeLost, lost + " is dead", it->node_id), lost);
  }

  // The killed host's lease runs on until its keep-alive: it still counts as a survivor that may come back.
  void workers_fail(const std::vector<std::string>& reporters, const std::string& /*killed*/) override {
    reported_.clear();
    for (const auto& host : reporters) reported_.push_back(host + "/" + std::to_string(kPid));
    restart(launcher::etcd::next_round(run_, proto::RestartCause::kWorkerFailed, "a worker exited with code 1", ""),
            "");
  }

  RoundOutcome outcome() override {
    RoundOutcome out;
    if (run_.phase == launcher::etcd::RoundPhase::kFailed) {
      out.failed = true;
      out.reason = run_.reason;
    } else if (run_.phase == launcher::etcd::RoundPhase::kClosed) {
      for (const auto& node : run_.members) out.hosts.push_back(node.host);
    }
    return out;
  }

 private:
  void enter(proto::NodeInfo node) {
    std::erase_if(previous_, [&](const auto& n) { return n.host == node.host; });  // re-joined: a new key
    joined_.push_back(std::move(node));
  }

  void restart(launcher::etcd::RunRecord next, const std::string& lost) {
    previous_ = run_.members;
    std::erase_if(previous_, [&](const auto& n) { return n.host == lost; });  // its lease expired
    run_ = std::move(next);
    joined_.clear();
    if (run_.phase != launcher::etcd::RoundPhase::kOpen) return;
    for (auto& spare : std::exchange(waiting_, {})) enter(std::move(spare));
    try_close(false);
  }

  void try_close(bool last_call_passed) {
    launcher::etcd::RunRecord judged = run_;
    judged.survivors = launcher::etcd::live_survivors(run_, previous_, joined_);
    std::vector<std::string> reported;
    for (const auto& key : reported_) {
      const bool live = std::any_of(previous_.begin(), previous_.end(),
                                    [&](const auto& n) { return launcher::etcd::survivor_key(n) == key; });
      if (live) reported.push_back(key);
    }
    auto members = launcher::etcd::close_now(judged, joined_, last_call_passed, reported);
    if (!members) return;
    for (const auto& node : joined_) {
      const bool seated =
          std::any_of(members->begin(), members->end(), [&](const auto& m) { return m.node_id == node.node_id; });
      if (!seated) waiting_.push_back(node);
    }
    run_.phase = launcher::etcd::RoundPhase::kClosed;
    run_.members = std::move(*members);
    joined_.clear();
    previous_.clear();
  }

  launcher::etcd::RunRecord run_;
  std::vector<proto::NodeInfo> joined_;    // the open round's nodes, join order
  std::vector<proto::NodeInfo> waiting_;   // spares waiting for the next round
  std::vector<proto::NodeInfo> previous_;  // the last round's members still on their lease, not back yet
  std::vector<std::string> reported_;      // survivor keys that reported their workers' failure
  int joins_ = 0;
};

std::vector<std::unique_ptr<RoundBackend>> both(int min_nodes, int max_nodes) {
  std::vector<std::unique_ptr<RoundBackend>> out;
  out.push_back(std::make_unique<DaemonBackend>(min_nodes, max_nodes));
  out.push_back(std::make_unique<EtcdBackend>(min_nodes, max_nodes));
  return out;
}

using Hosts = std::vector<std::string>;

bool is_open(RoundBackend& b) {
  const RoundOutcome o = b.outcome();
  return !o.failed && o.hosts.empty();
}

}  // namespace

TEST_CASE("both backends: a fixed-size round closes when every node joined, ranks in (host, pid) order", "[rounds]") {
  for (auto& b : both(3, 3)) {
    INFO(b->name());
    b->join("c");
    b->join("a");
    CHECK(is_open(*b));
    b->join("b");
    CHECK(b->outcome().hosts == Hosts{"a", "b", "c"});
  }
}

TEST_CASE("both backends: an elastic round closes at min nodes only once the last call passed", "[rounds]") {
  for (auto& b : both(2, 3)) {
    INFO(b->name());
    b->join("b");
    b->pass_last_call();
    CHECK(is_open(*b));  // below min, whatever the clock
    b->join("a");
    CHECK(is_open(*b));
    b->pass_last_call();
    CHECK(b->outcome().hosts == Hosts{"a", "b"});
  }
}

TEST_CASE("both backends: requested node ranks are honoured, the rest fill in", "[rounds]") {
  for (auto& b : both(3, 3)) {
    INFO(b->name());
    b->join("a", 2);
    b->join("b");
    b->join("c", 0);
    CHECK(b->outcome().hosts == Hosts{"c", "b", "a"});
  }
}

TEST_CASE("both backends: after a worker failure the round closes the moment every survivor is back", "[rounds]") {
  for (auto& b : both(2, 2)) {
    INFO(b->name());
    b->join("a");
    b->join("b");
    REQUIRE(b->outcome().hosts == Hosts{"a", "b"});
    b->workers_fail({"a"});
    CHECK(is_open(*b));
    b->join("b");
    CHECK(is_open(*b));
    b->join("a");  // no last call: both survivors are back
    CHECK(b->outcome().hosts == Hosts{"a", "b"});
  }
}

TEST_CASE("both backends: a spare takes the node rank of a lost node, survivors keep theirs", "[rounds][spares]") {
  for (auto& b : both(2, 3)) {
    INFO(b->name());
    for (const char* host : {"a", "b", "c", "d"}) b->join(host);
    REQUIRE(b->outcome().hosts == Hosts{"a", "b", "c"});  // d waits as a spare
    b->lose("b");
    CHECK(is_open(*b));
    b->join("c");
    b->join("a");
    CHECK(b->outcome().hosts == Hosts{"a", "d", "c"});
  }
}

TEST_CASE("both backends: a survivor whose workers failed too is waited for before spares fill its seat",
          "[rounds][spares]") {
  for (auto& b : both(2, 3)) {
    INFO(b->name());
    for (const char* host : {"a", "b", "c", "d", "e"}) b->join(host);
    REQUIRE(b->outcome().hosts == Hosts{"a", "b", "c"});
    b->workers_fail({"a", "c"}, "b");  // b is killed; a's and c's workers fail, and both say so
    b->join("a");
    CHECK(is_open(*b));  // with the two spares the round is full, but c is alive and due
    b->pass_last_call();
    CHECK(is_open(*b));  // the last call does not give c's seat away either
    b->join("c");
    CHECK(b->outcome().hosts == Hosts{"a", "d", "c"});  // one spare took b's rank; e waits
  }
}

TEST_CASE("both backends: a lost node that leaves fewer than min nodes fails the run, with the fix", "[rounds]") {
  for (auto& b : both(2, 2)) {
    INFO(b->name());
    b->join("a");
    b->join("b");
    REQUIRE(b->outcome().hosts == Hosts{"a", "b"});
    b->lose("b");
    const RoundOutcome o = b->outcome();
    CHECK(o.failed);
    CHECK_THAT(o.reason, Catch::Contains("1 node(s) remain, fewer than the minimum of 2 (--nnodes)"));
  }
}
