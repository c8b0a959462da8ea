// Activation checkpointing of one FSDP unit: its forward runs without keeping intermediate activations,
// and its backward re-runs the forward with grad enabled on the (re-gathered) parameters, then
// back-propagates through that recomputed graph. Costs one extra forward of the unit per step.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainer/fsdp/flat_param_unit.hpp"

namespace meshrun::trainer {

/// A unit's computation: input activations and its parameter views (spec order) -> output.
using UnitFunction = std::function<at::Tensor(const at::Tensor& x, const std::vector<at::Tensor>& params)>;

/// fn(x, unit.views_of(flat)) with only `x` saved for backward. `flat` is the unit's buffer as returned by
/// pre_forward_flat(); `fn` and `unit` must outlive the backward pass.
at::Tensor checkpointed_forward(const UnitFunction& fn, FlatParamUnit& unit, const at::Tensor& x,
                                const at::Tensor& flat);

}  // namespace meshrun::trainer
