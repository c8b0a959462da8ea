#include "proto/rules/round_policy.hpp"

#include <algorithm>

namespace meshrun::proto {

bool round_closes(const OpenRound& round) {
  const bool full = round.joined >= round.max_nodes;
  if (full && round.survivors_due == 0) return true;
  if (round.joined < round.min_nodes) return false;
  if (round.restart && round.survivors_out == 0) return true;
  if (!round.last_call_passed) return false;
  return round.survivors_due == 0 || !(full || round.newcomer_joined);
}

std::vector<size_t> seated(const std::vector<bool>& is_survivor, int max_nodes) {
  std::vector<size_t> order(is_survivor.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return is_survivor[i]; });
  order.resize(std::min(order.size(), static_cast<size_t>(std::max(max_nodes, 0))));
  std::sort(order.begin(), order.end());  // join order among the seated
  return order;
}

std::optional<std::string> too_few_nodes(const std::string& reason, int remaining, int min_nodes) {
  if (remaining >= min_nodes) return std::nullopt;
  return reason + "; " + std::to_string(remaining) + " node(s) remain, fewer than the minimum of " +
         std::to_string(min_nodes) + " (--nnodes)";
}

}  // namespace meshrun::proto
