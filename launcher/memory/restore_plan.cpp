#include "launcher/memory/restore_plan.hpp"

#include <algorithm>
#include <set>
#include <tuple>

#include "common/strings.hpp"

namespace meshrun::launcher {

namespace {

// (step, digest, world size): copies of one run's state at one step, in one layout.
using StepKey = std::tuple<int64_t, uint64_t, int>;

CopySource source_of(const Inventory& inventory) {
  return {inventory.node, inventory.host, inventory.addr, inventory.port};
}

// Ranks of [0, world) missing from `held`, as "1, 3-4".
std::string missing_ranks(const std::map<int, CopySource>& held, int world_size) {
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (held.count(r) == 0) missing.push_back(r);
  }
  return join(missing, ", ");
}

}  // namespace

RestorePlan plan_restore(const std::map<int, Inventory>& inventories, int world_size, int self) {
  std::map<StepKey, std::map<int, CopySource>> holders;
  for (const auto& [node, inventory] : inventories) {
    for (const auto& c : inventory.copies) {
      if (c.world_size <= 0 || c.rank < 0 || c.rank >= c.world_size) continue;
      auto& held = holders[{c.step, c.digest, c.world_size}];
      const auto it = held.find(c.rank);
      // This node first, else the lowest node: every agent names the same holder for another node's rank.
      const bool better = it == held.end() || node == self || (it->second.node != self && node < it->second.node);
      if (better) held[c.rank] = source_of(inventory);
    }
  }
  RestorePlan plan;
  std::string newest_incomplete;
  for (auto it = holders.rbegin(); it != holders.rend(); ++it) {
    const int64_t step = std::get<0>(it->first);
    const int world = std::get<2>(it->first);
    if (static_cast<int>(it->second.size()) == world) {
      plan.candidates.push_back({step, world, it->second});
    } else if (newest_incomplete.empty()) {
      newest_incomplete = "step " + std::to_string(step) + " lacks the copies of rank(s) " +
                          missing_ranks(it->second, world) + " on the nodes of this round";
    }
  }
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(), [world_size](const auto& a, const auto& b) {
    if (a.step != b.step) return a.step > b.step;
    return (a.world_size == world_size) > (b.world_size == world_size);
  });
  if (plan.candidates.empty()) {
    plan.why_none = !newest_incomplete.empty()
                        ? newest_incomplete
                        : "no node of this round holds a copy of a " + std::to_string(world_size) + "-rank world";
  }
  return plan;
}

}  // namespace meshrun::launcher
