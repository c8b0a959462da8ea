// The decoder's elementwise operators as autograd functions: on fp32 CPU tensors each forward and each
// backward is one fused kernel (cpu_kernels.hpp) that saves only its inputs; elsewhere (CUDA, bf16 compute)
// they are ATen's operators, where rms_norm is already one kernel and the rest is memory-bound either way.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshrun::trainer {

/// x / sqrt(mean(x^2, -1) + eps) * weight over the last dimension.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// Rotary embedding of x [B, T, heads, head_dim] (head_dim contiguous) with tables [>= T, head_dim] in the
/// rotate-half layout of make_rope (sin signed). The result is contiguous.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

/// silu(gate) * up (SwiGLU's gating), elementwise.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace meshrun::trainer
