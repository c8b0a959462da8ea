#include "launcher/memory/memory_keeper.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "common/error.hpp"
#include "launcher/memory/buddy_ring.hpp"
#include "launcher/memory/copy_transfer.hpp"
#include "launcher/memory/handover_server.hpp"
#include "launcher/memory/inventory_exchange.hpp"
#include "launcher/memory/peer_server.hpp"
#include "launcher/memory/replicator.hpp"

namespace meshrun::launcher {

using proto::CopyPortReply;
using proto::CopyPortRequest;
using proto::HandoverReply;

namespace {

constexpr int kSlotsPerRank = 2;
constexpr std::chrono::seconds kInventoryWait{10};

UniqueFd dup_fd(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

/// A fetched copy checked whole (header and every chunk) and for being the one asked for (`world_size` -1: any
/// world). "" or why not.
std::string check_fetched(const MemfdSlot& slot, int rank, int64_t step, int world_size) {
  if (std::string why = slot.check(); !why.empty()) return why;
  const proto::CopyHeader h = slot.read_header();
  if (h.step != step || h.rank != rank) return "it holds another step or rank";
  if (world_size >= 0 && h.world_size != world_size) return "it holds another world";
  return "";
}

}  // namespace

// One rank's own slots, and its control block: a 4 KiB memfd the worker maps read-only, whose first 8 bytes
// are the newest step of this rank the buddy node holds.
struct MemoryKeeper::RankSlots {
  uint64_t slot_bytes = 0;
  uint64_t largest_slot_bytes = 0;  // the largest copy of any rank of the job, as the worker computed it
  uint64_t digest = 0;
  std::vector<std::unique_ptr<MemfdSlot>> slots;
  std::unique_ptr<MemfdSlot> control;
  std::atomic<int64_t>* pushed_step = nullptr;

  RankSlots(const std::string& name, uint64_t bytes, uint64_t run_digest) : slot_bytes(bytes), digest(run_digest) {
    for (int i = 0; i < kSlotsPerRank; ++i)
      slots.push_back(std::make_unique<MemfdSlot>(name + " slot" + std::to_string(i), bytes));
    control = std::make_unique<MemfdSlot>(name + " control", proto::kHeaderBytes);
    void* map = ::mmap(nullptr, proto::kHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, control->fd(), 0);
    if (map == MAP_FAILED) throw Error(std::string("cannot map a memory control block: ") + std::strerror(errno));
    pushed_step = new (map) std::atomic<int64_t>(0);
  }
  ~RankSlots() { ::munmap(pushed_step, proto::kHeaderBytes); }
  RankSlots(const RankSlots&) = delete;
  RankSlots& operator=(const RankSlots&) = delete;
};

MemoryKeeper::MemoryKeeper(std::string socket_path, std::string name, std::string run_id, std::string host,
                           std::string token, ReadText read)
    : socket_path_(std::move(socket_path)),
      name_(std::move(name)),
      run_id_(std::move(run_id)),
      host_(std::move(host)),
      token_(std::move(token)),
      read_(std::move(read)),
      shelf_(kSlotsPerRank) {
  replicator_ = std::make_unique<Replicator>(*this);
  handover_ = std::make_unique<HandoverServer>(socket_path_, *this);
}

MemoryKeeper::~MemoryKeeper() {
  handover_.reset();
  replicator_.reset();
  peers_.reset();
}

void MemoryKeeper::begin_attempt(const MemoryAttempt& attempt) {
  Inventory mine;
  std::unique_ptr<PeerServer> retired;  // stopped outside the lock: a connection it serves may be waiting for it
  {
    std::lock_guard lock(mutex_);
    attempt_ = attempt;
    load_source_ = proto::LoadSource::kUnknown;
    fetched_.clear();
    plan_.reset();
    buddy_.reset();
    if (peers_ && peers_addr_ != attempt.addr && attempt.nodes > 1)
      retired = open_copy_port_locked();  // this round's network is another
    mine = inventory_locked();
  }
  retired.reset();
  if (attempt.nodes <= 1) return;
  try {
    publish_inventory(attempt, mine, copy_key());
  } catch (const std::exception& e) {
    spdlog::warn("memory: cannot publish this node's copies in the workers' store: {}", e.what());
  }
}

std::string MemoryKeeper::push_refusal_locked(int rank, uint64_t bytes, uint64_t digest, int world_size) const {
  if (!attempt_) return "this agent is between rounds";
  if (rank < attempt_->backed_first || rank >= attempt_->backed_first + attempt_->backed_count) {
    return "this node backs ranks " + std::to_string(attempt_->backed_first) + ".." +
           std::to_string(attempt_->backed_first + attempt_->backed_count - 1) + " this round";
  }
  if (world_size != attempt_->world_size) return "the copy is of a world of " + std::to_string(world_size);
  // Every rank's copy has the run's digest, and is no larger than the largest its own worker computed.
  for (const auto& [own_rank, held] : own_) {
    if (held->digest != digest) return "the copy is of another model or config (digest)";
    if (MemfdSlot::rounded(bytes) > held->largest_slot_bytes) {
      return "the copy's " + std::to_string(bytes) + " bytes are more than any rank's of the job (" +
             std::to_string(held->largest_slot_bytes) + ")";
    }
    return "";
  }
  return "this node's workers have not asked for copies (yet)";
}

std::string MemoryKeeper::copy_key() const {
  std::lock_guard lock(mutex_);
  if (!attempt_ || attempt_->secret.empty()) return "";
  return token_.empty() ? attempt_->secret : attempt_->secret + ":" + token_;
}

int MemoryKeeper::copy_port() const {
  std::lock_guard lock(mutex_);
  return peers_ ? peers_->port() : 0;
}

std::unique_ptr<PeerServer> MemoryKeeper::open_copy_port_locked() {
  std::unique_ptr<PeerServer> previous = std::move(peers_);
  peers_ = std::make_unique<PeerServer>(*this, attempt_->addr);
  peers_addr_ = attempt_->addr;
  spdlog::info("memory: copy port {}:{} open (the run's secret required)", peers_addr_, peers_->port());
  return previous;
}

HandoverReply MemoryKeeper::hello(int rank, const proto::CopyShape& shape, std::vector<int>& fds, uint64_t connection) {
  // Copies are in use: the copy port opens, and the buddy learns where from this node's inventory again.
  std::optional<std::pair<MemoryAttempt, Inventory>> publish;
  {
    std::lock_guard lock(mutex_);
    if (!peers_ && attempt_ && attempt_->nodes > 1) {  // one node: no other agent to serve
      open_copy_port_locked();
      publish.emplace(*attempt_, inventory_locked());
    }
  }
  if (publish) {
    try {
      publish_inventory(publish->first, publish->second, copy_key());
    } catch (const std::exception& e) {
      spdlog::warn("memory: cannot publish this node's copy port in the workers' store: {}", e.what());
    }
  }
  return hello_slots(rank, shape, fds, connection);
}

HandoverReply MemoryKeeper::hello_slots(int rank, const proto::CopyShape& shape, std::vector<int>& fds,
                                        uint64_t connection) {
  const uint64_t bytes = shape.slot_bytes;
  const uint64_t digest = shape.digest;
  if (rank < 0 || bytes < proto::kHeaderBytes)
    return HandoverReply::refused("hello needs a rank and the bytes of a copy");
  std::lock_guard lock(mutex_);
  auto& held = own_[rank];
  if (!held || held->slot_bytes != MemfdSlot::rounded(bytes) || held->digest != digest) {
    // A new layout or another run's model: new slots. Two for this rank and, on its buddy, two more of the
    // same size for a rank of another node: checked against what the node can spare before a page is taken.
    const uint64_t need = 4 * MemfdSlot::rounded(bytes) + proto::kHeaderBytes;
    if (const std::string why = budget_refusal(need, memory_room(read_)); !why.empty()) {
      spdlog::warn("memory: rank {}'s copies in memory refused: {}", rank, why);
      if (!held) own_.erase(rank);
      return HandoverReply::refused(why);
    }
    if (held) {
      Retired previous{std::move(held), {}, 0};
      for (const int64_t step : shelf_.candidates(rank)) {
        const int slot = *shelf_.slot_of(rank, step);
        previous.committed[step] = slot;
        previous.world_size = previous.slots->slots[static_cast<size_t>(slot)]->read_header().world_size;
      }
      if (!previous.committed.empty()) retired_[rank] = std::move(previous);
    }
    held.reset();
    shelf_.forget(rank);
    try {
      held = std::make_unique<RankSlots>(name_ + " rank" + std::to_string(rank), bytes, digest);
    } catch (const std::exception& e) {
      own_.erase(rank);
      return HandoverReply::refused(e.what());
    }
  }
  // Pushes of other ranks are taken up to the largest copy of the job (a rank's shards differ a little).
  held->largest_slot_bytes = std::max(held->slot_bytes, MemfdSlot::rounded(shape.largest_slot_bytes));
  shelf_.on_disconnect(rank);  // a copy an earlier worker of this rank left unfinished is torn
  connection_of_[rank] = connection;
  for (const auto& slot : held->slots) fds.push_back(slot->fd());
  fds.push_back(held->control->fd());
  return HandoverReply::granted(held->slot_bytes, kSlotsPerRank);
}

HandoverReply MemoryKeeper::begin(int rank, int64_t step) {
  std::lock_guard lock(mutex_);
  const LendResult lent = shelf_.lend(rank, step);
  if (!lent.slot) return HandoverReply::busy(lent.busy_reason);
  return HandoverReply::lend(*lent.slot);
}

HandoverReply MemoryKeeper::sealed(int rank, int slot, int64_t step) {
  std::lock_guard lock(mutex_);
  const auto it = own_.find(rank);
  std::string why = "no slots for rank " + std::to_string(rank);
  if (it != own_.end()) {
    const auto& slots = it->second->slots;
    why = slot >= 0 && static_cast<size_t>(slot) < slots.size() ? slots[static_cast<size_t>(slot)]->check()
                                                                : "no slot " + std::to_string(slot);
    if (why.empty()) {
      const proto::CopyHeader header = slots[static_cast<size_t>(slot)]->read_header();
      if (header.step != step || header.rank != rank) why = "the copy's header names another step or rank";
    }
  }
  if (why.empty()) why = shelf_.seal(rank, slot, step);
  if (!why.empty()) {
    spdlog::warn("memory copy of rank {} step {} is not kept: {}", rank, step, why);
    shelf_.on_disconnect(rank);  // the lent slot is unusable: torn
    return HandoverReply::refused(why);
  }
  return HandoverReply::kept();
}

void MemoryKeeper::commit(int rank, int64_t step) {
  bool push = false;
  {
    std::lock_guard lock(mutex_);
    shelf_.commit(rank, step);
    if (!shelf_.slot_of(rank, step)) return;
    push = attempt_ && attempt_->nodes > 1;
    // Alone, a committed copy is as safe as it gets: the worker may count it as held.
    if (!push) set_pushed_locked(rank, step);
  }
  if (push) replicator_->enqueue(rank, step);
}

void MemoryKeeper::durable(int rank, int64_t step) {
  std::lock_guard lock(mutex_);
  shelf_.durable(rank, step);
  retired_.erase(rank);  // a step of the new layout is on every buddy: the old one is not needed any more
  // Every rank's copy of `step` is on its buddy: replicas of older steps that no push of this round renews
  // (ranks this node backed in an earlier ring) are freed.
  const int64_t round = attempt_ ? attempt_->round : -1;
  for (const int stale : replicas_.stale(step, round)) {
    replicas_.forget(stale);
    replica_slots_.erase(stale);
    spdlog::info("memory: freed the replicas of rank {}: this node no longer backs it, and step {} is durable", stale,
                 step);
  }
}

void MemoryKeeper::set_pushed_locked(int rank, int64_t step) {
  const auto it = own_.find(rank);
  if (it == own_.end()) return;
  auto& pushed = *it->second->pushed_step;
  if (pushed.load() < step) pushed.store(step);
}

void MemoryKeeper::restored(int rank, int64_t step, proto::LoadSource source) {
  bool push = false;
  {
    std::lock_guard lock(mutex_);
    shelf_.restored(rank, step);
    // The buddy holds nothing of the steps the run does again: the worker must not count them as pushed.
    if (const auto it = own_.find(rank); it != own_.end() && it->second->pushed_step->load() > step)
      it->second->pushed_step->store(step);
    if (static_cast<int>(source) > static_cast<int>(load_source_)) load_source_ = source;
    // The ring may be new (a spare joined, the job shrank): the step the run resumed from goes to this round's
    // buddy at once, so a second fault before the next copy is durable still finds it in memory. An
    // unchanged buddy gets it again: its replica is tagged with an earlier round.
    push = attempt_ && attempt_->nodes > 1 && shelf_.committed_slot(rank, step);
  }
  if (push) replicator_->enqueue(rank, step);
}

proto::LoadSource MemoryKeeper::load_source() const {
  std::lock_guard lock(mutex_);
  return load_source_;
}

HandoverReply MemoryKeeper::plan(int rank) {
  std::optional<MemoryAttempt> attempt;
  {
    std::lock_guard lock(mutex_);
    attempt = attempt_;
    const bool alone = !attempt || attempt->nodes <= 1;
    if (alone || plan_) {
      std::vector<proto::HeldStep> held;
      if (alone) {
        for (const int64_t step : shelf_.candidates(rank)) {
          const auto& slot = own_.at(rank)->slots[static_cast<size_t>(*shelf_.slot_of(rank, step))];
          held.push_back({step, slot->read_header().world_size});
        }
      } else {
        for (const auto& c : plan_->candidates) held.push_back({c.step, c.world_size});
      }
      return HandoverReply::plan(attempt ? attempt->steps_done : 0, std::move(held), alone ? "" : plan_->why_none);
    }
  }
  // Outside the lock: the other agents may take seconds to publish.
  const auto inventories = gather_inventories(*attempt, copy_key(), kInventoryWait);
  RestorePlan computed = plan_restore(inventories, attempt->world_size, attempt->node);
  if (static_cast<int>(inventories.size()) < attempt->nodes && computed.candidates.empty())
    computed.why_none += " (" + std::to_string(attempt->nodes - static_cast<int>(inventories.size())) +
                         " node(s) published no inventory in time)";
  {
    std::lock_guard lock(mutex_);
    // A round that began meanwhile has its own nodes: this plan is for the one it was gathered in.
    if (!attempt_ || attempt_->round != attempt->round) return HandoverReply::plan(0, {}, "");
    if (!plan_) plan_ = std::move(computed);
  }
  return plan(rank);
}

HandoverReply MemoryKeeper::open(int rank, int64_t step, int copy_rank, int world_size, std::vector<int>& fds) {
  const bool own_layout = copy_rank < 0;
  const int wanted = own_layout ? rank : copy_rank;
  std::optional<CopySource> from;
  {
    std::lock_guard lock(mutex_);
    // Its own layout: only its own committed slot will do (the worker writes the next copies into its slots).
    if (const auto held = find_copy_locked(wanted, step, own_layout ? -1 : world_size);
        held && (!own_layout || held->home == CopyHome::kOwn)) {
      fds.push_back(held->memfd->fd());
      return HandoverReply::copy(step, own_layout ? held->slot : -1);  // -1: a copy not in its slots
    }
    if (plan_) {
      for (const auto& c : plan_->candidates) {
        const bool match =
            c.step == step && (own_layout ? c.world_size == attempt_->world_size : c.world_size == world_size);
        if (match && c.holders.count(wanted) > 0 && c.holders.at(wanted).node != attempt_->node)
          from = c.holders.at(wanted);
      }
    }
  }
  if (!from)
    return HandoverReply::error("no committed copy of step " + std::to_string(step) + " for rank " +
                                std::to_string(wanted) + " on this node or in this round's plan");
  // Another layout's copy (a reshard) goes into a slot of its own, kept for this round.
  if (const std::string why = own_layout ? fetch(rank, step, *from) : fetch_other(wanted, step, world_size, *from, fds);
      !why.empty())
    return HandoverReply::error(why);
  if (!own_layout) return HandoverReply::copy(step, -1, from->node, from->host);
  std::lock_guard lock(mutex_);
  const auto slot = shelf_.slot_of(rank, step);
  if (!slot) return HandoverReply::error("the fetched copy of step " + std::to_string(step) + " was lost");
  fds.push_back(own_.at(rank)->slots[static_cast<size_t>(*slot)]->fd());
  return HandoverReply::copy(step, *slot, from->node, from->host);
}

std::optional<MemoryKeeper::HeldCopy> MemoryKeeper::find_copy_locked(int rank, int64_t step, int world_size) const {
  const auto in_world = [world_size](const MemfdSlot& memfd) {
    return world_size < 0 || memfd.read_header().world_size == world_size;
  };
  if (const auto it = own_.find(rank); it != own_.end()) {
    if (const auto slot = shelf_.committed_slot(rank, step)) {
      const MemfdSlot& memfd = *it->second->slots[static_cast<size_t>(*slot)];
      if (in_world(memfd)) return HeldCopy{&memfd, CopyHome::kOwn, *slot};
    }
  }
  if (const auto it = retired_.find(rank); it != retired_.end() && it->second.committed.count(step) > 0) {
    const MemfdSlot& memfd = *it->second.slots->slots[static_cast<size_t>(it->second.committed.at(step))];
    if (in_world(memfd)) return HeldCopy{&memfd, CopyHome::kRetired};
  }
  if (const auto replica = replicas_.slot_of(rank, step)) {
    const MemfdSlot& memfd = *replica_slots_.at(rank).at(static_cast<size_t>(*replica));
    if (in_world(memfd)) return HeldCopy{&memfd, CopyHome::kReplica};
  }
  for (const auto& memfd : fetched_) {
    const proto::CopyHeader h = memfd->read_header();
    if (h.rank == rank && h.step == step && in_world(*memfd)) return HeldCopy{memfd.get(), CopyHome::kFetched};
  }
  return std::nullopt;
}

std::string MemoryKeeper::fetch_other(int rank, int64_t step, int world_size, const CopySource& from,
                                      std::vector<int>& fds) {
  std::unique_ptr<MemfdSlot> into;
  std::string why = fetch_copy(
      from, copy_key(), CopyPortRequest::fetch(run_id_, rank, step, world_size), [&](uint64_t bytes, std::string& no) {
        if (bytes < proto::kHeaderBytes) {
          no = "node " + std::to_string(from.node) + " says: a copy of " + std::to_string(bytes) + " bytes";
          return -1;
        }
        no = budget_refusal(bytes, memory_room(read_));
        if (!no.empty()) return -1;
        into = std::make_unique<MemfdSlot>(name_ + " fetched rank" + std::to_string(rank), bytes);
        return into->fd();
      });
  if (why.empty()) why = check_fetched(*into, rank, step, world_size);
  if (!why.empty())
    return "rank " + std::to_string(rank) + "'s copy of step " + std::to_string(step) + " (" +
           std::to_string(world_size) + " ranks) from node " + std::to_string(from.node) + ": " + why;
  std::lock_guard lock(mutex_);
  fds.push_back(into->fd());
  fetched_.push_back(std::move(into));
  spdlog::info("memory: fetched rank {}'s copy of step {} ({} ranks) from node {} ({})", rank, step, world_size,
               from.node, from.host);
  return "";
}

std::string MemoryKeeper::fetch(int rank, int64_t step, const CopySource& from) {
  UniqueFd into;
  int slot = -1;
  uint64_t slot_bytes = 0;
  {
    std::lock_guard lock(mutex_);
    const auto it = own_.find(rank);
    if (it == own_.end()) return "rank " + std::to_string(rank) + " said no hello";
    const LendResult lent = shelf_.lend(rank, step);
    if (!lent.slot) return "no slot to fetch into: " + lent.busy_reason;
    slot = *lent.slot;
    into = dup_fd(it->second->slots[static_cast<size_t>(slot)]->fd());
    slot_bytes = it->second->slot_bytes;
  }
  std::string why =
      fetch_copy(from, copy_key(), CopyPortRequest::fetch(run_id_, rank, step), [&](uint64_t bytes, std::string& no) {
        if (bytes != slot_bytes) {
          no = "node " + std::to_string(from.node) + "'s copy has " + std::to_string(bytes) +
               " bytes, this rank's slots " + std::to_string(slot_bytes);
        }
        return into.get();
      });
  std::lock_guard lock(mutex_);
  if (why.empty()) why = check_fetched(*own_.at(rank)->slots[static_cast<size_t>(slot)], rank, step, -1);
  if (why.empty()) why = shelf_.seal(rank, slot, step);
  if (!why.empty()) {
    shelf_.on_disconnect(rank);  // the lent slot: torn
    return "rank " + std::to_string(rank) + "'s copy of step " + std::to_string(step) + " from node " +
           std::to_string(from.node) + ": " + why;
  }
  shelf_.commit(rank, step);
  shelf_.durable(rank, step);  // the step the run restarts from: kept until a newer one is on every buddy
  spdlog::info("memory: fetched rank {}'s copy of step {} from node {} ({})", rank, step, from.node, from.host);
  return "";
}

void MemoryKeeper::disconnected(int rank, uint64_t connection) {
  std::lock_guard lock(mutex_);
  // A previous worker of the rank closing late tears nothing of its successor's.
  if (const auto it = connection_of_.find(rank); it != connection_of_.end() && it->second == connection)
    shelf_.on_disconnect(rank);
}

MemoryKeeper::PushTarget MemoryKeeper::place_push(const CopyPortRequest& request, const std::string& peer) {
  const int rank = request.rank;
  const uint64_t bytes = request.bytes;
  if (rank < 0 || request.step < 0 || bytes < proto::kHeaderBytes)
    return PushTarget::answered(CopyPortReply::failed("a push needs a rank, a step and the copy's bytes"));
  std::lock_guard lock(mutex_);
  if (const std::string why = push_refusal_locked(rank, bytes, request.digest, std::max(request.world_size, 0));
      !why.empty()) {
    spdlog::warn("memory: refused a push of rank {}'s copy of step {} from {}: {}", rank, request.step, peer, why);
    return PushTarget::answered(CopyPortReply::refused());
  }
  if (const std::string why = replica_slots_locked(rank, bytes); !why.empty())
    return PushTarget::answered(CopyPortReply::failed(why));
  const ReplicaShelf::Placement placed = replicas_.place(rank, request.step, request.round);
  if (placed.have) return PushTarget::answered(CopyPortReply::have());
  if (!placed.slot) return PushTarget::answered(CopyPortReply::failed(placed.busy_reason));
  return PushTarget{std::nullopt, dup_fd(replica_slots_.at(rank)[static_cast<size_t>(*placed.slot)]->fd()),
                    *placed.slot};
}

std::string MemoryKeeper::replica_slots_locked(int rank, uint64_t bytes) {
  auto& slots = replica_slots_[rank];
  if (!slots.empty() && slots.front()->bytes() == MemfdSlot::rounded(bytes)) return "";
  if (std::string why = budget_refusal(2 * MemfdSlot::rounded(bytes), memory_room(read_)); !why.empty()) return why;
  replicas_.forget(rank);
  slots.clear();
  try {
    for (int i = 0; i < kSlotsPerRank; ++i) {
      slots.push_back(std::make_unique<MemfdSlot>(
          name_ + " replica rank" + std::to_string(rank) + " slot" + std::to_string(i), bytes));
    }
  } catch (const std::exception& e) {
    replica_slots_.erase(rank);
    return e.what();
  }
  return "";
}

std::string MemoryKeeper::settle_push(const CopyPortRequest& request, int slot, std::string why) {
  std::lock_guard lock(mutex_);
  const MemfdSlot& memfd = *replica_slots_.at(request.rank).at(static_cast<size_t>(slot));
  if (why.empty()) why = check_fetched(memfd, request.rank, request.step, -1);
  if (why.empty()) {
    const proto::CopyHeader header = memfd.read_header();
    replicas_.complete(
        request.rank, slot,
        {ReplicaView::State::kComplete, request.step, header.world_size, header.config_digest, request.round});
    return "";
  }
  replicas_.failed(request.rank, slot);
  spdlog::warn("memory: the push of rank {}'s copy of step {} failed: {}", request.rank, request.step, why);
  return why;
}

std::optional<MemoryKeeper::LentCopy> MemoryKeeper::lend_for_fetch(const CopyPortRequest& request) {
  std::lock_guard lock(mutex_);
  const auto held = find_copy_locked(request.rank, request.step, request.world_size);
  if (!held) return std::nullopt;
  LentCopy lent;
  lent.fd = dup_fd(held->memfd->fd());
  lent.pinned = held->home == CopyHome::kOwn;  // its slot is not lent out while it is sent
  // Own: the copy's size, as its hello said; other copies: their slot's.
  lent.bytes = lent.pinned ? own_.at(request.rank)->slot_bytes : held->memfd->bytes();
  if (lent.pinned) shelf_.pin(request.rank, request.step);
  return lent;
}

void MemoryKeeper::fetch_served(const CopyPortRequest& request, const LentCopy& lent) {
  if (!lent.pinned) return;
  std::lock_guard lock(mutex_);
  shelf_.unpin(request.rank, request.step);
}

std::optional<OutgoingCopy> MemoryKeeper::take_for_push(int rank, int64_t step) {
  std::lock_guard lock(mutex_);
  const auto slot = shelf_.slot_of(rank, step);
  if (!slot) return std::nullopt;
  const auto& held = *own_.at(rank);
  const auto& memfd = *held.slots[static_cast<size_t>(*slot)];
  const proto::CopyHeader header = memfd.read_header();
  shelf_.pin(rank, step);
  return OutgoingCopy{dup_fd(memfd.fd()), held.slot_bytes, header.world_size, header.config_digest,
                      attempt_ ? attempt_->round : -1};
}

void MemoryKeeper::pushed(int rank, int64_t step, bool ok) {
  std::lock_guard lock(mutex_);
  shelf_.unpin(rank, step);
  if (ok) set_pushed_locked(rank, step);
}

std::optional<CopySource> MemoryKeeper::buddy() {
  std::optional<MemoryAttempt> attempt;
  {
    std::lock_guard lock(mutex_);
    if (buddy_ || !attempt_ || attempt_->nodes <= 1) return buddy_;
    attempt = attempt_;
  }
  const int node = buddy_of(attempt->node, attempt->nodes);
  const auto inventory = read_inventory(*attempt, node, copy_key(), kInventoryWait);
  if (!inventory || inventory->port <= 0) return std::nullopt;  // its copy port is not open yet: asked again
  std::lock_guard lock(mutex_);
  if (attempt_ && attempt_->round == attempt->round)
    buddy_ = CopySource{node, inventory->host, inventory->addr, inventory->port};
  return buddy_;
}

std::vector<int64_t> MemoryKeeper::candidates(int rank) const {
  std::lock_guard lock(mutex_);
  return shelf_.candidates(rank);
}

uint64_t MemoryKeeper::held_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [rank, held] : own_) total += held->slot_bytes * held->slots.size();
  for (const auto& [rank, slots] : replica_slots_) {
    for (const auto& slot : slots) total += slot->bytes();
  }
  return total;
}

Inventory MemoryKeeper::inventory() const {
  std::lock_guard lock(mutex_);
  return inventory_locked();
}

Inventory MemoryKeeper::inventory_locked() const {
  Inventory inventory;
  inventory.node = attempt_ ? attempt_->node : -1;
  inventory.host = host_;
  inventory.addr = attempt_ ? attempt_->addr : "";
  inventory.port = peers_ ? peers_->port() : 0;
  for (const auto& [rank, held] : own_) {
    for (const int64_t step : shelf_.candidates(rank)) {
      const auto slot = shelf_.slot_of(rank, step);
      const proto::CopyHeader header = held->slots[static_cast<size_t>(*slot)]->read_header();
      inventory.copies.push_back({rank, step, header.world_size, header.config_digest, false});
    }
  }
  for (const auto& r : replicas_.held())
    inventory.copies.push_back({r.rank, r.copy.step, r.copy.world_size, r.copy.digest, true});
  for (const auto& [rank, retired] : retired_) {
    for (const auto& [step, slot] : retired.committed)
      inventory.copies.push_back({rank, step, retired.world_size, retired.slots->digest, false});
  }
  return inventory;
}

}  // namespace meshrun::launcher
