// train(): the whole run of one worker: process group, data, sharded model, optimizer loop with
// gradient accumulation, logging, evaluation, final memory report and a short sample.
#pragma once

#include <vector>

#include "trainer/config.hpp"
#include "trainer/dist_env.hpp"

namespace meshrun::trainer {

struct TrainSummary {
  std::vector<double> losses;  // global mean training loss per step
  double last_val_loss = -1;
};

TrainSummary train(const TrainerConfig& config, const DistEnv& env);

}  // namespace meshrun::trainer
