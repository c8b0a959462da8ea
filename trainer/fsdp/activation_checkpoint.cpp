#include "trainer/fsdp/activation_checkpoint.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace meshrun::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Checkpointed : public torch::autograd::Function<Checkpointed> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& flat, int64_t fn,
                            int64_t unit) {
    ctx->saved_data["fn"] = fn;
    ctx->saved_data["unit"] = unit;
    ctx->save_for_backward({x});
    // Runs with grad mode off (custom Function forward), so the block keeps none of its activations.
    const auto& f = *reinterpret_cast<const UnitFunction*>(fn);
    return f(x, reinterpret_cast<FlatParamUnit*>(unit)->views_of(flat));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& f = *reinterpret_cast<const UnitFunction*>(ctx->saved_data["fn"].toInt());
    auto* unit = reinterpret_cast<FlatParamUnit*>(ctx->saved_data["unit"].toInt());
    // The unit's PreBackward node ran first, so its buffer holds the gathered parameters again. A fresh
    // leaf over that storage collects the recomputed graph's parameter gradient as one flat tensor.
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor flat = unit->unsharded_buffer().requires_grad_(true);
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      out = f(x, unit->views_of(flat));
    }
    auto g = torch::autograd::grad({out}, {x, flat}, {grads[0]});
    return {g[0], g[1], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpointed_forward(const UnitFunction& fn, FlatParamUnit& unit, const at::Tensor& x,
                                const at::Tensor& flat) {
  return Checkpointed::apply(x, flat, reinterpret_cast<int64_t>(&fn), reinterpret_cast<int64_t>(&unit));
}

}  // namespace meshrun::trainer
