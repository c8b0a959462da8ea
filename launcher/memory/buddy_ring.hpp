// The copies' ring (docs/design/in-memory-checkpoints.md, "buddy ring"): node g of a round of N nodes pushes its
// ranks' copies to node (g + 1) mod N, its buddy, and holds those of node (g - 1) mod N. Recomputed every round
// from that round's nodes; this is the one place it is computed.
#pragma once

#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher {

/// The node that holds `node`'s copies.
int buddy_of(int node, int nodes);
/// The node whose copies `node` holds.
int backed_node(int node, int nodes);

/// The global ranks one node backs: [first, first + count).
struct BackedRanks {
  int first = 0;
  int count = 0;
};

/// The ranks the node of `assignment` backs this round: from the round's node list, or, in a round too large to
/// list them, from the equal share every node runs.
BackedRanks backed_ranks(const proto::Assignment& assignment);

}  // namespace meshrun::launcher
