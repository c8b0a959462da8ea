// CopyShelf: which of a node's memory-copy slots a worker may write next, and which copies a restart may use
// (docs/design/in-memory-checkpoints.md, "Slot policy"). Pure: the keeper owns the memfds and checks each
// sealed copy's header before telling the shelf.
//
// Each rank has a fixed number of slots (2). A slot holding the rank's newest committed step (every rank of
// the job sealed that step) is never lent: a worker killed while it writes the next copy leaves that one
// standing. Nor is the slot of its newest durable step (every rank's copy of it reached its buddy node), nor
// one being pushed to the buddy: with replication slower than the copies, a copy is skipped rather than the
// step a lost node's ranks would restore from overwritten. The node's replicas of other nodes' copies are
// ReplicaShelf's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace meshrun::launcher {

enum class SlotState {
  kEmpty,   // never written
  kLent,    // a worker writes it now
  kSealed,  // holds a complete copy of `step`
  kTorn,    // its worker went away mid-copy: unusable until lent again
};

struct SlotView {
  SlotState state = SlotState::kEmpty;
  int64_t step = -1;  // kLent: the step being written; kSealed: the step held
};

/// The answer to a worker asking for a slot: a slot index, or why not (the copy of that step is skipped).
struct LendResult {
  std::optional<int> slot;
  std::string busy_reason;
};

class CopyShelf {
 public:
  explicit CopyShelf(int slots_per_rank = 2);

  /// A worker of `rank` starts the copy of `step`: the empty or torn slot first, else the oldest copy that is
  /// not the rank's newest committed one. Busy while another copy of the rank is in flight.
  LendResult lend(int rank, int64_t step);
  /// The lent `slot` now holds a complete copy of `step` (its header checked). Returns why not otherwise.
  [[nodiscard]] std::string seal(int rank, int slot, int64_t step);
  /// Every rank sealed `step`. A commit for a step no slot of the rank holds is a no-op.
  void commit(int rank, int64_t step);
  /// Every rank's copy of `step` reached its buddy: it stays until a newer step is durable.
  void durable(int rank, int64_t step);
  /// The copy of `step` is being sent (to the buddy, or to a node fetching it): its slot is not lent
  /// meanwhile. Counted: a push and a fetch may send it at once.
  void pin(int rank, int64_t step);
  void unpin(int rank, int64_t step);
  /// The rank's training resumed from `step`: its copies of later steps belong to a past the run leaves
  /// behind, and are dropped; `step` is kept as the durable one until a newer step is on every buddy.
  void restored(int rank, int64_t step);
  /// The rank's worker went away: the slot it was writing becomes torn.
  void on_disconnect(int rank);
  /// Forgets every slot and commit of `rank` (its slots were replaced: a new layout).
  void forget(int rank);

  /// The committed steps `rank` still holds, newest first: what a restart may restore.
  std::vector<int64_t> candidates(int rank) const;
  /// The slot holding a sealed copy of `step` of `rank`.
  std::optional<int> slot_of(int rank, int64_t step) const;
  /// The slot of the committed copy of `step` of `rank` (nullopt: not committed, or no longer held).
  std::optional<int> committed_slot(int rank, int64_t step) const;
  const std::vector<SlotView>& slots(int rank) const;

 private:
  std::vector<SlotView>& slots_of(int rank);
  std::optional<int64_t> newest_commit(int rank) const;

  int slots_per_rank_;
  std::map<int, std::vector<SlotView>> slots_;
  std::map<int, std::set<int64_t>> committed_;     // per rank; pruned to the steps its slots still hold
  std::map<int, int64_t> durable_;                 // per rank: the newest durable step
  std::map<std::pair<int, int64_t>, int> pinned_;  // (rank, step) being sent: how many transfers
};

}  // namespace meshrun::launcher
