// Text values in a c10d store (which holds bytes): the start-up check and the intra-node transport choice
// publish strings under keys.
#pragma once

#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace meshrun::trainer {

inline std::string store_get_text(c10d::Store& store, const std::string& key) {
  const auto bytes = store.get(key);
  return {bytes.begin(), bytes.end()};
}

inline void store_set_text(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

}  // namespace meshrun::trainer
