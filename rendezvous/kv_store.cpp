#include "rendezvous/kv_store.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

namespace meshrun::rendezvous {
namespace {

// std::stoll's reading, without its locale and exceptions' wording: spaces, a sign, the leading digits.
int64_t leading_int64(const std::string& text, const std::string& key) {
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end && std::isspace(static_cast<unsigned char>(*p)) != 0) ++p;
  if (p < end && *p == '+') ++p;
  int64_t value = 0;
  const auto [stop, ec] = std::from_chars(p, end, value);
  if (ec == std::errc::result_out_of_range) {
    throw std::out_of_range("add on key '" + key + "': its value '" + text.substr(0, 40) + "' does not fit 64 bits");
  }
  if (ec != std::errc() || stop == p) {
    throw std::invalid_argument("add on key '" + key + "' whose value '" + text.substr(0, 40) +
                                "' does not start with an integer");
  }
  return value;
}

}  // namespace

void KvStore::key_created(const std::string& key, std::vector<WaitId>& woken, bool only_one) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& ids = it->second;
  size_t handled = 0;
  for (; handled < ids.size(); ++handled) {
    const WaitId id = ids[handled];
    auto missing = wait_missing_.find(id);
    if (missing == wait_missing_.end()) continue;
    if (--missing->second == 0) {
      wait_missing_.erase(missing);
      wait_keys_.erase(id);
      woken.push_back(id);
      if (only_one) {
        ++handled;
        break;
      }
    }
  }
  ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(handled));
  if (ids.empty()) waiters_.erase(it);
}

bool KvStore::barrier(const std::string& key, int64_t world_size, WaitId id, std::vector<WaitId>& woken) {
  const int64_t arrived = add(key, 1, woken);
  if (arrived < world_size) {
    barrier_waiters_[key].push_back(id);
    return false;
  }
  if (auto it = barrier_waiters_.find(key); it != barrier_waiters_.end()) {
    woken.insert(woken.end(), it->second.begin(), it->second.end());
    barrier_waiters_.erase(it);
  }
  return true;
}

std::vector<WaitId> KvStore::set(const std::string& key, std::string value) {
  std::vector<WaitId> woken;
  data_[key] = std::move(value);
  key_created(key, woken);
  return woken;
}

std::optional<std::string> KvStore::get(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

int64_t KvStore::add(const std::string& key, int64_t delta, std::vector<WaitId>& woken) {
  int64_t current = 0;
  if (auto it = data_.find(key); it != data_.end()) {
    current = leading_int64(it->second, key);
  }
  // Wrap like the two's complement int64 the client sends instead of overflowing (UB).
  current = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
  data_[key] = std::to_string(current);
  key_created(key, woken);
  return current;
}

std::string KvStore::compare_set(const std::string& key, const std::string& expected, std::string desired,
                                 std::vector<WaitId>& woken) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return expected;
    data_[key] = desired;
    key_created(key, woken);
    return desired;
  }
  if (it->second == expected) it->second = std::move(desired);
  return it->second;
}

std::vector<WaitId> KvStore::append(const std::string& key, const std::string& value) {
  std::vector<WaitId> woken;
  auto [it, inserted] = data_.try_emplace(key);
  it->second += value;
  if (inserted) key_created(key, woken);
  return woken;
}

size_t KvStore::value_size(const std::string& key) const {
  const auto it = data_.find(key);
  return it == data_.end() ? 0 : it->second.size();
}

bool KvStore::erase(const std::string& key) { return data_.erase(key) > 0; }

std::vector<std::string> KvStore::keys() const {
  std::vector<std::string> out;
  out.reserve(data_.size());
  for (const auto& [k, v] : data_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<WaitId> KvStore::queue_push(const std::string& key, std::string value) {
  std::vector<WaitId> woken;
  queues_[key].push_back(std::move(value));
  // A queue with an element counts as an existing key for WAIT; one pushed item wakes one waiter
  // (each blocking pop waits on the key first).
  key_created(key, woken, /*only_one=*/true);
  return woken;
}

std::optional<std::string> KvStore::queue_pop(const std::string& key) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return std::nullopt;
  std::string v = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return v;
}

int64_t KvStore::queue_len(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

bool KvStore::add_wait(WaitId id, const std::vector<std::string>& keys) {
  size_t missing = 0;
  std::vector<std::string> needed;
  std::unordered_set<std::string_view> seen;  // a key listed twice is waited for once; O(keys) overall
  for (const auto& k : keys) {
    if (!exists(k) && seen.insert(k).second) {
      needed.push_back(k);
      ++missing;
    }
  }
  if (missing == 0) return true;
  for (const auto& k : needed) waiters_[k].push_back(id);
  wait_missing_[id] = missing;
  wait_keys_[id] = std::move(needed);
  return false;
}

bool KvStore::cancel_wait(WaitId id) {
  for (auto b = barrier_waiters_.begin(); b != barrier_waiters_.end();) {
    auto& ids = b->second;
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    b = ids.empty() ? barrier_waiters_.erase(b) : std::next(b);
  }
  auto it = wait_keys_.find(id);
  if (it == wait_keys_.end()) return false;
  for (const auto& k : it->second) {
    auto w = waiters_.find(k);
    if (w == waiters_.end()) continue;
    auto& ids = w->second;
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    if (ids.empty()) waiters_.erase(w);
  }
  wait_keys_.erase(it);
  wait_missing_.erase(id);
  return true;
}

}  // namespace meshrun::rendezvous
