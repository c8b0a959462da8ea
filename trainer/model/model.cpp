#include "trainer/model/model.hpp"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "trainer/model/fused_ops.hpp"

namespace meshrun::trainer {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t UnitSpec::numel() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

std::vector<UnitSpec> build_unit_specs(const ModelConfig& c) {
  const int64_t d = c.dim;
  const int64_t kv = c.kv_heads() * c.head_dim();
  const int64_t f = c.ffn_dim();
  std::vector<UnitSpec> units;
  UnitSpec root{"root", {}};
  root.params.push_back({"tok_embeddings", {c.vocab_size, d}, InitKind::kNormal, true});
  root.params.push_back({"norm", {d}, InitKind::kOnes, false});
  if (!c.tie_embeddings) root.params.push_back({"output", {c.vocab_size, d}, InitKind::kNormal, true});
  units.push_back(root);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    UnitSpec b{"block" + std::to_string(i), {}};
    b.params.push_back({"attention_norm", {d}, InitKind::kOnes, false});
    b.params.push_back({"wq", {d, d}, InitKind::kNormal, true});
    b.params.push_back({"wk", {kv, d}, InitKind::kNormal, true});
    b.params.push_back({"wv", {kv, d}, InitKind::kNormal, true});
    b.params.push_back({"wo", {d, d}, InitKind::kScaledNormal, true});
    b.params.push_back({"ffn_norm", {d}, InitKind::kOnes, false});
    b.params.push_back({"w1", {f, d}, InitKind::kNormal, true});
    b.params.push_back({"w3", {f, d}, InitKind::kNormal, true});
    b.params.push_back({"w2", {d, f}, InitKind::kScaledNormal, true});
    units.push_back(std::move(b));
  }
  return units;
}

at::Tensor init_unit(const UnitSpec& spec, const ModelConfig& config, uint64_t seed, int64_t unit_index) {
  // One generator per unit keeps a unit's values independent of how many other units exist.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ULL + static_cast<uint64_t>(unit_index) + 1);
  at::Tensor flat = at::empty({spec.numel()}, at::kFloat);
  int64_t offset = 0;
  const double scaled = config.init_std / std::sqrt(2.0 * static_cast<double>(config.n_layers));
  for (const auto& p : spec.params) {
    at::Tensor view = flat.narrow(0, offset, p.numel());
    switch (p.init) {
      case InitKind::kNormal: view.normal_(0.0, config.init_std, gen); break;
      case InitKind::kScaledNormal: view.normal_(0.0, scaled, gen); break;
      case InitKind::kOnes: view.fill_(1.0); break;
    }
    offset += p.numel();
  }
  return flat;
}

int64_t count_params(const ModelConfig& config) {
  int64_t n = 0;
  for (const auto& u : build_unit_specs(config)) n += u.numel();
  return n;
}

double train_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double d = static_cast<double>(c.dim);
  const double kv = static_cast<double>(c.kv_heads() * c.head_dim());
  const double f = static_cast<double>(c.ffn_dim());
  const double per_block = d * d * 2 + 2 * kv * d + 3 * f * d;
  const double matmul_params = per_block * static_cast<double>(c.n_layers) + static_cast<double>(c.vocab_size) * d;
  return 6.0 * matmul_params + 12.0 * static_cast<double>(c.n_layers) * d * static_cast<double>(seq_len);
}

namespace {

// Llama 3.1's rope scaling (Hugging Face rope_type "llama3"): wavelengths longer than the original context
// / low_freq_factor are stretched by the factor, those shorter than original / high_freq_factor are kept,
// and the band between blends the two linearly in original / wavelength.
at::Tensor llama3_scaled(const at::Tensor& inv_freq, const ModelConfig& c) {
  const double original = static_cast<double>(c.rope_original_max_seq_len);
  constexpr double kPi = 3.14159265358979323846;
  const at::Tensor wavelen = 2.0 * kPi / inv_freq;
  const at::Tensor stretched = inv_freq / c.rope_scaling_factor;
  const at::Tensor smooth =
      (original / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
  const at::Tensor blended = (1.0 - smooth) * stretched + smooth * inv_freq;
  const at::Tensor is_long = wavelen > original / c.rope_low_freq_factor;
  const at::Tensor is_short = wavelen < original / c.rope_high_freq_factor;
  return at::where(is_long, stretched, at::where(is_short, inv_freq, blended));
}

}  // namespace

Rope make_rope(const ModelConfig& c, int64_t seq_len, at::ScalarType dtype, const at::Device& device) {
  const int64_t half = c.head_dim() / 2;
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor inv_freq = at::pow(c.rope_theta, -at::arange(0, half, f64) / static_cast<double>(half));
  if (c.rope_scaling == RopeScaling::kLlama3) inv_freq = llama3_scaled(inv_freq, c);
  at::Tensor angles = at::outer(at::arange(0, seq_len, f64), inv_freq);  // [T, half]
  at::Tensor sin = angles.sin();
  angles = at::cat({angles, angles}, -1);  // [T, head_dim] (rotate-half layout)
  // rotate_half(x) * sin == swap_halves(x) * [-sin, sin]: the sign moves into the table (exactly).
  return {angles.cos().to(device, dtype), at::cat({-sin, sin}, -1).to(device, dtype)};
}

at::Tensor embed_forward(const at::Tensor& tokens, const std::vector<at::Tensor>& root) {
  return at::embedding(root[0], tokens);
}

at::Tensor block_forward(const at::Tensor& x, const std::vector<at::Tensor>& p, const Rope& rope,
                         const ModelConfig& c) {
  const int64_t b = x.size(0);
  const int64_t t = x.size(1);
  const int64_t hd = c.head_dim();
  at::Tensor h = rms_norm(x, p[0], c.norm_eps);
  const at::Tensor q = rotary(at::linear(h, p[1]).view({b, t, c.n_heads, hd}), rope.cos, rope.sin).transpose(1, 2);
  const at::Tensor k = rotary(at::linear(h, p[2]).view({b, t, c.kv_heads(), hd}), rope.cos, rope.sin).transpose(1, 2);
  const at::Tensor v = at::linear(h, p[3]).view({b, t, c.kv_heads(), hd}).transpose(1, 2);
  at::Tensor attn = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                     /*is_causal=*/true, /*scale=*/std::nullopt,
                                                     /*enable_gqa=*/c.kv_heads() != c.n_heads);
  attn = attn.transpose(1, 2).reshape({b, t, c.dim});
  at::Tensor out = x + at::linear(attn, p[4]);
  at::Tensor g = rms_norm(out, p[5], c.norm_eps);
  at::Tensor mlp = at::linear(swiglu(at::linear(g, p[6]), at::linear(g, p[7])), p[8]);
  return out + mlp;
}

at::Tensor head_forward(const at::Tensor& x, const std::vector<at::Tensor>& root, const ModelConfig& c) {
  at::Tensor h = rms_norm(x, root[1], c.norm_eps);
  const at::Tensor& w = c.tie_embeddings ? root[0] : root[2];
  return at::linear(h, w);
}

}  // namespace meshrun::trainer
