// ReplicaShelf: the copies this node holds for another node's ranks (its buddy's pushes; docs/design/
// in-memory-checkpoints.md, "Replication"). Pure: the keeper owns the memfds. Two slots per origin rank: a
// push goes into the slot that does not hold the rank's newest complete copy, so a sender that dies
// mid-push leaves that copy standing. A slot counts as complete only once every byte arrived and its header
// checked out; its header alone proves nothing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace meshrun::launcher {

/// What a replica slot holds.
struct ReplicaView {
  enum class State { kEmpty, kFilling, kComplete } state = State::kEmpty;
  int64_t step = -1;
  int world_size = 0;
  uint64_t digest = 0;
  int64_t round = -1;  // the round whose workers made it: a step done again after a restart replaces it
};

/// A complete replica, as listed in the node's inventory.
struct ReplicaHeld {
  int rank = 0;
  int slot = 0;
  ReplicaView copy;
};

class ReplicaShelf {
 public:
  /// Where a push of `step` of `rank`, made in `round`, goes: a slot, or why not (`have`: that copy is
  /// already complete here).
  struct Placement {
    std::optional<int> slot;
    bool have = false;
    std::string busy_reason;
  };
  Placement place(int rank, int64_t step, int64_t round);
  /// Every byte of the push in `slot` arrived and its header checked out.
  void complete(int rank, int slot, const ReplicaView& copy);
  /// The push into `slot` failed: the slot is free again.
  void failed(int rank, int slot);
  /// Drops every replica of `rank` (its slots are replaced: another size).
  void forget(int rank) { slots_.erase(rank); }
  /// The complete replica of `step` of `rank`, if held.
  std::optional<int> slot_of(int rank, int64_t step) const;
  std::vector<ReplicaHeld> held() const;
  /// Ranks whose replicas are all older than `durable_step` and made before `round`, none of them filling:
  /// nothing of this round's ring renews them, and every rank has a newer copy on its buddy.
  std::vector<int> stale(int64_t durable_step, int64_t round) const;

 private:
  static constexpr int kSlotsPerRank = 2;
  std::map<int, std::vector<ReplicaView>> slots_;
};

}  // namespace meshrun::launcher
