#include "proto/store/store_board.hpp"

#include <spdlog/spdlog.h>

#include <thread>

#include "common/error.hpp"

namespace meshrun::proto {

StoreBoard::StoreBoard(Endpoint store, std::chrono::milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {}

StoreClient& StoreBoard::client() {
  if (!client_) {
    client_.emplace(StoreClient::connect(store_, ConnectOptions{.connect_timeout = timeout_, .op_timeout = timeout_}));
  }
  return *client_;
}

void StoreBoard::failed(const std::string& what, const std::string& error) {
  client_.reset();
  if (!failing_) spdlog::warn("cannot read {} from the workers' store {}: {}", what, store_.to_string(), error);
  failing_ = true;
}

void StoreBoard::post(const std::string& key, const std::string& value) { client().set(key, value); }

std::optional<std::string> StoreBoard::read(const std::string& key, const std::string& what) {
  try {
    const bool there = client().check({key});
    failing_ = false;
    if (!there) return std::nullopt;
    return client().get(key);
  } catch (const Error& e) {
    failed(what, e.what());
    return std::nullopt;
  }
}

std::map<size_t, std::string> StoreBoard::gather(const std::vector<std::string>& keys, Clock::time_point deadline,
                                                 std::chrono::milliseconds every, const std::string& what) {
  std::map<size_t, std::string> found;
  for (;;) {
    for (size_t i = 0; i < keys.size() && Clock::now() < deadline; ++i) {
      if (found.count(i) > 0) continue;
      if (auto value = read(keys[i], what)) found[i] = std::move(*value);
    }
    if (found.size() == keys.size() || Clock::now() >= deadline) return found;
    std::this_thread::sleep_for(every);
  }
}

}  // namespace meshrun::proto
