// How the NCCL unique id reaches every rank of `meshrun-nccl-bench`: rank 0 creates it and SETs it in
// the run's store (MASTER_ADDR:MASTER_PORT, served by the rendezvous daemon); the other ranks GET it,
// bounded by a deadline. The same job llm.c does over a raw socket or a shared file. CPU only.
#pragma once

#include <string>

#include "common/clock.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::tools {

/// Rank 0 stores `id` under `key` and returns it; other ranks wait (up to `timeout`) and return the
/// stored bytes. Throws TimeoutError naming the key and rank 0 when it never arrives, ProtocolError
/// when the stored id does not have `id_bytes` bytes.
std::string exchange_unique_id(proto::StoreClient& store, const std::string& key, int rank, const std::string& id,
                               size_t id_bytes, Duration timeout);

}  // namespace meshrun::tools
