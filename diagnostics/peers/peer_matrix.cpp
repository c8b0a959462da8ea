#include "diagnostics/peers/peer_matrix.hpp"

#include <cstdio>
#include <map>
#include <sstream>

#include "common/error.hpp"

namespace meshrun::diagnostics {
namespace {

using Matrix = std::vector<std::vector<std::optional<double>>>;

std::map<int, size_t> positions(const std::vector<PeerNode>& nodes) {
  std::map<int, size_t> pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i].index] = i;
  return pos;
}

Matrix empty_matrix(size_t n) { return Matrix(n, std::vector<std::optional<double>>(n)); }

std::string cell(const std::optional<double>& value, int digits, bool diagonal) {
  if (diagonal) return "-";
  if (!value) return "x";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, *value);
  return buf;
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
std::string pad_right(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

constexpr const char* kThroughputTitle = "GB/s row->col";
constexpr const char* kLatencyTitle = "rtt us";

void table(std::ostringstream& out, const std::string& title, const std::vector<PeerNode>& nodes, const Matrix& m,
           int digits, const std::string& margin) {
  // Both tables share one layout, so their columns line up.
  size_t label_width = std::string(kThroughputTitle).size();
  size_t col_width = 8;
  for (const auto& n : nodes) {
    label_width = std::max(label_width, node_label(n).size());
    col_width = std::max(col_width, node_label(n).size());
  }
  out << margin << pad_right(title, label_width);
  for (const auto& n : nodes) out << "  " << pad_left(node_label(n), col_width);
  out << "\n";
  for (size_t r = 0; r < nodes.size(); ++r) {
    out << margin << pad_right(node_label(nodes[r]), label_width);
    for (size_t c = 0; c < nodes.size(); ++c) out << "  " << pad_left(cell(m[r][c], digits, r == c), col_width);
    out << "\n";
  }
}

template <typename T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.is_object() || !j.contains(name))
    throw ProtocolError(std::string("bandwidth pair report lacks '") + name + "'");
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ProtocolError(std::string("bandwidth pair report: '") + name + "' has the wrong type");
  }
}

}  // namespace

std::string node_label(const PeerNode& node) {
  // Appending (not operator+ chains on a temporary) sidesteps GCC 12's false -Wrestrict positive.
  std::string label = "#";
  label += std::to_string(node.index);
  label += ' ';
  label += node.host;
  return label;
}

nlohmann::json pair_to_json(const PairResult& p) {
  return {{"a", p.a},
          {"b", p.b},
          {"round", p.round},
          {"ok", p.ok},
          {"error", p.error},
          {"a_to_b_gbps", p.a_to_b_gbps},
          {"b_to_a_gbps", p.b_to_a_gbps},
          {"a_to_b_bytes", p.a_to_b_bytes},
          {"b_to_a_bytes", p.b_to_a_bytes},
          {"rtt_min_us", p.rtt_min_us},
          {"rtt_avg_us", p.rtt_avg_us},
          {"rtt_max_us", p.rtt_max_us}};
}

PairResult pair_from_json(const nlohmann::json& j) {
  PairResult p;
  p.a = field<int>(j, "a");
  p.b = field<int>(j, "b");
  p.round = field<int>(j, "round");
  p.ok = field<bool>(j, "ok");
  p.error = field<std::string>(j, "error");
  p.a_to_b_gbps = field<double>(j, "a_to_b_gbps");
  p.b_to_a_gbps = field<double>(j, "b_to_a_gbps");
  p.a_to_b_bytes = field<uint64_t>(j, "a_to_b_bytes");
  p.b_to_a_bytes = field<uint64_t>(j, "b_to_a_bytes");
  p.rtt_min_us = field<double>(j, "rtt_min_us");
  p.rtt_avg_us = field<double>(j, "rtt_avg_us");
  p.rtt_max_us = field<double>(j, "rtt_max_us");
  return p;
}

std::vector<PairResult> merge_pairs(const std::vector<PeerNode>& nodes,
                                    const std::vector<std::vector<PairResult>>& reports) {
  std::map<std::pair<int, int>, PairResult> best;
  for (const auto& report : reports) {
    for (const auto& p : report) {
      const auto key = std::make_pair(p.a, p.b);
      auto it = best.find(key);
      // Either end may have seen the failure first; a success from the other end is the truth.
      if (it == best.end() || (!it->second.ok && p.ok)) best[key] = p;
    }
  }
  std::vector<PairResult> merged;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t k = i + 1; k < nodes.size(); ++k) {
      const int a = std::min(nodes[i].index, nodes[k].index);
      const int b = std::max(nodes[i].index, nodes[k].index);
      auto it = best.find({a, b});
      if (it != best.end()) {
        merged.push_back(it->second);
        continue;
      }
      PairResult missing;
      missing.a = a;
      missing.b = b;
      missing.error = "neither " + node_label(nodes[i]) + " nor " + node_label(nodes[k]) + " reported this pair";
      merged.push_back(missing);
    }
  }
  return merged;
}

Matrix throughput_matrix(const std::vector<PeerNode>& nodes, const std::vector<PairResult>& pairs) {
  const auto pos = positions(nodes);
  Matrix m = empty_matrix(nodes.size());
  for (const auto& p : pairs) {
    if (!p.ok || !pos.count(p.a) || !pos.count(p.b)) continue;
    m[pos.at(p.a)][pos.at(p.b)] = p.a_to_b_gbps;
    m[pos.at(p.b)][pos.at(p.a)] = p.b_to_a_gbps;
  }
  return m;
}

Matrix latency_matrix(const std::vector<PeerNode>& nodes, const std::vector<PairResult>& pairs) {
  const auto pos = positions(nodes);
  Matrix m = empty_matrix(nodes.size());
  for (const auto& p : pairs) {
    if (!p.ok || !pos.count(p.a) || !pos.count(p.b)) continue;
    m[pos.at(p.a)][pos.at(p.b)] = p.rtt_avg_us;
    m[pos.at(p.b)][pos.at(p.a)] = p.rtt_avg_us;
  }
  return m;
}

std::string format_matrix(const std::vector<PeerNode>& nodes, const std::vector<PairResult>& pairs, int indent) {
  const std::string margin(static_cast<size_t>(std::max(indent, 0)), ' ');
  std::ostringstream out;
  table(out, kThroughputTitle, nodes, throughput_matrix(nodes, pairs), 3, margin);
  table(out, kLatencyTitle, nodes, latency_matrix(nodes, pairs), 1, margin);
  std::map<int, const PeerNode*> by_index;
  for (const auto& n : nodes) by_index[n.index] = &n;
  for (const auto& p : pairs) {
    if (p.ok) continue;
    const auto label = [&](int i) {
      return by_index.count(i) ? node_label(*by_index[i]) : node_label(PeerNode{i, "?", ""});
    };
    out << margin << "x " << label(p.a) << " <-> " << label(p.b) << ": " << p.error << "\n";
  }
  return out.str();
}

nlohmann::json matrix_json(const std::vector<PeerNode>& nodes, const std::vector<PairResult>& pairs) {
  const auto to_json = [](const Matrix& m) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : m) {
      nlohmann::json r = nlohmann::json::array();
      for (const auto& v : row) r.push_back(v ? nlohmann::json(*v) : nlohmann::json(nullptr));
      rows.push_back(std::move(r));
    }
    return rows;
  };
  nlohmann::json node_list = nlohmann::json::array();
  for (const auto& n : nodes) node_list.push_back({{"index", n.index}, {"host", n.host}, {"addr", n.addr}});
  nlohmann::json pair_list = nlohmann::json::array();
  for (const auto& p : pairs) pair_list.push_back(pair_to_json(p));
  return {{"nodes", node_list},
          {"pairs", pair_list},
          {"gbps", to_json(throughput_matrix(nodes, pairs))},
          {"rtt_us", to_json(latency_matrix(nodes, pairs))}};
}

}  // namespace meshrun::diagnostics
