// The agents' inventories in the round's store (the workers' store: the daemon's run port, or node rank 0's
// store under etcd), one key per node: meshrun/memory/<round>/node/<g>. Each round's store is fresh, so a
// key is always this round's.
#pragma once

#include <chrono>
#include <map>
#include <optional>

#include "launcher/memory/memory_keeper.hpp"
#include "launcher/memory/restore_plan.hpp"

namespace meshrun::launcher {

/// Publishes this node's inventory; throws meshrun::Error when the store cannot be reached.
void publish_inventory(const MemoryAttempt& attempt, const Inventory& inventory);
/// Every node's inventory that arrived within `wait` (node -> inventory); malformed ones are skipped.
std::map<int, Inventory> gather_inventories(const MemoryAttempt& attempt, std::chrono::milliseconds wait);
/// Node `node`'s inventory, waiting up to `wait` for it.
std::optional<Inventory> read_inventory(const MemoryAttempt& attempt, int node, std::chrono::milliseconds wait);

}  // namespace meshrun::launcher
