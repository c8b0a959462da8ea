// The restore from copies in memory (checkpoint.memory_interval; memory_checkpointer.hpp). After a restart
// every rank asks its agent which committed steps it holds for it; rank 0 proposes its newest and the ranks
// agree on the newest step every one of them holds. Unless a storage checkpoint is at least as new, each rank
// opens its copy (the agent passes the slot's descriptor), checks it whole (header, config digest, every
// chunk's CRC) and loads it through the same core as a storage checkpoint. Any refusal on any rank sends
// every rank to storage together, with the reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainer/checkpoint/agent_link.hpp"
#include "trainer/checkpoint/checkpoint.hpp"

namespace meshrun::trainer {

/// What the restore found, for the caller's summary and the checkpoint_restored event.
struct MemoryRestore {
  std::optional<TrainState> state;  // restored from memory; nullopt: the caller loads storage (or starts fresh)
  std::string why_not;              // when nothing was restored: why (empty on a first start, nothing held)
  CheckpointStats stats;
  int fetched_ranks = 0;   // ranks whose copy came from another node's agent (every rank knows the count)
  int resharded_from = 0;  // the world size of the copies when it was not this one's (the job shrank): 0 else
  int64_t steps_done = 0;  // the run's furthest step before this restart, as the agent knows it
};

/// Collective. `storage_step`: the step of the storage checkpoint the caller would load otherwise; memory is
/// used only when it holds a newer step.
MemoryRestore restore_from_memory(AgentLink& agent, const TrainerConfig& config, ShardedModel& model, AdamW& optimizer,
                                  Communicator& world, std::optional<int64_t> storage_step);

}  // namespace meshrun::trainer
