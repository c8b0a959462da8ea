#include "launcher/etcd/run_record.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <optional>
#include <string_view>

#include "common/error.hpp"
#include "common/sha256.hpp"
#include "proto/rendezvous/join_auth.hpp"
#include "proto/rules/group_ranks.hpp"
#include "proto/rules/round_policy.hpp"

namespace meshrun::launcher::etcd {
namespace {

constexpr const char* kPhaseNames[] = {"open", "closed", "failed"};

RoundPhase phase_from(const std::string& name) {
  for (size_t i = 0; i < std::size(kPhaseNames); ++i) {
    if (name == kPhaseNames[i]) return static_cast<RoundPhase>(i);
  }
  throw ProtocolError("the etcd rendezvous state has an unknown phase '" + name +
                      "' (written by a different meshrun version?)");
}

/// Requested ranks below min_nodes that no joined node asked for: the nodes to start.
std::vector<int> missing_ranks(const RunRecord& run, const std::vector<proto::NodeInfo>& joined) {
  std::set<int> requested;
  int unrequested = 0;
  for (const auto& node : joined) {
    if (node.requested_rank >= 0) {
      requested.insert(node.requested_rank);
    } else {
      ++unrequested;
    }
  }
  std::vector<int> missing;
  for (int rank = 0; rank < run.min_nodes; ++rank) {
    if (requested.count(rank) != 0) continue;
    if (unrequested > 0) {
      --unrequested;  // a node without --node-rank may take it
      continue;
    }
    missing.push_back(rank);
  }
  return missing;
}

}  // namespace

void to_json(nlohmann::json& j, const RunRecord& run) {
  j = nlohmann::json{{"round", run.round},         {"phase", kPhaseNames[static_cast<size_t>(run.phase)]},
                     {"min_nodes", run.min_nodes}, {"max_nodes", run.max_nodes},
                     {"cause", run.cause},         {"reason", run.reason},
                     {"survivors", run.survivors}, {"previous_ranks", run.previous_ranks},
                     {"members", run.members},     {"secret", run.secret},
                     {"cooling", run.cooling},     {"evicted", run.evicted}};
}

void from_json(const nlohmann::json& j, RunRecord& run) {
  run.round = j.at("round").get<int64_t>();
  run.phase = phase_from(j.at("phase").get<std::string>());
  run.min_nodes = j.at("min_nodes").get<int>();
  run.max_nodes = j.at("max_nodes").get<int>();
  run.cause = j.value("cause", proto::RestartCause::kNone);
  run.reason = j.value("reason", std::string());
  run.survivors = j.value("survivors", std::vector<std::string>{});
  run.previous_ranks = j.value("previous_ranks", std::map<std::string, int>{});
  run.members = j.value("members", std::vector<proto::NodeInfo>{});
  run.secret = j.value("secret", std::string());
  run.cooling = j.value("cooling", std::map<std::string, int64_t>{});
  run.evicted = j.value("evicted", std::string());
}

std::string survivor_key(const proto::NodeInfo& node) { return fmt::format("{}/{}", node.host, node.pid); }

// The round policy is shared with the daemon (proto/rules/round_policy.hpp); this feeds it the etcd backend's view.
double cooldown_left_s(const RunRecord& run, const std::string& key, int64_t now_unix_ms) {
  const auto it = run.cooling.find(key);
  return it == run.cooling.end() ? 0 : std::max<double>(0, static_cast<double>(it->second - now_unix_ms) / 1000);
}

std::optional<std::vector<proto::NodeInfo>> close_now(const RunRecord& run,
                                                      const std::vector<proto::NodeInfo>& all_joined,
                                                      bool last_call_passed, const std::vector<std::string>& reported,
                                                      int64_t now_unix_ms) {
  std::vector<proto::NodeInfo> joined;  // a node cooling down entered anyway (an older agent): not seated
  for (const auto& node : all_joined) {
    const std::string key = survivor_key(node);
    if (cooldown_left_s(run, key, now_unix_ms) <= 0 && key != run.evicted) joined.push_back(node);
  }
  if (run.phase != RoundPhase::kOpen || joined.empty()) return std::nullopt;
  std::set<std::string> back;
  for (const auto& node : joined) back.insert(survivor_key(node));
  const std::set<std::string> survivors(run.survivors.begin(), run.survivors.end());
  proto::OpenRound round;
  round.joined = static_cast<int>(joined.size());
  round.min_nodes = run.min_nodes;
  round.max_nodes = run.max_nodes;
  // A restart here is a round with survivors expected (a fresh run may start at a round above 0: an id reused,
  // a failed run started over). One whose survivors all lost their lease waits for the last call.
  round.restart = !run.survivors.empty();
  // A survivor that reported its own workers' failure is alive (due), only slower to stop them than spares
  // are to join. One that said nothing may be the node that was lost: its lease tells only once it expires.
  for (const auto& s : survivors) {
    if (back.count(s) != 0) continue;
    ++round.survivors_out;
    if (std::find(reported.begin(), reported.end(), s) != reported.end()) ++round.survivors_due;
  }
  round.newcomer_joined = std::any_of(joined.begin(), joined.end(),
                                      [&](const auto& node) { return survivors.count(survivor_key(node)) == 0; });
  round.last_call_passed = last_call_passed;
  if (!proto::round_closes(round)) return std::nullopt;
  std::vector<bool> is_survivor;
  for (const auto& node : joined) is_survivor.push_back(survivors.count(survivor_key(node)) != 0);
  std::vector<proto::NodeInfo> nodes;
  for (size_t i : proto::seated(is_survivor, run.max_nodes)) nodes.push_back(joined[i]);
  // Survivors first: a node rank two nodes request goes to the survivor.
  std::stable_partition(nodes.begin(), nodes.end(),
                        [&](const proto::NodeInfo& node) { return survivors.count(survivor_key(node)) != 0; });
  std::vector<proto::RankRequest> requests;
  for (const auto& node : nodes) {
    const auto previous = run.previous_ranks.find(survivor_key(node));
    requests.push_back({.requested_rank = node.requested_rank,
                        .previous_rank = previous == run.previous_ranks.end() ? -1 : previous->second,
                        .host = node.host,
                        .pid = node.pid});
  }
  const std::vector<int> ranks = proto::assign_group_ranks(requests);
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].group_rank = ranks[i];
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a.group_rank < b.group_rank; });
  return nodes;
}

std::vector<std::string> live_survivors(const RunRecord& run, const std::vector<proto::NodeInfo>& previous,
                                        const std::vector<proto::NodeInfo>& joined) {
  std::set<std::string> live;
  for (const auto& node : previous) live.insert(survivor_key(node));
  for (const auto& node : joined) live.insert(survivor_key(node));
  std::vector<std::string> out;
  for (const auto& s : run.survivors) {
    if (live.count(s) != 0) out.push_back(s);
  }
  return out;
}

RunRecord next_round(const RunRecord& closed, proto::RestartCause cause, const std::string& reason,
                     const std::string& lost_node) {
  RunRecord next;
  next.round = closed.round + 1;
  next.min_nodes = closed.min_nodes;
  next.max_nodes = closed.max_nodes;
  next.cause = cause;
  next.reason = reason;
  next.secret = closed.secret;
  next.cooling = closed.cooling;
  for (const auto& node : closed.members) {
    if (node.node_id == lost_node) continue;
    next.survivors.push_back(survivor_key(node));
    next.previous_ranks[survivor_key(node)] = node.group_rank;
  }
  if (const auto too_few = proto::too_few_nodes(reason, static_cast<int>(next.survivors.size()), closed.min_nodes)) {
    next.phase = RoundPhase::kFailed;
    next.reason = *too_few;
  }
  return next;
}

RunRecord evicted_round(const RunRecord& closed, const std::string& reason, const std::string& node_id,
                        const std::string& identity, int64_t until_unix_ms, int64_t now_unix_ms) {
  RunRecord next = next_round(closed, proto::RestartCause::kSlowNode, reason, node_id);
  next.phase = RoundPhase::kOpen;
  next.reason = reason;
  std::erase_if(next.cooling, [now_unix_ms](const auto& entry) { return entry.second <= now_unix_ms; });
  next.cooling[identity] = until_unix_ms;
  next.evicted = identity;  // even with --slow-node-cooldown 0: the spare, not it, takes this round's seat
  return next;
}

std::vector<proto::NodeInfo> lost_members(const RunRecord& run, const std::set<std::string>& alive,
                                          const std::set<std::string>& done) {
  std::vector<proto::NodeInfo> lost;
  for (const auto& node : run.members) {
    if (alive.count(node.node_id) == 0 && done.count(node.node_id) == 0) lost.push_back(node);
  }
  return lost;
}

proto::Assignment assignment_for(const RunRecord& run, const std::string& node_id, const std::string& store_addr,
                                 int store_port) {
  proto::Assignment a;
  a.round = run.round;
  a.group_world_size = static_cast<int>(run.members.size());
  a.master_addr = store_addr;
  a.master_port = store_port;
  bool found = false;
  for (const auto& node : run.members) {
    if (node.node_id == node_id) {
      a.group_rank = node.group_rank;
      a.rank_offset = a.world_size;
      found = true;
    }
    a.world_size += node.local_world_size;
  }
  if (!found) throw Error("node " + node_id + " is not a member of round " + std::to_string(run.round));
  if (run.members.size() <= proto::kMaxNodesInAssignment) a.nodes = run.members;
  a.run_secret = run.secret;
  return a;
}

namespace {

constexpr std::string_view kSealed = "sealed:";

std::string keystream(const std::string& token, const std::string& run_id, size_t bytes) {
  std::string stream;
  for (int block = 0; stream.size() < bytes; ++block) {
    const auto part = hmac_sha256(token, "meshrun-etcd-secret|" + run_id + "|" + std::to_string(block));
    stream.append(part.begin(), part.end());
  }
  stream.resize(bytes);
  return stream;
}

std::string seal_tag(const std::string& secret, const std::string& token, const std::string& run_id) {
  return to_hex(hmac_sha256(token, "meshrun-etcd-secret-tag|" + run_id + "|" + secret)).substr(0, 32);
}

std::string hex_of(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) out.append({kDigits[c >> 4], kDigits[c & 15]});
  return out;
}

std::optional<std::string> bytes_of(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = nibble(hex[i]);
    const int lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

}  // namespace

std::string seal_secret(const std::string& secret, const std::string& token, const std::string& run_id) {
  if (token.empty()) return secret;
  std::string cipher = keystream(token, run_id, secret.size());
  for (size_t i = 0; i < secret.size(); ++i) cipher[i] = static_cast<char>(cipher[i] ^ secret[i]);
  return std::string(kSealed) + hex_of(cipher) + ":" + seal_tag(secret, token, run_id);
}

std::string unseal_secret(const std::string& stored, const std::string& token, const std::string& run_id) {
  const bool sealed = stored.rfind(kSealed, 0) == 0;
  const std::string fix = std::string("give every agent of the run the same ") + proto::kTokenEnv;
  if (!sealed) {
    if (!token.empty()) throw UsageError("run '" + run_id + "' in etcd was started without a join token: " + fix);
    return stored;
  }
  if (token.empty()) throw UsageError("run '" + run_id + "' in etcd was started with a join token: " + fix);
  const std::string_view body = std::string_view(stored).substr(kSealed.size());
  const auto colon = body.rfind(':');
  const auto cipher = colon == std::string_view::npos ? std::nullopt : bytes_of(body.substr(0, colon));
  if (!cipher) throw ProtocolError("run '" + run_id + "' in etcd holds a malformed secret");
  std::string secret = keystream(token, run_id, cipher->size());
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<char>(secret[i] ^ (*cipher)[i]);
  if (!equal_constant_time(body.substr(colon + 1), seal_tag(secret, token, run_id))) {
    throw UsageError("run '" + run_id + "' in etcd was started with another join token: " + fix);
  }
  return secret;
}

std::string join_timeout_message(const std::string& run_id, const RunRecord& run,
                                 const std::vector<proto::NodeInfo>& joined, double timeout_s) {
  std::string have;
  for (const auto& node : joined) have += fmt::format("{}{} (pid {})", have.empty() ? "" : ", ", node.host, node.pid);
  std::string missing;
  for (int rank : missing_ranks(run, joined)) missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
  return fmt::format(
      "rendezvous '{}' (etcd) timed out after {:.0f} s: {}/{} node(s) joined ({}); missing node rank(s): {}. Start "
      "the missing nodes, or lower --nnodes",
      run_id, timeout_s, joined.size(), run.min_nodes, have.empty() ? "none" : have,
      missing.empty() ? "none" : missing);
}

}  // namespace meshrun::launcher::etcd
