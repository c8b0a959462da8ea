#include "trainer/model/cpu_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

// One clone per ISA, chosen by the dynamic loader (ifunc). The loops are written so that GCC vectorises them
// at -O3: fixed-width lane accumulators instead of float reductions (which it may not reorder), no calls.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MESHRUN_CLONED __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MESHRUN_CLONED
#endif

namespace meshrun::trainer::cpu_kernels {
namespace {

// Sixteen running sums, summed at the end: vectorisable and the same order on every ISA.
constexpr int64_t kLanes = 16;

[[gnu::always_inline]] inline float sum_of_products(const float* a, const float* b, int64_t n) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += a[j + l] * b[j + l];
  }
  float total = 0.0f;
  for (; j < n; ++j) total += a[j] * b[j];
  for (int64_t l = 0; l < kLanes; ++l) total += lanes[l];
  return total;
}

[[gnu::always_inline]] inline float sum_of_products(const float* a, const float* b, const float* c, int64_t n) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += a[j + l] * b[j + l] * c[j + l];
  }
  float total = 0.0f;
  for (; j < n; ++j) total += a[j] * b[j] * c[j];
  for (int64_t l = 0; l < kLanes; ++l) total += lanes[l];
  return total;
}

// exp(x) for x in [-87, 88] (clamped outside): Cody-Waite reduction to r in [-ln2/2, ln2/2] and Cephes' expf
// polynomial, then 2^n through the exponent bits; within 2 ulp. Plain arithmetic, so it vectorises (a call to
// expf would not without -ffast-math).
[[gnu::always_inline]] inline float exp_clamped(float x) {
  // Comparisons with NaN are false, so NaN passes the clamps and the polynomial carries it to the result: a
  // diverging run shows NaN here as it would in ATen (a min/max rewrite could turn it into a finite value).
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  constexpr float kRoundToInt = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRoundToInt) - kRoundToInt;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const auto exponent = static_cast<int32_t>(n) + 127;  // n in [-126, 127]: a normal power of two
  return p * std::bit_cast<float>(exponent << 23);
}

[[gnu::always_inline]] inline float sigmoid(float x) { return 1.0f / (1.0f + exp_clamped(-x)); }

}  // namespace

MESHRUN_CLONED void rms_norm_forward(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
                                     float* y, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const float scale = 1.0f / std::sqrt(sum_of_products(xr, xr, dim) / static_cast<float>(dim) + eps);
    rstd[r] = scale;
    for (int64_t j = 0; j < dim; ++j) yr[j] = xr[j] * scale * weight[j];
  }
}

MESHRUN_CLONED void rms_norm_backward(const float* grad, const float* x, const float* weight, const float* rstd,
                                      int64_t rows, int64_t dim, float* grad_x, float* grad_weight) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = grad + r * dim;
    const float* xr = x + r * dim;
    float* gxr = grad_x + r * dim;
    const float s = rstd[r];
    // d/dx_j of x_i * s(x): s * delta_ij - x_i * x_j * s^3 / dim.
    const float along_x = s * s * s * sum_of_products(gr, weight, xr, dim) / static_cast<float>(dim);
    for (int64_t j = 0; j < dim; ++j) {
      gxr[j] = s * gr[j] * weight[j] - along_x * xr[j];
      grad_weight[j] += gr[j] * xr[j] * s;
    }
  }
}

namespace {

// out_j = x_j cos_j + x_partner(j) sin_j for one head: the low half takes its sin from sin_lo, the high
// half from sin_hi.
[[gnu::always_inline]] inline void rotate_head(const float* __restrict in, const float* __restrict cos,
                                               const float* __restrict sin_lo, const float* __restrict sin_hi,
                                               int64_t half, float* __restrict out) {
  for (int64_t j = 0; j < half; ++j) {
    const float lo = in[j];
    const float hi = in[j + half];
    out[j] = lo * cos[j] + hi * sin_lo[j];
    out[j + half] = hi * cos[j + half] + lo * sin_hi[j];
  }
}

}  // namespace

MESHRUN_CLONED void rope(const RopeRows& rows) {
  const int64_t half = rows.head_dim / 2;
  // The transposed rotation (backward) takes each half's sin from the partner's column.
  const int64_t lo_sin = rows.inverse ? half : 0;
  const int64_t hi_sin = rows.inverse ? 0 : half;
  for (int64_t t = 0; t < rows.tokens; ++t) {
    const float* table_cos = rows.cos + t * rows.head_dim;
    const float* table_sin = rows.sin + t * rows.head_dim;
    for (int64_t h = 0; h < rows.heads; ++h) {
      rotate_head(rows.in + t * rows.in_token_stride + h * rows.in_head_stride, table_cos, table_sin + lo_sin,
                  table_sin + hi_sin, half, rows.out + (t * rows.heads + h) * rows.head_dim);
    }
  }
}

MESHRUN_CLONED void swiglu_forward(const float* __restrict gate, const float* __restrict up, int64_t n,
                                   float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

MESHRUN_CLONED void swiglu_backward(const float* __restrict grad, const float* __restrict gate,
                                    const float* __restrict up, int64_t n, float* __restrict grad_gate,
                                    float* __restrict grad_up) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = gate[i];
    const float s = sigmoid(a);
    grad_gate[i] = grad[i] * up[i] * s * (1.0f + a * (1.0f - s));
    grad_up[i] = grad[i] * a * s;
  }
}

}  // namespace meshrun::trainer::cpu_kernels
