#include "launcher/hang/hang_exchange.hpp"

#include <spdlog/spdlog.h>

#include <thread>

namespace meshrun::launcher {

HangExchange::HangExchange(Endpoint store, int64_t round, int node, int nodes)
    : store_(std::move(store)), round_(round), node_(node), nodes_(nodes) {}

std::string HangExchange::key(const std::string& part) const {
  return "meshrun/hang/" + std::to_string(round_) + "/" + std::to_string(inquiry_) + "/" + part;
}

proto::StoreClient& HangExchange::client() {
  if (!client_) {
    // Short deadlines: a hang inquiry must end even when the store host is the one in trouble.
    client_.emplace(proto::StoreClient::connect(
        store_,
        proto::ConnectOptions{.connect_timeout = std::chrono::seconds(5), .op_timeout = std::chrono::seconds(5)}));
  }
  return *client_;
}

proto::HangRequest HangExchange::request(const proto::HangRequest& request) {
  // compare_set keeps the first request: every node reads the same one.
  return proto::decode_hang_request(client().compare_set(key("request"), "", proto::encode(request)));
}

std::optional<proto::HangRequest> HangExchange::poll(Clock::time_point now) {
  if (nodes_ <= 1 || now < next_poll_) return std::nullopt;
  next_poll_ = now + kPollEvery;
  try {
    if (!client().check({key("request")})) return std::nullopt;
    return proto::decode_hang_request(client().get(key("request")));
  } catch (const Error& e) {
    client_.reset();
    if (!warned_)
      spdlog::warn("cannot read hang requests from the workers' store {}: {}", store_.to_string(), e.what());
    warned_ = true;
    return std::nullopt;
  }
}

void HangExchange::post(const std::string& kind, const nlohmann::json& part) {
  client().set(key(kind + "/" + std::to_string(node_)), part.dump());
}

std::map<int, nlohmann::json> HangExchange::gather(const std::string& kind, Clock::time_point deadline) {
  std::map<int, nlohmann::json> parts;
  for (;;) {
    for (int n = 0; n < nodes_ && Clock::now() < deadline; ++n) {
      if (parts.count(n) > 0) continue;
      try {
        const std::string part = key(kind + "/" + std::to_string(n));
        if (client().check({part})) parts[n] = nlohmann::json::parse(client().get(part));
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
