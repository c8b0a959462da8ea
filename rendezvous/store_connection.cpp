#include "rendezvous/store_connection.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "proto/store/reply.hpp"

namespace meshrun::rendezvous {

using proto::CheckResponse;
using proto::QueryType;
using proto::WaitResponse;

namespace {

bool all_present(const KvStore& store, const std::vector<std::string>& keys) {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return store.exists(k); });
}

// MULTI_GET: a missing key reads as "" (clients WAIT first).
std::vector<std::string> values_of(const KvStore& store, const std::vector<std::string>& keys) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(store.get(k).value_or(std::string()));
  return values;
}

}  // namespace

StoreConnection::StoreConnection(ConnectionHost& host, ConnectionTransport& transport, std::shared_ptr<KvStore> store,
                                 ConnectionPeer peer, bool allowed)
    : host_(host), transport_(transport), store_(std::move(store)), peer_(std::move(peer)), allowed_(allowed) {}

/// Runs `fn`; an exception closes this connection only.
template <typename Fn>
bool StoreConnection::guarded(Fn&& fn) {
  try {
    fn();
    return !closed_;
  } catch (const std::exception& e) {
    close(std::string("request failed: ") + e.what());
    return false;
  }
}

void StoreConnection::receive(std::string_view bytes) {
  if (closed_) return;
  in_.append(bytes);
  // A client may pipeline while blocked, but not without bound.
  if (in_.size() > host_.limits().max_value_bytes + 2 * host_.limits().max_key_bytes + 4096) {
    close("too many bytes buffered while a request is pending");
    return;
  }
  pump();
}

void StoreConnection::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  if (!reason.empty()) spdlog::warn("closing connection from {}: {}", peer_.endpoint, reason);
  if (blocked_ == Blocked::kWait) {
    store_->cancel_wait(wait_id_);
    host_.forget_wait(wait_id_);
  }
  std::string last;
  last.swap(pending_);  // best effort: a last error reply
  transport_.hang_up(last);
  host_.on_closed(shared_from_this());
}

void StoreConnection::wake() {
  if (closed_ || blocked_ != Blocked::kWait) return;
  blocked_ = Blocked::kNone;
  host_.forget_wait(wait_id_);
  auto ready = std::move(on_ready_);
  on_ready_ = nullptr;
  guarded([&] { ready(); });
  pump();
}

void StoreConnection::finish_await(const nlohmann::json& reply) {
  if (closed_ || blocked_ != Blocked::kAwait) return;
  blocked_ = Blocked::kNone;
  send(proto::encode_string(reply.dump()));
  pump();
}

void StoreConnection::pump() {
  for (;;) {
    const bool stopped_for_backlog = process();
    if (closed_) return;
    if (!pending_.empty()) transport_.deliver(pending_);
    // The transport took the whole backlog at once: nothing will call back, so go on with what is buffered.
    if (!stopped_for_backlog || closed_ || backlogged()) return;
  }
}

bool StoreConnection::process() {
  // A client that sends requests but does not read the replies waits here (and do_read stops).
  while (!closed_ && !in_.empty()) {
    if (backlogged()) return true;
    proto::Request request;
    const auto result = proto::decode_request(in_, host_.limits(), request);
    if (result.status == proto::DecodeStatus::kNeedMore) return false;
    if (result.status == proto::DecodeStatus::kMalformed) {
      close("malformed request: " + result.error);
      return false;
    }
    if (blocked_ != Blocked::kNone) {
      // Only CANCEL_WAIT may overtake a pending wait; everything else waits its turn.
      if (blocked_ == Blocked::kWait && request.type == QueryType::kCancelWait) {
        in_.erase(0, result.consumed);
        store_->cancel_wait(wait_id_);
        host_.forget_wait(wait_id_);
        on_ready_ = nullptr;
        blocked_ = Blocked::kNone;
        send(proto::encode_status(WaitResponse::kWaitCanceled));
        continue;
      }
      return false;
    }
    in_.erase(0, result.consumed);
    SPDLOG_TRACE("{} {}", peer_.endpoint, proto::query_name(static_cast<uint8_t>(request.type)));
    if (!guarded([&] { handle(request); })) return false;
  }
  return false;
}

// Peers outside --allow get a readable answer only if they speak meshrun; anything else is dropped.
void StoreConnection::handle_rejected(const proto::Request& r) {
  if (r.type == QueryType::kValidate) return;
  if (r.type == QueryType::kPing) {  // answered, so a diagnosing client can tell "rejected" from "dead"
    send(proto::encode_nonce(static_cast<uint32_t>(r.number)));
    return;
  }
  if (r.type == QueryType::kMeshrun) {
    send(proto::encode_string(nlohmann::json{
        {"error", "peer " + peer_.endpoint + " is not allowed to use this daemon (see its --allow rules)"}}
                                  .dump()));
  }
  close("peer not allowed by --allow");
}

void StoreConnection::handle(const proto::Request& r) {
  if (!allowed_) return handle_rejected(r);
  switch (r.type) {
    case QueryType::kValidate:
      if (static_cast<uint32_t>(r.number) != proto::kValidationMagic)
        close("bad validation magic: not a TCPStore client");
      return;
    case QueryType::kPing: send(proto::encode_nonce(static_cast<uint32_t>(r.number))); return;
    case QueryType::kWait:
      block_until(r.keys, [this] { send(proto::encode_status(WaitResponse::kStopWaiting)); });
      return;
    case QueryType::kCancelWait: send(proto::encode_status(WaitResponse::kWaitCanceled)); return;
    case QueryType::kBarrier: return handle_barrier(r);
    case QueryType::kMeshrun: return handle_meshrun(r);
    case QueryType::kSet:
    case QueryType::kCompareSet:
    case QueryType::kGet:
    case QueryType::kAdd:
    case QueryType::kCheck:
    case QueryType::kGetNumKeys:
    case QueryType::kDeleteKey:
    case QueryType::kAppend:
    case QueryType::kMultiGet:
    case QueryType::kMultiSet:
    case QueryType::kQueuePush:
    case QueryType::kQueuePop:
    case QueryType::kQueueLen:
    case QueryType::kListKeys: return handle_store(r);
  }
}

// The queries that read or change the key-value store; writes wake the waits they satisfy.
void StoreConnection::handle_store(const proto::Request& r) {
  KvStore& store = *store_;
  std::vector<WaitId> woken;
  switch (r.type) {
    case QueryType::kSet: woken = store.set(r.keys[0], r.values[0]); break;
    case QueryType::kCompareSet:
      send(proto::encode_string(store.compare_set(r.keys[0], r.values[0], r.values[1], woken)));
      break;
    // Clients WAIT before GET; a raw GET of a missing key gets "" (as PyTorch's libuv server does).
    case QueryType::kGet: send(proto::encode_string(store.get(r.keys[0]).value_or(std::string()))); break;
    case QueryType::kAdd: send(proto::encode_int64(store.add(r.keys[0], r.number, woken))); break;
    case QueryType::kCheck:
      send(proto::encode_status(all_present(store, r.keys) ? CheckResponse::kReady : CheckResponse::kNotReady));
      break;
    case QueryType::kGetNumKeys: send(proto::encode_int64(static_cast<int64_t>(store.size()))); break;
    case QueryType::kDeleteKey: send(proto::encode_int64(store.erase(r.keys[0]) ? 1 : 0)); break;
    case QueryType::kAppend:
      // Each APPEND fits the message cap; their sum must too, or one key grows the daemon without bound.
      if (store.value_size(r.keys[0]) + r.values[0].size() > host_.limits().max_value_bytes) {
        close("APPEND would grow key '" + r.keys[0].substr(0, 64) + "' past " +
              std::to_string(host_.limits().max_value_bytes) + " bytes (--max-message-bytes)");
        return;
      }
      woken = store.append(r.keys[0], r.values[0]);
      break;
    case QueryType::kMultiGet: send(proto::encode_strings(values_of(store, r.keys))); break;
    case QueryType::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) {
        auto ids = store.set(r.keys[i], r.values[i]);
        woken.insert(woken.end(), ids.begin(), ids.end());
      }
      break;
    case QueryType::kQueuePush: woken = store.queue_push(r.keys[0], r.values[0]); break;
    case QueryType::kQueuePop: {
      const int64_t length_before = store.queue_len(r.keys[0]);
      send(proto::encode_queue_pop(length_before, store.queue_pop(r.keys[0])));
      break;
    }
    case QueryType::kQueueLen: send(proto::encode_int64(store.queue_len(r.keys[0]))); break;
    case QueryType::kListKeys: send(proto::encode_string_list(store.keys())); break;
    default: close("query " + std::to_string(static_cast<int>(r.type)) + " is not a store query"); return;
  }
  host_.wake(woken);
}

// BARRIER: the count lives in the key itself; the last arrival releases everyone parked on it.
void StoreConnection::handle_barrier(const proto::Request& r) {
  std::vector<WaitId> woken;
  const WaitId id = host_.register_wait(shared_from_this(), 1);
  if (id == kNoWait) {
    close_over_wait_cap(1);
    return;
  }
  if (store_->barrier(r.keys[0], r.number, id, woken)) {
    host_.forget_wait(id);
    send(proto::encode_status(WaitResponse::kStopWaiting));
  } else {
    wait_id_ = id;
    on_ready_ = [this] { send(proto::encode_status(WaitResponse::kStopWaiting)); };
    blocked_ = Blocked::kWait;
  }
  host_.wake(woken);
}

void StoreConnection::handle_meshrun(const proto::Request& r) {
  auto request = nlohmann::json::parse(r.values[0], nullptr, false);
  if (request.is_discarded() || !request.is_object()) {
    close("meshrun request is not a JSON object");
    return;
  }
  auto reply = host_.handle_meshrun(shared_from_this(), request);
  if (reply) {
    send(proto::encode_string(reply->dump()));
  } else {
    blocked_ = Blocked::kAwait;
  }
}

void StoreConnection::block_until(const std::vector<std::string>& keys, std::function<void()> on_ready) {
  const WaitId id = host_.register_wait(shared_from_this(), keys.size());
  if (id == kNoWait) {
    close_over_wait_cap(keys.size());
    return;
  }
  if (store_->add_wait(id, keys)) {
    host_.forget_wait(id);
    on_ready();
    return;
  }
  wait_id_ = id;
  on_ready_ = std::move(on_ready);
  blocked_ = Blocked::kWait;
}

void StoreConnection::close_over_wait_cap(size_t keys) {
  close("a wait on " + std::to_string(keys) + " key(s) would take " + peer_.address + " past " +
        std::to_string(host_.limits().max_waited_keys_per_peer) +
        " keys waited on at once, over all its connections (a daemon limit)");
}

}  // namespace meshrun::rendezvous
