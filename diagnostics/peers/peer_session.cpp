#include "diagnostics/peers/peer_session.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "diagnostics/net/network_interfaces.hpp"
#include "diagnostics/peers/pair_measurement.hpp"
#include "diagnostics/peers/peer_schedule.hpp"
#include "diagnostics/peers/peer_socket.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::diagnostics {
namespace {

using SteadyClock = std::chrono::steady_clock;

// How much longer than #0 the others wait for the session to start (their clocks started later).
constexpr Duration kSlack = std::chrono::seconds(10);
// A connection that says nothing for this long is not one of our peers.
constexpr Duration kHelloTimeout = std::chrono::seconds(2);
// How long #0 lets the others say they are done before it deletes the session's keys.
constexpr Duration kDoneTimeout = std::chrono::seconds(5);

std::string seconds_text(Duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", to_seconds(d));
  return buf;
}

std::string this_host() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// prefix + n; appending sidesteps GCC 12's false -Wrestrict positive on "literal" + std::to_string().
std::string numbered(std::string prefix, int64_t n) {
  prefix += std::to_string(n);
  return prefix;
}

const char* connect_class(proto::ConnectFailure kind) {
  switch (kind) {
    case proto::ConnectFailure::kResolve: return "resolve";
    case proto::ConnectFailure::kRefused: return "refused";
    case proto::ConnectFailure::kTimeout: return "timeout";
    case proto::ConnectFailure::kUnreachable: return "unreachable";
    case proto::ConnectFailure::kRejected: return "rejected";
    case proto::ConnectFailure::kOther: return "error";
  }
  return "error";
}

PairResult failed_pair(int a, int b, int round, std::string error) {
  PairResult p;
  p.a = a;
  p.b = b;
  p.round = round;
  p.error = std::move(error);
  return p;
}

// One instance's state for the whole session: the store connection, its listener and the members.
class Session {
 public:
  Session(const Endpoint& endpoint, const PeerSessionOptions& options)
      : options_(options), prefix_(peer_session_prefix(options.session)) {
    proto::ConnectOptions connect;
    connect.connect_timeout = options.op_timeout;
    connect.op_timeout = options.op_timeout;
    connect.retry_refused = false;
    store_.emplace(proto::StoreClient::connect(endpoint, connect));
    std::string error;
    const auto source = route_source_address(endpoint.host, error);
    if (!source) throw NetworkError("no route to the daemon " + endpoint.to_string() + ": " + error);
    const int family = source->find(':') != std::string::npos ? AF_INET6 : AF_INET;
    listener_.emplace(family);
    self_.host = this_host();
    self_.addr = Endpoint{*source, listener_->port()}.to_string();
    // A round: connect, pings, both transfers; the barrier after it allows the slowest pair that, plus
    // as much again as a partner may take to show up, for scheduling noise and store round trips.
    pair_budget_ = 2 * options.partner_timeout + 2 * options.max_transfer;
  }

  PeerSessionOutcome run() {
    join();
    const auto schedule = round_robin_rounds(static_cast<int>(outcome_.nodes.size()));
    outcome_.rounds = static_cast<int>(schedule.size());
    for (int r = 0; r < outcome_.rounds; ++r) {
      for (const auto& pair : schedule[static_cast<size_t>(r)]) {
        if (pair.first == position_ || pair.second == position_) measure(r, pair);
      }
      barrier(r);
    }
    report();
    return outcome_;
  }

 private:
  std::string key(const std::string& name) const { return prefix_ + name; }
  std::string round_key(int round, int index) const { return key(numbered(numbered("r", round) + "/", index)); }
  const PeerNode& node_at(int position) const { return outcome_.nodes[static_cast<size_t>(position)]; }

  std::vector<int> present(const std::vector<std::string>& keys, const std::vector<int>& indices) {
    std::vector<int> out;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (store_->check({keys[i]})) out.push_back(indices[i]);
    }
    return out;
  }

  void join() {
    register_self();
    const std::vector<int> members = self_.index == 0 ? choose_members() : await_members();
    load_members(members);
  }

  // Takes the next index in the session and publishes this instance's host and listener under it.
  void register_self() {
    auto& store = *store_;
    const int n = options_.peers;
    outcome_.peers = n;
    self_.index = static_cast<int>(store.add(key("joined"), 1) - 1);
    outcome_.index = self_.index;
    if (self_.index >= n) {
      throw RemoteError("bandwidth session '" + options_.session + "' already has " + std::to_string(n) +
                        " instance(s) (this one would be #" + std::to_string(self_.index) +
                        "): give every instance the same --peers (the number of instances), and a new --rdzv-id "
                        "for each check run (a session that did not finish keeps its keys on the daemon)");
    }
    store.set(key(numbered("node/", self_.index)), nlohmann::json{{"host", self_.host}, {"addr", self_.addr}}.dump());
  }

  // #0 decides who takes part, so every instance measures the same schedule: whoever joined within
  // --peers-timeout.
  std::vector<int> choose_members() {
    auto& store = *store_;
    std::vector<std::string> keys;
    std::vector<int> indices;
    for (int i = 0; i < options_.peers; ++i) {
      keys.push_back(key(numbered("node/", i)));
      indices.push_back(i);
    }
    std::vector<int> members;
    try {
      store.wait(keys, options_.join_timeout);
      members = indices;
    } catch (const TimeoutError&) {
      members = present(keys, indices);
    }
    store.set(key("members"), nlohmann::json(members).dump());
    return members;
  }

  // The others take #0's member list, and must be on it.
  std::vector<int> await_members() {
    auto& store = *store_;
    wait_for_start();
    auto members = nlohmann::json::parse(store.get(key("members"))).get<std::vector<int>>();
    if (std::find(members.begin(), members.end(), self_.index) == members.end()) {
      throw TimeoutError(numbered("this instance (#", self_.index) + ") joined bandwidth session '" + options_.session +
                         "' after #0 had started it with " + std::to_string(members.size()) + " of " +
                         std::to_string(options_.peers) + " instances: start every instance within --peers-timeout (" +
                         seconds_text(options_.join_timeout) + ") of the first, with a new --rdzv-id");
    }
    return members;
  }

  // Waits for #0 to publish the member list; a timeout names #0's host when it got as far as joining.
  void wait_for_start() {
    auto& store = *store_;
    try {
      store.wait({key("members")}, options_.join_timeout + kSlack);
    } catch (const TimeoutError&) {
      std::string first = "#0";
      if (store.check({key("node/0")}))
        first = "#0 " + nlohmann::json::parse(store.get(key("node/0"))).value("host", "");
      throw TimeoutError(first + " opened bandwidth session '" + options_.session + "' but did not start it within " +
                         seconds_text(options_.join_timeout + kSlack) + ": is its meshrun check still running?");
    }
  }

  // Fills the outcome's nodes (members, by index), this instance's position among them, and who is missing.
  void load_members(const std::vector<int>& members) {
    auto& store = *store_;
    for (int m : members) {
      if (m == self_.index) {
        outcome_.nodes.push_back(self_);
        continue;
      }
      const auto j = nlohmann::json::parse(store.get(key(numbered("node/", m))));
      outcome_.nodes.push_back(PeerNode{m, j.value("host", ""), j.value("addr", "")});
    }
    for (size_t p = 0; p < outcome_.nodes.size(); ++p) {
      if (outcome_.nodes[p].index == self_.index) position_ = static_cast<int>(p);
    }
    outcome_.joined = static_cast<int>(store.add(key("joined"), 0));
    for (int i = 0; i < options_.peers; ++i) {
      if (std::find(members.begin(), members.end(), i) == members.end()) outcome_.missing.push_back(i);
    }
  }

  void measure(int round, const PeerPair& pair) {
    const bool client = pair.first == position_;
    const PeerNode& partner = node_at(client ? pair.second : pair.first);
    PairSpec spec;
    spec.session_tag = session_tag(options_.session);
    spec.round = round;
    spec.a = node_at(pair.first).index;
    spec.b = node_at(pair.second).index;
    spec.bytes = options_.bytes;
    spec.max_transfer = options_.max_transfer;
    spec.pings = options_.pings;
    const std::string who = node_label(partner) + " (" + partner.addr + ")";
    if (lost_.count(partner.index)) {
      own_.push_back(failed_pair(spec.a, spec.b, round, "skipped: " + node_label(partner) + " had stopped answering"));
      return;
    }
    try {
      if (client) {
        PeerSocket socket = [&] {
          try {
            return PeerSocket::connect(parse_endpoint(partner.addr, 0), who,
                                       SteadyClock::now() + options_.partner_timeout);
          } catch (const proto::ConnectError& e) {
            throw NetworkError("[" + std::string(connect_class(e.kind())) + "] " + node_label(self_) +
                               " cannot connect to " + who + ": " + e.what());
          }
        }();
        own_.push_back(run_pair_client(socket, spec, SteadyClock::now() + pair_budget_));
      } else {
        PeerSocket socket = accept_partner(spec, who);
        own_.push_back(run_pair_server(socket, spec, SteadyClock::now() + pair_budget_));
      }
    } catch (const Error& e) {
      own_.push_back(failed_pair(spec.a, spec.b, round, e.what()));
    }
  }

  // Accepts until the expected partner's hello arrives; anything else (a stale attempt, a stray
  // client) is closed.
  PeerSocket accept_partner(const PairSpec& spec, const std::string& who) {
    const auto deadline = SteadyClock::now() + options_.partner_timeout;
    for (;;) {
      PeerSocket socket = [&] {
        try {
          return listener_->accept(deadline);
        } catch (const TimeoutError&) {
          throw TimeoutError("[timeout] " + who + " did not connect to " + node_label(self_) + " (" + self_.addr +
                             ") within " + seconds_text(options_.partner_timeout) +
                             ": a firewall may drop connections to this node's bandwidth port, or the peer is stuck");
        }
      }();
      try {
        if (accept_pair_hello(socket, spec, std::min(deadline, SteadyClock::now() + kHelloTimeout))) {
          socket.set_peer(who);
          return socket;
        }
      } catch (const Error&) {
        // Not our partner (it said nothing, or closed): keep listening.
      }
    }
  }

  void barrier(int round) {
    auto& store = *store_;
    store.set(round_key(round, self_.index), "1");
    std::vector<std::string> keys;
    std::vector<int> indices;
    for (const auto& node : outcome_.nodes) {
      if (node.index == self_.index || lost_.count(node.index)) continue;
      keys.push_back(round_key(round, node.index));
      indices.push_back(node.index);
    }
    if (keys.empty()) return;
    try {
      store.wait(keys, pair_budget_);
    } catch (const TimeoutError&) {
      const auto done = present(keys, indices);
      for (const auto& node : outcome_.nodes) {
        if (node.index == self_.index || lost_.count(node.index)) continue;
        if (std::find(done.begin(), done.end(), node.index) != done.end()) continue;
        lost_.insert(node.index);
        outcome_.lost.push_back(node_label(node) + " did not finish round " + std::to_string(round) + " within " +
                                seconds_text(pair_budget_));
      }
    }
  }

  void report() {
    auto& store = *store_;
    nlohmann::json own = nlohmann::json::array();
    for (const auto& p : own_) own.push_back(pair_to_json(p));
    store.set(key(numbered("result/", self_.index)), nlohmann::json{{"pairs", own}}.dump());
    store.add(key("done"), 1);
    if (self_.index != 0) {
      outcome_.pairs = own_;
      return;
    }
    // #0 gathers everyone's pairs; a member that never reports is named, its pairs come from the other end.
    std::vector<std::string> keys;
    std::vector<int> indices;
    for (const auto& node : outcome_.nodes) {
      keys.push_back(key(numbered("result/", node.index)));
      indices.push_back(node.index);
    }
    std::vector<int> reported = indices;
    try {
      store.wait(keys, pair_budget_);
    } catch (const TimeoutError&) {
      reported = present(keys, indices);
    }
    std::vector<std::vector<PairResult>> reports;
    for (const auto& node : outcome_.nodes) {
      if (std::find(reported.begin(), reported.end(), node.index) == reported.end()) {
        outcome_.unreported.push_back(node_label(node));
        continue;
      }
      std::vector<PairResult> pairs;
      // Keep the parsed document alive: a range-for over a member of a temporary would dangle.
      const auto report = nlohmann::json::parse(store.get(key(numbered("result/", node.index))));
      for (const auto& p : report.at("pairs")) {
        pairs.push_back(pair_from_json(p));
      }
      reports.push_back(std::move(pairs));
    }
    outcome_.pairs = merge_pairs(outcome_.nodes, reports);
    outcome_.complete_view = true;
    cleanup(static_cast<int64_t>(reported.size()));
  }

  // Deletes the session's keys once every reporting member has said it is done with the store, so
  // the same --rdzv-id could be used again.
  void cleanup(int64_t reporters) {
    auto& store = *store_;
    const auto deadline = SteadyClock::now() + kDoneTimeout;
    while (store.add(key("done"), 0) < reporters && SteadyClock::now() < deadline) {
      ::usleep(20'000);
    }
    const int64_t joined = store.add(key("joined"), 0);
    std::vector<std::string> keys = {key("joined"), key("members"), key("done")};
    for (int64_t i = 0; i < joined; ++i) keys.push_back(key(numbered("node/", i)));
    for (const auto& node : outcome_.nodes) {
      keys.push_back(key(numbered("result/", node.index)));
      for (int r = 0; r < outcome_.rounds; ++r) keys.push_back(round_key(r, node.index));
    }
    for (const auto& k : keys) store.delete_key(k);
  }

  PeerSessionOptions options_;
  std::string prefix_;
  std::optional<proto::StoreClient> store_;
  std::optional<PeerListener> listener_;
  PeerNode self_;
  int position_ = 0;
  Duration pair_budget_{};
  std::set<int> lost_;
  std::vector<PairResult> own_;
  PeerSessionOutcome outcome_;
};

}  // namespace

std::string peer_session_prefix(const std::string& session) { return "meshrun/bw/" + session + "/"; }

PeerSessionOutcome run_peer_session(const Endpoint& endpoint, const PeerSessionOptions& options) {
  if (options.peers < 2) throw UsageError("--peers must be at least 2 (the number of instances that measure)");
  if (options.session.empty()) throw UsageError("--bandwidth --peers needs --rdzv-id (the session's name)");
  try {
    Session session(endpoint, options);
    return session.run();
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError("bandwidth session '" + options.session + "': unreadable value in the store (" + e.what() +
                        "): do all instances run the same meshrun version?");
  }
}

}  // namespace meshrun::diagnostics
