#include "trainer/distributed/collective_ledger.hpp"

#include <algorithm>
#include <chrono>

namespace meshrun::trainer {
namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void CollectiveLedger::add_group(const std::string& name, std::vector<int> ranks) {
  const std::lock_guard lock(mutex_);
  groups_[name].ranks = std::move(ranks);
}

int64_t CollectiveLedger::enter(const std::string& group, const std::string& op, const std::string& sizes,
                                const std::string& dtype) {
  const std::lock_guard lock(mutex_);
  Group& g = groups_[group];
  const int64_t seq = ++g.last_enqueued;
  proto::CollectiveEntry& entered = recent_.emplace_back();
  entered.group = group;
  entered.seq = seq;
  entered.op = op;
  entered.sizes = sizes;
  entered.dtypes = dtype;
  entered.created_unix_ms = unix_ms();
  // Drop the oldest completed entries first: an open one is what a verdict needs.
  while (recent_.size() > kRecent) {
    const auto done =
        std::find_if(recent_.begin(), recent_.end(), [](const proto::CollectiveEntry& e) { return e.retired; });
    recent_.erase(done == recent_.end() ? recent_.begin() : done);
  }
  return seq;
}

int64_t CollectiveLedger::next_seq(const std::string& group) const {
  const std::lock_guard lock(mutex_);
  const auto it = groups_.find(group);
  return (it == groups_.end() ? 0 : it->second.last_enqueued) + 1;
}

void CollectiveLedger::complete(const std::string& group, int64_t seq) {
  const std::lock_guard lock(mutex_);
  Group& g = groups_[group];
  g.done_ahead.push_back(seq);
  for (auto it = std::find(g.done_ahead.begin(), g.done_ahead.end(), g.last_completed + 1); it != g.done_ahead.end();
       it = std::find(g.done_ahead.begin(), g.done_ahead.end(), g.last_completed + 1)) {
    ++g.last_completed;
    g.done_ahead.erase(it);
  }
  for (auto& e : recent_) {
    if (e.group == group && e.seq == seq) e.retired = true;
  }
}

proto::HookMessage CollectiveLedger::status() const {
  const std::lock_guard lock(mutex_);
  std::map<std::string, proto::HookMessage::Group> groups;
  for (const auto& [name, g] : groups_) {
    if (g.last_enqueued == 0) continue;  // PyTorch lists a group once it ran a collective
    groups[name] = {g.last_enqueued, g.last_completed};
  }
  return proto::HookMessage::status(std::move(groups));
}

proto::CollectiveDump CollectiveLedger::dump() const {
  const std::lock_guard lock(mutex_);
  proto::CollectiveDump dump;
  for (const auto& [name, g] : groups_) dump.groups[name] = {g.ranks, g.last_enqueued, g.last_completed};
  dump.entries.assign(recent_.begin(), recent_.end());
  return dump;
}

}  // namespace meshrun::trainer
