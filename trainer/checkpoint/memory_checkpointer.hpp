// Copies in memory (checkpoint.memory_interval; docs/checkpoints.md, "Copies in memory"). Every K steps each
// rank copies its shards, both AdamW moments and its step into a slot its node's meshrun agent lent it (a
// memfd the agent holds, so the copy outlives the worker), in the byte layout of its rank<R>.bin. A restart
// then restores from there instead of storage (memory_restore.hpp).
//
// Off the training thread: start() after step S only wakes the writer thread. The copy overlaps step S+1's
// forward and backward, which only read the shards; S+1's optimizer step, the first thing that changes them,
// waits in before_update() until the copy is sealed (the same gate as a background save's snapshot).
//
// A copy counts only when every rank's copy of that step is complete: the header says "writing" until the
// last byte is in, then "sealed" (the agent checks it); the step's loss all-reduce carries one more number
// per rank, status() = sealed, and when the sum is the world size at step S+1 every rank tells its agent
// "commit S". An agent never lends out the slot of its newest committed step, so a worker killed mid-copy
// leaves the previous committed step standing. The agent then pushes the copy to its buddy node; a control
// block it lent (8 bytes the worker maps read-only) says which step the buddy holds, and when the step's
// all-reduce shows every rank's copy on its buddy, every rank tells its agent "durable S": the step a lost
// node's ranks restore from, which the agents keep until a newer one is durable.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/repeated_notice.hpp"
#include "trainer/checkpoint/agent_link.hpp"
#include "trainer/checkpoint/background_writer.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/config/trainer_config.hpp"

namespace meshrun::trainer {

/// The run a copy belongs to: a digest of the model, data and training config.
uint64_t memory_copy_digest(const TrainerConfig& config);

/// What one copy did, for the memory_copy event.
struct MemoryCopyStats {
  int64_t step = 0;
  int64_t bytes = 0;               // this rank's payload
  double copy_seconds = 0;         // the writer thread's copy, CRCs included
  double blocked_seconds = 0;      // the training thread's wait for it in before_update()
  int64_t sealed_during_step = 0;  // the training step running when the copy was sealed (> step: it overlapped)
  std::string skipped;             // why this rank made no copy ("" when it did)
  bool slots_in_use = false;       // skipped because every slot held a copy that must stay (copies come too often)
  bool committed = false;          // every rank sealed it: the agents keep it for a restart
};

class MemoryCheckpointer {
 public:
  /// Says hello to the agent behind `socket` and maps the two slots it lends. Collective: when any rank
  /// cannot (the agent refuses, a shard lives on a GPU), every rank returns nullptr and rank 0 says why.
  static std::unique_ptr<MemoryCheckpointer> create(const TrainerConfig& config, ShardedModel& model, AdamW& optimizer,
                                                    Communicator& world, const std::string& socket,
                                                    const std::atomic<int64_t>& training_step);
  ~MemoryCheckpointer();
  MemoryCheckpointer(const MemoryCheckpointer&) = delete;
  MemoryCheckpointer& operator=(const MemoryCheckpointer&) = delete;

  /// After step `state.step` (every rank alike): hands the copy of that state to the writer thread.
  void start(const TrainState& state);
  /// Before anything changes the shards or the moments: waits until the copy in flight is sealed.
  void before_update();
  /// This rank's part of the step's all-reduce: {sealed, pushed}: its copy of the step in flight is sealed;
  /// its copy of the newest committed step is on its buddy node.
  std::array<double, 2> status() const;
  /// The sums over ranks of status(), after the step's all-reduce. At the step after a copy started, every
  /// rank's copy is done: commits it when every rank sealed it, and returns its stats (this rank's) either way.
  /// Tells the agent "durable" once every rank's committed copy is on its buddy.
  std::optional<MemoryCopyStats> advance(double sealed_sum, double pushed_sum);
  /// Training resumes after `step` (0 for a fresh start), restored from `source` ("fresh", "storage",
  /// "memory", "memory (buddy)"): the agent drops this rank's copies of later steps and tells the
  /// recovery ledger where the load phase read from.
  void resumed_from(int64_t step, const std::string& source);
  /// The run's end: how many copies this rank skipped and why, when it skipped any (the lines during the run
  /// said it once, then every few minutes); empty otherwise.
  std::string skipped_summary() const;
  /// Bytes of the two slots this rank writes into.
  int64_t slot_bytes() const { return static_cast<int64_t>(slot_bytes_); }
  AgentLink& link() { return *link_; }

 private:
  struct Piece {
    const UnitSpec* spec = nullptr;
    size_t unit = 0;
    int kind = 0;
    int64_t lo = 0;  // unit-flat elements [lo, hi)
    int64_t hi = 0;
    const float* source = nullptr;  // element lo of the live shard or moment
  };
  struct Slot {
    void* data = nullptr;
    size_t bytes = 0;
  };

  MemoryCheckpointer(const TrainerConfig& config, Communicator& world, std::vector<Piece> pieces,
                     std::unique_ptr<AgentLink> link, const std::atomic<int64_t>& training_step);
  std::string say_hello(ShardedModel& model);
  /// Says a skipped copy: once, then every few minutes with a count.
  void say_skipped(const MemoryCopyStats& stats);
  /// The writer thread's job: the copy of `state`, its stats into copied_.
  void copy_job(const TrainState& state);
  /// The copy of `state`: asks for a slot, fills it, seals it. Returns why not, or "".
  std::string copy(const TrainState& state, MemoryCopyStats& stats);
  /// The chunk index of the payload (rank<R>.bin's), with `crcs` per chunk or the widest CRC text.
  nlohmann::json chunk_index(const std::vector<uint32_t>* crcs) const;

  Communicator& world_;
  std::vector<Piece> pieces_;
  size_t unit_count_ = 0;  // the fault hooks fire after unit unit_count_/2
  std::unique_ptr<AgentLink> link_;
  const std::atomic<int64_t>& training_step_;
  uint64_t digest_ = 0;
  int world_size_ = 1;
  std::string layout_;
  uint64_t index_capacity_ = 0;
  uint64_t payload_bytes_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t largest_slot_bytes_ = 0;  // any rank's copy: every unit's whole chunk
  std::vector<Slot> slots_;
  std::vector<UniqueFd> slot_fds_;
  const std::atomic<int64_t>* pushed_step_ = nullptr;  // the control block: this rank's newest step on its buddy

  // Training thread only.
  bool in_flight_ = false;  // started, not yet decided by advance()
  bool gate_pending_ = false;
  int64_t durable_pending_ = 0;  // the newest committed step not yet on every buddy (0: none)
  double blocked_ = 0;           // the copy in flight's wait in before_update()
  int64_t copies_decided_ = 0;   // copies advance() returned, skipped or not
  int64_t skipped_in_use_ = 0;   // of those, skipped because every slot was in use
  RepeatedNotice skipped_notice_;

  MemoryCopyStats copied_;  // written by the writer's job, read once it ended (state().idle, or the gate passed)
  std::unique_ptr<BackgroundWriter> writer_;  // started by create() once the slots are mapped; stopped first
};

}  // namespace meshrun::trainer
