// train(): the whole run of one worker: process group, data, sharded model, optimizer loop with
// gradient accumulation, logging, evaluation, final memory report and a short sample.
#pragma once

#include <vector>

#include "trainer/config.hpp"
#include "trainer/distributed/dist_env.hpp"

namespace meshrun::trainer {

struct TrainSummary {
  std::vector<double> losses;  // global mean training loss per step
  double last_val_loss = -1;
  int64_t first_step = 1;     // > 1 when resumed from a checkpoint
  int stopped_by_signal = 0;  // SIGUSR1 / SIGTERM: checkpointed and stopped early
};

TrainSummary train(const TrainerConfig& config, const DistEnv& env);

}  // namespace meshrun::trainer
