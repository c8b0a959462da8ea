// MemoryKeeper: every copy of the workers' state this agent holds (checkpoint.memory_interval;
// docs/checkpoints.md, "Copies in memory"), for the agent's whole life, so copies outlive each attempt's
// workers and never the agent. It owns:
//   - its own ranks' slots (memfds lent to the workers over MESHRUN_MEMORY, HandoverServer) and, per rank,
//     a 4 KiB control block where the worker reads which of its steps the buddy node holds;
//   - the replicas of its buddy's ranks (pushed to it over TCP, PeerServer);
//   - the Replicator, which pushes each committed copy to the next node of the round's ring.
// At a round's start it publishes its inventory in the round's store; a worker's first `plan` reads every
// node's, and `open` fetches a copy this node lacks from the node that holds it (a spare taking a lost
// node's ranks restores from that node's buddy). Thread-safe: the servers' and the replicator's threads
// call in; transfers run outside the lock, the slots they use pinned.
// Closed by default (docs/security.md): the copy port opens only once a worker asks for copies in a job of
// several nodes, listens on this node's address on the workers' network alone, requires every request to
// prove the run's secret (and the join token, when the run has one), and takes pushes only of the ranks
// this node backs in the round, no larger than its own copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/endpoint.hpp"
#include "launcher/memory/copy_shelf.hpp"
#include "launcher/memory/memfd_slot.hpp"
#include "launcher/memory/memory_budget.hpp"
#include "launcher/memory/replica_shelf.hpp"
#include "launcher/memory/restore_plan.hpp"
#include "proto/agents/copy_port_messages.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"
#include "proto/worker/memory_handover.hpp"

namespace meshrun::launcher {

class HandoverServer;
class PeerServer;
class Replicator;

/// What the keeper needs of one round.
struct MemoryAttempt {
  Endpoint store;  // the round's workers' store (inventories)
  int64_t round = 0;
  int node = 0;  // this node's rank in the round
  int nodes = 1;
  int world_size = 1;
  int64_t steps_done = 0;  // the run's furthest step before this round
  std::string addr;        // this node's address on the workers' network: the copy port listens there only
  std::string secret;      // the run's secret from the assignment: every request on the copy port proves it
  int backed_first = -1;   // the ranks of the node this one backs (node - 1 in the ring): the only pushes taken
  int backed_count = 0;
};

/// A copy to send: a descriptor of its slot (kept open by the caller) and what the receiver checks.
struct OutgoingCopy {
  UniqueFd fd;
  uint64_t bytes = 0;
  int world_size = 0;
  uint64_t digest = 0;
  int64_t round = -1;  // the round whose workers made it
};

class MemoryKeeper {
 public:
  /// Serves MESHRUN_MEMORY at `socket_path` (the copy port opens later, when copies are asked for); `name`
  /// goes into each memfd's name. `token`: the run's join token (empty: none), which the copy port requires
  /// of other agents, with the run's secret, and proves to them. `read` reads /proc and the cgroup files for
  /// the memory check (tests pass fake ones).
  MemoryKeeper(std::string socket_path, std::string name, std::string run_id, std::string host, std::string token = "",
               ReadText read = read_text_file);
  ~MemoryKeeper();
  MemoryKeeper(const MemoryKeeper&) = delete;
  MemoryKeeper& operator=(const MemoryKeeper&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  const std::string& run_id() const { return run_id_; }
  /// What a copy-port request proves: the run's secret (and the join token when there is one); "" before the
  /// first round.
  std::string copy_key() const;
  /// The copy port, 0 while it is closed.
  int copy_port() const;
  /// A new round: forgets the last round's plan, publishes this node's inventory (several nodes) and points
  /// the replicator at the new buddy.
  void begin_attempt(const MemoryAttempt& attempt);

  // The workers' requests (HandoverServer's thread). A reply goes with descriptors, in `fds`.
  /// `connection` names the worker's connection: its end tears only what that connection was writing.
  [[nodiscard]] proto::HandoverReply hello(int rank, const proto::CopyShape& shape, std::vector<int>& fds,
                                           uint64_t connection);
  [[nodiscard]] proto::HandoverReply begin(int rank, int64_t step);
  [[nodiscard]] proto::HandoverReply sealed(int rank, int slot, int64_t step);
  void commit(int rank, int64_t step);
  void durable(int rank, int64_t step);
  void restored(int rank, int64_t step, proto::LoadSource source);
  /// Where this round's workers restored from, as they told (the slowest kind over its ranks).
  proto::LoadSource load_source() const;
  [[nodiscard]] proto::HandoverReply plan(int rank);
  /// `copy_rank` and `world_size` name a copy of another layout (a reshard after the job shrank); -1: the
  /// worker's own rank in the round's layout.
  [[nodiscard]] proto::HandoverReply open(int rank, int64_t step, int copy_rank, int world_size, std::vector<int>& fds);
  void disconnected(int rank, uint64_t connection);

  // Other agents' requests (PeerServer's threads move the bytes, copy_transfer.hpp; the keeper decides).
  /// Where a push goes: an answer to send at once (refused, have, busy, failed), or the replica slot to
  /// receive it into (its descriptor, a duplicate).
  struct PushTarget {
    std::optional<proto::CopyPortReply> answer;
    UniqueFd into;
    int slot = -1;

    static PushTarget answered(proto::CopyPortReply reply) {
      PushTarget target;
      target.answer = std::move(reply);
      return target;
    }
  };
  /// `peer`: who pushes, for the log.
  [[nodiscard]] PushTarget place_push(const proto::CopyPortRequest& request, const std::string& peer);
  /// The push received into `slot` (`why`: the transfer failed) checked and recorded, or the slot given back:
  /// "" or why not.
  [[nodiscard]] std::string settle_push(const proto::CopyPortRequest& request, int slot, std::string why);
  /// The copy a fetch asks for (a duplicate of its descriptor and its bytes); an own slot stays pinned (not lent
  /// to its worker) until fetch_served. nullopt: no such copy here.
  struct LentCopy {
    UniqueFd fd;
    uint64_t bytes = 0;
    bool pinned = false;
  };
  [[nodiscard]] std::optional<LentCopy> lend_for_fetch(const proto::CopyPortRequest& request);
  void fetch_served(const proto::CopyPortRequest& request, const LentCopy& lent);

  // The replicator's side.
  /// The committed copy of `step` of `rank`, pinned until pushed() (nullopt: it was overwritten).
  [[nodiscard]] std::optional<OutgoingCopy> take_for_push(int rank, int64_t step);
  /// The push ended; `ok`: the buddy holds it (the worker sees it in its control block).
  void pushed(int rank, int64_t step, bool ok);
  /// Where this round's buddy takes copies (reads its inventory; nullopt without one).
  std::optional<CopySource> buddy();

  /// The committed steps this node holds for `rank`, newest first.
  std::vector<int64_t> candidates(int rank) const;
  /// Bytes of every slot held (own and replicas).
  uint64_t held_bytes() const;
  /// This node's inventory now.
  Inventory inventory() const;

 private:
  struct RankSlots;
  /// A rank's committed copies of the previous layout, kept after its worker said hello with another one,
  /// until a step of the new layout is durable: a job that shrank restores (reshards) from them.
  struct Retired {
    std::unique_ptr<RankSlots> slots;
    std::map<int64_t, int> committed;  // step -> slot
    int world_size = 0;
  };
  /// Where a copy held here lives.
  enum class CopyHome {
    kOwn,      // a committed slot of this node's rank (`slot`)
    kRetired,  // a committed copy of the rank's previous layout
    kReplica,  // held for the node this one backs
    kFetched,  // another layout's copy fetched for a reshard (this round)
  };
  struct HeldCopy {
    const MemfdSlot* memfd = nullptr;  // owned by the keeper
    CopyHome home = CopyHome::kOwn;
    int slot = -1;  // kOwn: the rank's slot
  };
  /// The one lookup of a sealed copy of `rank` at `step` in a `world_size` world (-1: any), in this order: own,
  /// retired, replica, fetched. Under mutex_.
  std::optional<HeldCopy> find_copy_locked(int rank, int64_t step, int world_size) const;
  /// Fetches another layout's copy from `from` into a slot of its own (kept this round); its fd in `fds`.
  [[nodiscard]] std::string fetch_other(int rank, int64_t step, int world_size, const CopySource& from,
                                        std::vector<int>& fds);

  Inventory inventory_locked() const;
  [[nodiscard]] proto::HandoverReply hello_slots(int rank, const proto::CopyShape& shape, std::vector<int>& fds,
                                                 uint64_t connection);
  /// Opens the copy port on this round's address (again, when the address changed). Returns the one it replaces,
  /// for the caller to stop once it has let go of the lock (~PeerServer).
  std::unique_ptr<PeerServer> open_copy_port_locked();
  /// Whether a push of `rank` of `bytes` is one this node expects: a rank of the node it backs this round, no
  /// larger than this node's own copies. "" or why not (logged here, never told to the pusher).
  [[nodiscard]] std::string push_refusal_locked(int rank, uint64_t bytes, uint64_t digest, int world_size) const;
  void set_pushed_locked(int rank, int64_t step);
  /// Two replica slots of `bytes` for `rank` (new ones when the size changed): "" or why not.
  [[nodiscard]] std::string replica_slots_locked(int rank, uint64_t bytes);
  /// Fetches `rank`'s copy of `step` from `from` into a slot of this node; "" or why not.
  [[nodiscard]] std::string fetch(int rank, int64_t step, const CopySource& from);

  std::string socket_path_;
  std::string name_;
  std::string run_id_;
  std::string host_;
  std::string token_;
  ReadText read_;
  mutable std::mutex mutex_;
  CopyShelf shelf_;
  std::map<int, std::unique_ptr<RankSlots>> own_;
  std::map<int, uint64_t> connection_of_;            // rank -> the connection of its latest hello
  std::map<int, Retired> retired_;                   // rank -> its previous layout's copies
  std::vector<std::unique_ptr<MemfdSlot>> fetched_;  // other layouts' copies fetched for a reshard (this round)
  ReplicaShelf replicas_;
  std::map<int, std::vector<std::unique_ptr<MemfdSlot>>> replica_slots_;
  std::optional<MemoryAttempt> attempt_;
  std::optional<RestorePlan> plan_;                              // this round's, once a worker asked
  std::optional<CopySource> buddy_;                              // this round's, once resolved
  proto::LoadSource load_source_ = proto::LoadSource::kUnknown;  // this round's
  std::unique_ptr<PeerServer> peers_;  // the copy port, once opened; after the state: stopped before it goes
  std::string peers_addr_;             // the address it listens on
  std::unique_ptr<Replicator> replicator_;
  std::unique_ptr<HandoverServer> handover_;
};

}  // namespace meshrun::launcher
