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

// The store has no authentication: each inventory is signed with the copy key (the run's secret, and the join token
// when there is one; MemoryKeeper::copy_key), over its text and its key in the store, so that whoever can write the
// store cannot point an agent at a copy port of their own, nor move one node's inventory under another's key.
//   meshrun/memory/<round>/node/<g> = {"inventory": "<the Inventory's JSON>", "mac": HMAC-SHA256 hex}

/// Publishes this node's inventory, signed with `key`; throws meshrun::Error when the store cannot be reached.
void publish_inventory(const MemoryAttempt& attempt, const Inventory& inventory, const std::string& key);
/// Every node's inventory that arrived within `wait` (node -> inventory); malformed or unsigned ones are skipped.
std::map<int, Inventory> gather_inventories(const MemoryAttempt& attempt, const std::string& key,
                                            std::chrono::milliseconds wait);
/// Node `node`'s inventory, waiting up to `wait` for it.
std::optional<Inventory> read_inventory(const MemoryAttempt& attempt, int node, const std::string& key,
                                        std::chrono::milliseconds wait);
/// The signed value published for `inventory` under `store_key`, and its reading (nullopt: not signed with `key`,
/// or malformed); exposed for the tests.
std::string signed_inventory(const Inventory& inventory, const std::string& store_key, const std::string& key);
std::optional<Inventory> verified_inventory(const std::string& value, const std::string& store_key,
                                            const std::string& key);

}  // namespace meshrun::launcher
