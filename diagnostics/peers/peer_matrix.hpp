// The results of a pairwise bandwidth session and how they are shown: PeerNode (who took part),
// PairResult (one measured or failed pair), the merge of every node's report into one list, the N x N
// text tables (GB/s row -> column, round-trip latency) and the JSON form. Pure: no I/O, unit-tested.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshrun::diagnostics {

struct PeerNode {
  int index = 0;     // the instance's place in the session (join order)
  std::string host;  // its host name
  std::string addr;  // "ip:port" of its bandwidth listener, as published in the store
};

/// "#2 node2".
std::string node_label(const PeerNode& node);

struct PairResult {
  int a = 0;  // session indices, a < b; a connected to b's listener
  int b = 0;
  int round = 0;
  bool ok = false;
  std::string error;       // when !ok: what failed, naming the peer ("[refused] ...", "[timeout] ...")
  double a_to_b_gbps = 0;  // GB/s (1e9 bytes/s)
  double b_to_a_gbps = 0;
  uint64_t a_to_b_bytes = 0;
  uint64_t b_to_a_bytes = 0;
  double rtt_min_us = 0;  // round trip of an 8-byte ping-pong
  double rtt_avg_us = 0;
  double rtt_max_us = 0;
};

nlohmann::json pair_to_json(const PairResult& pair);
/// Throws ProtocolError when a field is missing or has the wrong type (a peer of another version).
PairResult pair_from_json(const nlohmann::json& j);

/// One entry per pair of `nodes` (in schedule order of a, b): a successful report wins over a failed
/// one (the two ends of a pair report separately); a pair nobody reported gets an error naming both.
std::vector<PairResult> merge_pairs(const std::vector<PeerNode>& nodes,
                                    const std::vector<std::vector<PairResult>>& reports);

/// Throughput in GB/s from the node at row r to the node at column c (positions in `nodes`);
/// nullopt on the diagonal and where the pair was not measured.
std::vector<std::vector<std::optional<double>>> throughput_matrix(const std::vector<PeerNode>& nodes,
                                                                  const std::vector<PairResult>& pairs);
/// Average round trip in microseconds (symmetric); nullopt as above.
std::vector<std::vector<std::optional<double>>> latency_matrix(const std::vector<PeerNode>& nodes,
                                                               const std::vector<PairResult>& pairs);

/// The two tables and one line per failed pair, each line indented by `indent` spaces.
std::string format_matrix(const std::vector<PeerNode>& nodes, const std::vector<PairResult>& pairs, int indent);

/// {"nodes": [...], "pairs": [...], "gbps": N x N, "rtt_us": N x N} (null where not measured).
nlohmann::json matrix_json(const std::vector<PeerNode>& nodes, const std::vector<PairResult>& pairs);

}  // namespace meshrun::diagnostics
