// A copy's bytes between two agents, each side of the copy port's two requests (proto/agents/copy_port_messages.hpp):
// the fetch's asking and serving sides, and the push's receiving side (the replicator sends pushes). The bytes
// travel with their Poly1305 tag under the connection's key (peer_auth.hpp); which copy, where it goes and
// whether it is kept is the keeper's to decide (memory_keeper.hpp), never this file's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/poly1305.hpp"
#include "launcher/memory/restore_plan.hpp"
#include "proto/agents/copy_port_messages.hpp"

namespace meshrun::launcher {

/// Asks `from` for the copy `request` names (proven with `key`) and receives it into the descriptor
/// `into(bytes, why)` gives for the size the peer announces (or sets `why`: not taken). "" once received and its
/// tag checked, else why not.
std::string fetch_copy(const CopySource& from, const std::string& key, const proto::CopyPortRequest& request,
                       const std::function<int(uint64_t bytes, std::string& why)>& into);

/// Serves a fetch: "ok" with `bytes`, the first `bytes` of `memfd`, their tag. Throws meshrun::Error when the
/// connection fails.
void send_fetched_copy(int socket, const Poly1305Key& key, int memfd, uint64_t bytes);

/// Receives a push: "go", then `bytes` into the start of `memfd` and their tag, checked. "" or why not.
std::string receive_pushed_copy(int socket, const Poly1305Key& key, int memfd, uint64_t bytes);

/// The push's last answer: ok when `why` is empty, else the failure. Never throws (the pusher may be gone).
void answer_push(int socket, const std::string& why);

}  // namespace meshrun::launcher
