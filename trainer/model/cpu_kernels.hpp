// Fused fp32 CPU kernels for the decoder's elementwise work (RMSNorm, rotary embedding, SwiGLU): each forward
// and each backward is one pass over memory, where ATen runs 3-10 operators with a full-size temporary between
// them. Torch-free loops over row ranges; the caller splits rows over threads. Compiled per ISA (target_clones).
#pragma once

#include <cstdint>

namespace meshrun::trainer::cpu_kernels {

/// y = x / sqrt(mean(x^2) + eps) * weight, row by row; rstd[r] = 1 / sqrt(mean(x_r^2) + eps) is kept for
/// backward. x, y: [rows, dim] contiguous.
void rms_norm_forward(const float* x, const float* weight, float eps, int64_t rows, int64_t dim, float* y, float* rstd);

/// grad_x = rstd * (g*w - x * rstd^2 * mean(g*w*x)) row by row, and grad_weight += sum over the rows of
/// g * x * rstd (accumulated: the caller gives each thread its own zeroed row of partial sums).
void rms_norm_backward(const float* grad, const float* x, const float* weight, const float* rstd, int64_t rows,
                       int64_t dim, float* grad_x, float* grad_weight);

/// Rotary embedding of [tokens, heads, head_dim] rows in the rotate-half layout. `in` may be strided over
/// tokens and heads (head_dim contiguous); `out` is contiguous. cos/sin: the tables' rows for these tokens,
/// [tokens, head_dim] contiguous, sin signed as in make_rope ([-sin, sin]). `inverse` applies the transposed
/// rotation: the backward of the forward one (a rotation's transpose is its inverse).
struct RopeRows {
  const float* in = nullptr;
  int64_t in_token_stride = 0;
  int64_t in_head_stride = 0;
  float* out = nullptr;
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  bool inverse = false;
};
void rope(const RopeRows& rows);

/// out = silu(gate) * up over n elements.
void swiglu_forward(const float* gate, const float* up, int64_t n, float* out);
/// grad_gate = g * up * s * (1 + gate * (1 - s)), grad_up = g * gate * s, with s = sigmoid(gate).
void swiglu_backward(const float* grad, const float* gate, const float* up, int64_t n, float* grad_gate,
                     float* grad_up);

}  // namespace meshrun::trainer::cpu_kernels
