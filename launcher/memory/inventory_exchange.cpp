#include "launcher/memory/inventory_exchange.hpp"

#include <spdlog/spdlog.h>

#include "common/sha256.hpp"
#include "proto/store/store_board.hpp"

namespace meshrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

std::string key(const MemoryAttempt& attempt, int node) {
  return "meshrun/memory/" + std::to_string(attempt.round) + "/node/" + std::to_string(node);
}

// Connecting and each operation: a store host in trouble costs seconds, not a hang.
constexpr std::chrono::seconds kStoreTimeout{10};

std::string inventory_mac(const std::string& text, const std::string& store_key, const std::string& key) {
  return to_hex(hmac_sha256(key, "meshrun-inventory|" + store_key + "|" + text));
}

// Reads the nodes in `wanted` that are there, until all are or `wait` has passed.
std::map<int, Inventory> read_nodes(const MemoryAttempt& attempt, const std::vector<int>& wanted,
                                    const std::string& secret, std::chrono::milliseconds wait) {
  std::vector<std::string> keys;
  for (const int node : wanted) keys.push_back(key(attempt, node));
  proto::StoreBoard board(attempt.store, kStoreTimeout);
  std::map<int, Inventory> found;
  for (const auto& [index, value] :
       board.gather(keys, Clock::now() + wait, std::chrono::milliseconds(50), "the nodes' memory inventories")) {
    const int node = wanted[index];
    const auto verified = verified_inventory(value, keys[index], secret);
    if (!verified || verified->node != node) {
      spdlog::warn("memory: node {}'s inventory is malformed or not signed with the run's secret: ignored", node);
      continue;
    }
    found[node] = *verified;
  }
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
  proto::StoreBoard(attempt.store, kStoreTimeout)
      .post(key(attempt, attempt.node), signed_inventory(inventory, key(attempt, attempt.node), secret));
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
