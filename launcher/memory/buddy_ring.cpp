#include "launcher/memory/buddy_ring.hpp"

#include <algorithm>

namespace meshrun::launcher {

int buddy_of(int node, int nodes) { return nodes <= 0 ? node : (node + 1) % nodes; }

int backed_node(int node, int nodes) { return nodes <= 0 ? node : (node + nodes - 1) % nodes; }

BackedRanks backed_ranks(const proto::Assignment& assignment) {
  const int nodes = std::max(1, assignment.group_world_size);
  const int backed = backed_node(assignment.group_rank, nodes);
  if (static_cast<int>(assignment.nodes.size()) == nodes) {
    int first = 0;
    for (const auto& n : assignment.nodes) {
      if (n.group_rank == backed) return {first, n.local_world_size};
      if (n.group_rank >= 0 && n.group_rank < backed) first += n.local_world_size;
    }
  }
  const int each = assignment.world_size / nodes;
  return {backed * each, each};
}

}  // namespace meshrun::launcher
