// StoreBoard: a board in a round's workers' store where each node of the round posts its part under a key of its
// own and reads the others' as they arrive: the agents' hang inquiries (launcher/hang/hang_exchange) and their copy
// inventories (launcher/memory/inventory_exchange) both use it. One connection, made when first used with the
// deadlines given, dropped after an error and made again at the next read, so a store host in trouble costs a
// bounded wait and never hangs an agent.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/endpoint.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::proto {

class StoreBoard {
 public:
  using Clock = std::chrono::steady_clock;

  /// `timeout` bounds connecting and each operation.
  StoreBoard(Endpoint store, std::chrono::milliseconds timeout);

  /// Sets `key`. Throws meshrun::Error when the store cannot be reached.
  void post(const std::string& key, const std::string& value);
  /// The value of `key`, or nullopt when it is not there yet or the store cannot be reached (logged once per
  /// streak of failures, naming `what`).
  std::optional<std::string> read(const std::string& key, const std::string& what);
  /// The values of `keys` that are there before `deadline` (index in `keys` -> value), looked at again every
  /// `every` until all are; a store that cannot be reached meanwhile is logged (naming `what`) and tried again.
  std::map<size_t, std::string> gather(const std::vector<std::string>& keys, Clock::time_point deadline,
                                       std::chrono::milliseconds every, const std::string& what);
  /// The connection, for an exchange's own operations (compare_set); made when needed.
  StoreClient& client();
  const Endpoint& store() const { return store_; }

 private:
  /// Forgets the connection after `error` (logged once per streak).
  void failed(const std::string& what, const std::string& error);

  Endpoint store_;
  std::chrono::milliseconds timeout_;
  std::optional<StoreClient> client_;
  bool failing_ = false;
};

}  // namespace meshrun::proto
