// ShardedModel: the Llama model wrapped in FSDP units (root + one per block) and the forward pass that
// drives gathering, freeing and prefetching in unit order.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainer/communicator.hpp"
#include "trainer/config.hpp"
#include "trainer/flat_param_unit.hpp"
#include "trainer/model.hpp"

namespace meshrun::trainer {

at::ScalarType to_scalar_type(DType d);

class ShardedModel {
 public:
  ShardedModel(const TrainerConfig& config, Communicator& comm, const at::Device& device);

  /// tokens [B, T] int64 -> logits [B, T, vocab] in param_dtype.
  at::Tensor forward(const at::Tensor& tokens);
  void set_requires_grad_sync(bool sync);
  /// Waits for every unit's gradient reduction of this step.
  void finish_grad_sync();
  /// Frees every gathered buffer (after evaluation / sampling).
  void reshard_all();

  std::vector<FlatParamUnit*> units();
  const GatheredBytes& gathered() const { return gathered_; }
  int64_t numel() const;
  /// Sum over units of the padded buffer sizes.
  int64_t padded_numel() const;
  /// All parameters in fp32, unit order, no padding. Collective: every rank must call it.
  at::Tensor full_params_fp32();

 private:
  ModelConfig config_;
  bool prefetch_;
  at::Device device_;
  GatheredBytes gathered_;
  std::vector<std::unique_ptr<FlatParamUnit>> units_;  // [0] root, [1..] blocks
  Rope rope_;
};

}  // namespace meshrun::trainer
