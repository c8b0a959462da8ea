#include "tools/nccl_bench/nccl_id_exchange.hpp"

#include "common/error.hpp"

namespace meshrun::tools {

std::string exchange_unique_id(proto::StoreClient& store, const std::string& key, int rank, const std::string& id,
                               size_t id_bytes, Duration timeout) {
  if (rank == 0) {
    if (id.size() != id_bytes) throw ProtocolError("rank 0's NCCL unique id has the wrong size");
    store.set(key, id);
    return id;
  }
  try {
    store.wait({key}, timeout);
  } catch (const TimeoutError&) {
    throw TimeoutError("rank " + std::to_string(rank) + " did not receive the NCCL unique id (key '" + key + "' on " +
                       store.endpoint().to_string() + ") within " + std::to_string(to_seconds(timeout)) +
                       " s: has rank 0 started, and did it fail (see its output)?");
  }
  std::string stored = store.get(key);
  if (stored.size() != id_bytes) {
    throw ProtocolError("the NCCL unique id under '" + key + "' has " + std::to_string(stored.size()) +
                        " bytes, expected " + std::to_string(id_bytes) + ": another program uses that key?");
  }
  return stored;
}

}  // namespace meshrun::tools
