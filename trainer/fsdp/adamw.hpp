// AdamW over the local fp32 shards, global-norm gradient clipping and the warmup + cosine schedule.
// The optimizer never communicates except for the one all-reduce of the squared gradient norm.
// The update is ATen's fused AdamW kernel (one vectorised pass over parameter, gradient and both moments
// per range, no temporaries); the division of summed gradients by the number of ranks and the clipping
// factor ride along in that pass as its gradient scale instead of costing passes of their own.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/communicator.hpp"
#include "trainer/fsdp/flat_param_unit.hpp"

namespace meshrun::trainer {

/// Linear warm-up to train.lr over warmup_steps, then cosine decay to min_lr at train.steps. step is 1-based.
double learning_rate(const TrainConfig& config, int64_t step);

class AdamW {
 public:
  AdamW(const TrainConfig& config, std::vector<FlatParamUnit*> units);
  void zero_grad();
  /// Global L2 norm of the gradient over all ranks' shards: local squared norms summed over `group`
  /// (the shard group); nullptr when every rank holds the whole gradient (NO_SHARD).
  double global_grad_norm(Communicator* group);
  /// Scales gradients so their global norm is at most max_norm (no-op when max_norm == 0). The factor is
  /// applied inside the next step().
  void clip(double norm, double max_norm);
  void step(double lr);
  int64_t state_bytes() const;

  // Checkpointed state: the moments of unit i's local shard and the number of steps taken.
  at::Tensor& exp_avg(size_t unit) { return exp_avg_[unit]; }
  at::Tensor& exp_avg_sq(size_t unit) { return exp_avg_sq_[unit]; }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }

 private:
  TrainConfig config_;
  std::vector<FlatParamUnit*> units_;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
  // Per unit: [begin, end) ranges of the shard without weight decay (norm gains, padding).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> no_decay_ranges_;
  double clip_factor_ = 1.0;
  int64_t step_ = 0;
};

}  // namespace meshrun::trainer
