#include "launcher/hang/hang_exchange.hpp"

#include <spdlog/spdlog.h>

#include <thread>

namespace meshrun::launcher {
namespace {

constexpr const char* kRequestKey = "meshrun/hang/request";

std::string part_key(const std::string& kind, int node) { return "meshrun/hang/" + kind + "/" + std::to_string(node); }

}  // namespace

HangExchange::HangExchange(Endpoint store, int node, int nodes)
    : store_(std::move(store)), node_(node), nodes_(nodes) {}

proto::StoreClient& HangExchange::client() {
  if (!client_) {
    // Short deadlines: a hang inquiry must end even when the store host is the one in trouble.
    client_.emplace(proto::StoreClient::connect(
        store_,
        proto::ConnectOptions{.connect_timeout = std::chrono::seconds(5), .op_timeout = std::chrono::seconds(5)}));
  }
  return *client_;
}

std::string HangExchange::request(const std::string& reason) {
  // compare_set keeps the first request: every node reads the same one.
  return client().compare_set(kRequestKey, "", reason);
}

std::optional<std::string> HangExchange::poll(Clock::time_point now) {
  if (nodes_ <= 1 || now < next_poll_) return std::nullopt;
  next_poll_ = now + kPollEvery;
  try {
    if (!client().check({kRequestKey})) return std::nullopt;
    return client().get(kRequestKey);
  } catch (const Error& e) {
    client_.reset();
    if (!warned_)
      spdlog::warn("cannot read hang requests from the workers' store {}: {}", store_.to_string(), e.what());
    warned_ = true;
    return std::nullopt;
  }
}

void HangExchange::post(const std::string& kind, const nlohmann::json& part) {
  client().set(part_key(kind, node_), part.dump());
}

std::map<int, nlohmann::json> HangExchange::gather(const std::string& kind, Clock::time_point deadline) {
  std::map<int, nlohmann::json> parts;
  for (;;) {
    for (int n = 0; n < nodes_; ++n) {
      if (parts.count(n) > 0) continue;
      try {
        const std::string key = part_key(kind, n);
        if (client().check({key})) parts[n] = nlohmann::json::parse(client().get(key));
      } catch (const nlohmann::json::exception& e) {
        spdlog::warn("node {}'s {} for the hang verdict are malformed: {}", n, kind, e.what());
        parts[n] = nlohmann::json();
      } catch (const Error& e) {
        client_.reset();
        spdlog::warn("cannot read node {}'s {} from the workers' store: {}", n, kind, e.what());
      }
    }
    if (static_cast<int>(parts.size()) >= nodes_ || Clock::now() >= deadline) return parts;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace meshrun::launcher
