#include "trainer/model/fused_ops.hpp"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "trainer/model/cpu_kernels.hpp"

namespace meshrun::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool fp32_cpu(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat; }

// Work per task: at parallel_for's hand-off cost (microseconds), tasks of tens of KB and more pay off.
constexpr int64_t kRowGrain = 64;
constexpr int64_t kElementGrain = 1 << 16;

// The backward passes are kernels, not differentiable graphs: a second derivative through them would be
// silently wrong, so create_graph=true is refused.
void refuse_double_backward(const char* op) {
  TORCH_CHECK(!at::GradMode::is_enabled(), op, "'s fused CPU backward is not twice differentiable");
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
    const at::Tensor x = x_in.contiguous();
    const at::Tensor weight = weight_in.contiguous();
    const int64_t dim = x.size(-1);
    const int64_t rows = x.numel() / dim;
    at::Tensor y = at::empty_like(x);
    at::Tensor rstd = at::empty({rows}, x.options());
    const float* xp = x.const_data_ptr<float>();
    const float* wp = weight.const_data_ptr<float>();
    float* yp = y.mutable_data_ptr<float>();
    float* rp = rstd.mutable_data_ptr<float>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      cpu_kernels::rms_norm_forward(xp + begin * dim, wp, static_cast<float>(eps), end - begin, dim, yp + begin * dim,
                                    rp + begin);
    });
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward("rms_norm");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor grad = grads[0].contiguous();
    const int64_t dim = x.size(-1);
    const int64_t rows = x.numel() / dim;
    at::Tensor grad_x = at::empty_like(x);
    // One row of weight-gradient partial sums per chunk of rows, summed in chunk order: deterministic for a
    // given thread count.
    const int64_t chunks = std::clamp<int64_t>(rows / kRowGrain, 1, at::get_num_threads());
    at::Tensor partial = at::zeros({chunks, dim}, x.options());
    const float* gp = grad.const_data_ptr<float>();
    const float* xp = x.const_data_ptr<float>();
    const float* wp = saved[1].const_data_ptr<float>();
    const float* rp = saved[2].const_data_ptr<float>();
    float* gxp = grad_x.mutable_data_ptr<float>();
    float* pp = partial.mutable_data_ptr<float>();
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t first = rows * c / chunks;
        const int64_t last = rows * (c + 1) / chunks;
        cpu_kernels::rms_norm_backward(gp + first * dim, xp + first * dim, wp, rp + first, last - first, dim,
                                       gxp + first * dim, pp + c * dim);
      }
    });
    at::Tensor grad_weight = chunks == 1 ? partial[0] : partial.sum(0);
    return {grad_x, grad_weight, at::Tensor()};
  }
};

// x [B, T, H, hd] (hd contiguous) -> contiguous rotated copy; `inverse` for the backward.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse) {
  const at::Tensor in = x.stride(-1) == 1 ? x : x.contiguous();
  const int64_t batch = in.size(0);
  const int64_t tokens = in.size(1);
  at::Tensor out = at::empty(in.sizes(), in.options());
  cpu_kernels::RopeRows rows;
  rows.in_token_stride = in.stride(1);
  rows.in_head_stride = in.stride(2);
  rows.heads = in.size(2);
  rows.head_dim = in.size(3);
  rows.inverse = inverse;
  const int64_t row_numel = rows.heads * rows.head_dim;
  const float* ip = in.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  const float* cp = cos.const_data_ptr<float>();
  const float* sp = sin.const_data_ptr<float>();
  // Parallel over (batch, token) rows; a task's rows are cut where a batch entry ends (the tables restart).
  const int64_t grain = std::max<int64_t>(1, kRowGrain * 64 / row_numel);
  at::parallel_for(0, batch * tokens, grain, [&](int64_t begin, int64_t end) {
    cpu_kernels::RopeRows part = rows;
    for (int64_t r = begin; r < end;) {
      const int64_t b = r / tokens;
      const int64_t t = r % tokens;
      part.tokens = std::min(end - r, tokens - t);
      part.in = ip + b * in.stride(0) + t * in.stride(1);
      part.out = op + r * row_numel;
      part.cos = cp + t * rows.head_dim;
      part.sin = sp + t * rows.head_dim;
      cpu_kernels::rope(part);
      r += part.tokens;
    }
  });
  return out;
}

struct RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    return rotate(x, cos, sin, /*inverse=*/false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward("rotary");
    return {rotate(grads[0], ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(), /*inverse=*/true),
            at::Tensor(), at::Tensor()};
  }
};

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const at::Tensor gate = gate_in.contiguous();
    const at::Tensor up = up_in.contiguous();
    at::Tensor out = at::empty_like(gate);
    const float* ap = gate.const_data_ptr<float>();
    const float* bp = up.const_data_ptr<float>();
    float* op = out.mutable_data_ptr<float>();
    at::parallel_for(0, gate.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      cpu_kernels::swiglu_forward(ap + begin, bp + begin, end - begin, op + begin);
    });
    ctx->save_for_backward({gate, up});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward("swiglu");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_gate = at::empty_like(saved[0]);
    at::Tensor grad_up = at::empty_like(saved[1]);
    const float* gp = grad.const_data_ptr<float>();
    const float* ap = saved[0].const_data_ptr<float>();
    const float* bp = saved[1].const_data_ptr<float>();
    float* gap = grad_gate.mutable_data_ptr<float>();
    float* gbp = grad_up.mutable_data_ptr<float>();
    at::parallel_for(0, grad.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      cpu_kernels::swiglu_backward(gp + begin, ap + begin, bp + begin, end - begin, gap + begin, gbp + begin);
    });
    return {grad_gate, grad_up};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // The kernels take the shapes the model gives; anything else (and empty tensors) is ATen's to check.
  if (fp32_cpu(x) && fp32_cpu(weight) && x.numel() > 0 && weight.dim() == 1 && weight.size(0) == x.size(-1)) {
    return RmsNormFunction::apply(x, weight, eps);
  }
  // ATen accumulates in fp32 whatever the compute dtype (the mean of squares loses too much in bf16's 8 bits
  // of mantissa), and on CUDA it is one fused kernel that saves only the input and 1/rms for backward:
  // written out as pow/mean/rsqrt/mul it kept two fp32 copies of every normalised activation (measured on an
  // H100: 2.2 GB more peak memory than PyTorch's nn.RMSNorm for the 150m config).
  return at::rms_norm(x, {x.size(-1)}, weight, eps);
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos_table, const at::Tensor& sin_table) {
  const int64_t t = x.size(1);
  const at::Tensor cos = cos_table.narrow(0, 0, t);
  const at::Tensor sin = sin_table.narrow(0, 0, t);
  const bool kernel_shapes = x.dim() == 4 && x.numel() > 0 && x.size(3) % 2 == 0 && cos.dim() == 2 &&
                             cos.size(1) == x.size(3) && sin.sizes() == cos.sizes() && cos.is_contiguous() &&
                             sin.is_contiguous();
  if (kernel_shapes && fp32_cpu(x) && fp32_cpu(cos) && fp32_cpu(sin)) return RotaryFunction::apply(x, cos, sin);
  // x is contiguous here (straight out of the projection, before heads move forward), so the swap of the
  // two halves is a view plus one copy. Rotate-half as that swap (the sign is in the sin table), not a
  // negation and a concatenation of slices, whose backward zero-fills two full-size buffers.
  const int64_t half = x.size(-1) / 2;
  const at::Tensor swapped = x.view({x.size(0), t, x.size(2), 2, half}).flip(-2).view(x.sizes());
  // Tables [T, hd] broadcast over batch and heads as [T, 1, hd].
  return x * cos.unsqueeze(1) + swapped * sin.unsqueeze(1);
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  if (fp32_cpu(gate) && fp32_cpu(up) && gate.sizes() == up.sizes() && gate.numel() > 0) {
    return SwigluFunction::apply(gate, up);
  }
  return at::silu(gate) * up;
}

}  // namespace meshrun::trainer
