// What a restart can restore from memory (docs/design/in-memory-checkpoints.md, "Restart"): every agent of
// the new round publishes its inventory (the committed copies it holds, its own ranks' and its buddy's
// replicas) in the round's store, reads every node's, and computes the same plan: the steps for which every
// rank of the world has a copy on some live node, newest first, and for each rank where its copy is (this
// node first, else the lowest node). Pure: the exchange is inventory_exchange's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/agents/memory_inventory.hpp"

namespace meshrun::launcher {

using proto::HeldCopy;  // what each agent publishes (proto/agents/memory_inventory.hpp)
using proto::Inventory;

/// Where one rank's copy of a step is.
struct CopySource {
  int node = -1;
  std::string host;
  std::string addr;
  int port = 0;
};

/// A step whose copies cover a whole world, with where each rank's copy is. A world of another size than
/// the round's (the job shrank) is restored by resharding: every rank reads the copies that overlap it.
struct RestoreCandidate {
  int64_t step = 0;
  int world_size = 0;                 // of the copies
  std::map<int, CopySource> holders;  // rank of that world -> the node to take it from
};

struct RestorePlan {
  std::vector<RestoreCandidate> candidates;  // newest first
  std::string why_none;                      // when there is none: what is missing
};

/// The plan from the inventories that arrived (node -> inventory), as seen by node `self` (its own copies
/// first): newest step first; at the same step, copies of the round's own `world_size` first.
RestorePlan plan_restore(const std::map<int, Inventory>& inventories, int world_size, int self);

}  // namespace meshrun::launcher
