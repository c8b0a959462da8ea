#include "launcher/memory/inventory_exchange.hpp"

#include <spdlog/spdlog.h>

#include <thread>

#include "common/error.hpp"
#include "proto/store_client.hpp"

namespace meshrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

std::string key(const MemoryAttempt& attempt, int node) {
  return "meshrun/memory/" + std::to_string(attempt.round) + "/node/" + std::to_string(node);
}

proto::StoreClient connect(const MemoryAttempt& attempt) {
  return proto::StoreClient::connect(attempt.store, proto::ConnectOptions{.connect_timeout = std::chrono::seconds(10),
                                                                          .op_timeout = std::chrono::seconds(10)});
}

// Reads the nodes in `wanted` that are there, until all are or `wait` has passed.
std::map<int, Inventory> read_nodes(const MemoryAttempt& attempt, const std::vector<int>& wanted,
                                    std::chrono::milliseconds wait) {
  std::map<int, Inventory> found;
  const auto deadline = Clock::now() + wait;
  try {
    proto::StoreClient client = connect(attempt);
    for (;;) {
      for (const int node : wanted) {
        if (found.count(node) > 0 || !client.check({key(attempt, node)})) continue;
        try {
          found[node] = nlohmann::json::parse(client.get(key(attempt, node))).get<Inventory>();
        } catch (const nlohmann::json::exception& e) {
          spdlog::warn("memory: node {}'s inventory is malformed: {}", node, e.what());
          found[node] = Inventory{};
        }
      }
      if (found.size() == wanted.size() || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const Error& e) {
    spdlog::warn("memory: cannot read the inventories from the workers' store {}: {}", attempt.store.to_string(),
                 e.what());
  }
  std::erase_if(found, [](const auto& entry) { return entry.second.node < 0; });
  return found;
}

}  // namespace

void publish_inventory(const MemoryAttempt& attempt, const Inventory& inventory) {
  connect(attempt).set(key(attempt, attempt.node), nlohmann::json(inventory).dump());
}

std::map<int, Inventory> gather_inventories(const MemoryAttempt& attempt, std::chrono::milliseconds wait) {
  std::vector<int> nodes;
  for (int n = 0; n < attempt.nodes; ++n) nodes.push_back(n);
  return read_nodes(attempt, nodes, wait);
}

std::optional<Inventory> read_inventory(const MemoryAttempt& attempt, int node, std::chrono::milliseconds wait) {
  auto found = read_nodes(attempt, {node}, wait);
  if (found.empty()) return std::nullopt;
  return found.begin()->second;
}

}  // namespace meshrun::launcher
