#include "launcher/memory/inventory_exchange.hpp"

#include <spdlog/spdlog.h>

#include <thread>

#include "common/error.hpp"
#include "common/sha256.hpp"
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

std::string inventory_mac(const std::string& text, const std::string& store_key, const std::string& key) {
  return to_hex(hmac_sha256(key, "meshrun-inventory|" + store_key + "|" + text));
}

// Reads the nodes in `wanted` that are there, until all are or `wait` has passed.
std::map<int, Inventory> read_nodes(const MemoryAttempt& attempt, const std::vector<int>& wanted,
                                    const std::string& secret, std::chrono::milliseconds wait) {
  std::map<int, Inventory> found;
  const auto deadline = Clock::now() + wait;
  try {
    proto::StoreClient client = connect(attempt);
    for (;;) {
      for (const int node : wanted) {
        if (found.count(node) > 0 || !client.check({key(attempt, node)})) continue;
        const auto verified = verified_inventory(client.get(key(attempt, node)), key(attempt, node), secret);
        if (!verified || verified->node != node) {
          spdlog::warn("memory: node {}'s inventory is malformed or not signed with the run's secret: ignored", node);
        }
        found[node] = verified && verified->node == node ? *verified : Inventory{};
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

std::string signed_inventory(const Inventory& inventory, const std::string& store_key, const std::string& key) {
  const std::string text = nlohmann::json(inventory).dump();
  return nlohmann::json{{"inventory", text}, {"mac", inventory_mac(text, store_key, key)}}.dump();
}

std::optional<Inventory> verified_inventory(const std::string& value, const std::string& store_key,
                                            const std::string& key) {
  if (key.empty()) return std::nullopt;
  const auto outer = nlohmann::json::parse(value, nullptr, false);
  if (!outer.is_object() || !outer.contains("inventory") || !outer.contains("mac") || !outer["inventory"].is_string() ||
      !outer["mac"].is_string())
    return std::nullopt;
  const std::string text = outer["inventory"].get<std::string>();
  if (!equal_constant_time(outer["mac"].get<std::string>(), inventory_mac(text, store_key, key))) return std::nullopt;
  try {
    return nlohmann::json::parse(text).get<Inventory>();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

void publish_inventory(const MemoryAttempt& attempt, const Inventory& inventory, const std::string& secret) {
  connect(attempt).set(key(attempt, attempt.node), signed_inventory(inventory, key(attempt, attempt.node), secret));
}

std::map<int, Inventory> gather_inventories(const MemoryAttempt& attempt, const std::string& secret,
                                            std::chrono::milliseconds wait) {
  std::vector<int> nodes;
  for (int n = 0; n < attempt.nodes; ++n) nodes.push_back(n);
  return read_nodes(attempt, nodes, secret, wait);
}

std::optional<Inventory> read_inventory(const MemoryAttempt& attempt, int node, const std::string& secret,
                                        std::chrono::milliseconds wait) {
  auto found = read_nodes(attempt, {node}, secret, wait);
  if (found.empty()) return std::nullopt;
  return found.begin()->second;
}

}  // namespace meshrun::launcher
