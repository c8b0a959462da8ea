// KvStore: the in-memory key-value state behind the TCPStore protocol, with the registry of pending
// waits. Pure data structure: no sockets, no threads. The server owns one per listening port, so runs
// that get their own store port never see each other's keys.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace meshrun::rendezvous {

/// Identifies one pending WAIT (the server uses a per-connection id).
using WaitId = uint64_t;
inline constexpr WaitId kNoWait = 0;  // never an id: registered ids start at 1

class KvStore {
 public:
  /// Stores `value`; returns the waits that became satisfied.
  std::vector<WaitId> set(const std::string& key, std::string value);
  std::optional<std::string> get(const std::string& key) const;
  /// Adds `delta` to the integer in `key` (absent = 0); returns the new value and fills `woken`. The
  /// stored value is read as PyTorch's server reads it (std::stoll): leading spaces, a sign, the digits up
  /// to the first other character (" 7" is 7, "12abc" 12, "1.5" 1). Throws std::invalid_argument when it
  /// starts with no number at all, std::out_of_range when the number does not fit.
  int64_t add(const std::string& key, int64_t delta, std::vector<WaitId>& woken);
  /// TCPStore compare_set semantics; returns the value now stored (or `expected` when absent and
  /// expected is non-empty, as c10d does).
  std::string compare_set(const std::string& key, const std::string& expected, std::string desired,
                          std::vector<WaitId>& woken);
  std::vector<WaitId> append(const std::string& key, const std::string& value);
  /// The bytes of the value at `key` (0 when there is none).
  size_t value_size(const std::string& key) const;
  bool erase(const std::string& key);
  bool contains(const std::string& key) const { return data_.count(key) != 0; }
  /// A value, or a non-empty queue (what CHECK and WAIT see, as in PyTorch's server).
  bool exists(const std::string& key) const { return contains(key) || queue_len(key) > 0; }
  size_t size() const { return data_.size(); }
  std::vector<std::string> keys() const;

  /// Queues (QUEUE_PUSH / POP / LEN): a list per key, separate from plain values.
  std::vector<WaitId> queue_push(const std::string& key, std::string value);
  std::optional<std::string> queue_pop(const std::string& key);
  int64_t queue_len(const std::string& key) const;

  /// BARRIER: counts one arrival in `key`; returns true (and fills `woken` with the callers parked
  /// before) when `world_size` arrived, else parks `id` until then.
  bool barrier(const std::string& key, int64_t world_size, WaitId id, std::vector<WaitId>& woken);

  /// Registers a wait for all `keys`. Returns true when they all exist already (nothing registered).
  bool add_wait(WaitId id, const std::vector<std::string>& keys);
  /// Removes a pending wait; returns false if it was not pending.
  bool cancel_wait(WaitId id);
  size_t pending_waits() const { return wait_missing_.size(); }

 private:
  void key_created(const std::string& key, std::vector<WaitId>& woken, bool only_one = false);

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<WaitId>> waiters_;  // key -> waits that need it
  std::unordered_map<WaitId, size_t> wait_missing_;               // wait -> keys still missing
  std::unordered_map<WaitId, std::vector<std::string>> wait_keys_;
  std::unordered_map<std::string, std::vector<WaitId>> barrier_waiters_;
};

}  // namespace meshrun::rendezvous
