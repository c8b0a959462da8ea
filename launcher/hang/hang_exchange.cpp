#include "launcher/hang/hang_exchange.hpp"

#include <spdlog/spdlog.h>

namespace meshrun::launcher {

// Short deadlines: a hang inquiry must end even when the store host is the one in trouble.
HangExchange::HangExchange(Endpoint store, int64_t round, int node, int nodes)
    : board_(std::move(store), std::chrono::seconds(5)), round_(round), node_(node), nodes_(nodes) {}

std::string HangExchange::key(const std::string& part) const {
  return "meshrun/hang/" + std::to_string(round_) + "/" + std::to_string(inquiry_) + "/" + part;
}

proto::HangRequest HangExchange::request(const proto::HangRequest& request) {
  // compare_set keeps the first request: every node reads the same one.
  return proto::decode_hang_request(board_.client().compare_set(key("request"), "", proto::encode(request)));
}

std::optional<proto::HangRequest> HangExchange::poll(Clock::time_point now) {
  if (nodes_ <= 1 || now < next_poll_) return std::nullopt;
  next_poll_ = now + kPollEvery;
  const auto request = board_.read(key("request"), "hang requests");
  if (!request) return std::nullopt;
  return proto::decode_hang_request(*request);
}

void HangExchange::post(const std::string& kind, const nlohmann::json& part) {
  board_.post(key(kind + "/" + std::to_string(node_)), part.dump());
}

std::map<int, nlohmann::json> HangExchange::gather(const std::string& kind, Clock::time_point deadline) {
  std::vector<std::string> keys;
  for (int n = 0; n < nodes_; ++n) keys.push_back(key(kind + "/" + std::to_string(n)));
  std::map<int, nlohmann::json> parts;
  for (auto& [node, text] : board_.gather(keys, deadline, std::chrono::milliseconds(100), "the nodes' " + kind)) {
    try {
      parts[static_cast<int>(node)] = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      spdlog::warn("node {}'s {} for the hang verdict are malformed: {}", node, kind, e.what());
      parts[static_cast<int>(node)] = nlohmann::json();
    }
  }
  return parts;
}

}  // namespace meshrun::launcher
