// model.init_from: a Hugging Face Llama folder's weights become the model's initial parameters. Every
// rank reads, from the safetensors files, only the element ranges its own shards cover (pread of those
// bytes; bf16/fp16 converted to fp32), like a resharding checkpoint load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/communicator.hpp"
#include "trainer/fsdp/sharded_model.hpp"

namespace meshrun::trainer {

/// What init_from_hf did, for the log and rank<R>.json.
struct HfInitStats {
  std::string folder;
  std::string dtypes;               // "BF16", "F32", ...
  int64_t tensors = 0;              // tensors of the model filled
  std::vector<std::string> unread;  // present but not used (a tied model's lm_head.weight)
  int64_t bytes_read = 0;           // by this rank
  int64_t bytes_total = 0;          // by all ranks together
  double seconds = 0;
};

/// Fills the model's shards from config.model.init_from. Every tensor the model has must be there with its
/// exact shape, and every tensor there must belong to the model: a mismatch throws naming the tensor, the
/// file and both shapes. Collective over `world`: one rank's refusal stops every rank.
HfInitStats init_from_hf(const TrainerConfig& config, ShardedModel& model, Communicator& world);

}  // namespace meshrun::trainer
