// The fused fp32 CPU operators (trainer/model/fused_ops) against ATen's composite formulas evaluated in
// double: values and gradients, odd sizes (tails of the vector loops), strided gradients, clamped exp()
// inputs, and several threads (the row split must not change what is computed).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include <torch/csrc/autograd/autograd.h>

#include "trainer/model/fused_ops.hpp"
#include "trainer/model/model.hpp"

namespace mt = meshrun::trainer;

namespace {

// max |got - want| relative to max |want|: fp32 arithmetic against the double reference.
double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor w = want.to(at::kDouble);
  return (got.to(at::kDouble) - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-300);
}

// fp32 results are a few roundings away from double: 16-lane sums over <= 512 terms, one exp() within 2 ulp.
constexpr double kBound = 5e-6;

at::Tensor leaf(at::Tensor t) { return t.set_requires_grad(true); }

struct Grads {
  at::Tensor out;
  std::vector<at::Tensor> inputs;
};

// Runs f on fresh leaves made from `values`, back-propagates `upstream`, returns the output and the gradients.
template <typename F>
Grads run(F f, const std::vector<at::Tensor>& values, const at::Tensor& upstream) {
  std::vector<at::Tensor> leaves;
  for (const auto& v : values) leaves.push_back(leaf(v.detach().clone()));
  at::Tensor out = f(leaves);
  out.backward(upstream.to(out.scalar_type()));
  Grads g{out.detach(), {}};
  for (const auto& l : leaves) g.inputs.push_back(l.grad());
  return g;
}

at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

at::Tensor rotary_reference(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t t = x.size(1);
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  // make_rope's sin carries the sign of rotate-half; the reference uses the plain |sin| of the high half.
  const at::Tensor plain_sin = sin.narrow(0, 0, t).narrow(-1, half, half).repeat({1, 2}).unsqueeze(1);
  return x * cos.narrow(0, 0, t).unsqueeze(1) + rotated * plain_sin;
}

void check_close(const Grads& got, const Grads& want, double bound = kBound) {
  CHECK(relative_error(got.out, want.out) < bound);
  REQUIRE(got.inputs.size() == want.inputs.size());
  for (size_t i = 0; i < got.inputs.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(got.inputs[i].defined());
    CHECK(relative_error(got.inputs[i], want.inputs[i]) < bound);
  }
}

mt::ModelConfig rope_config(int64_t head_dim) {
  mt::ModelConfig c;
  c.n_heads = 2;
  c.dim = 2 * head_dim;
  return c;
}

// Restores the intra-op thread count a test changed.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

}  // namespace

TEST_CASE("fused rms_norm matches the composite formula, values and gradients", "[trainer][fused]") {
  at::manual_seed(1);
  for (auto shape : {std::vector<int64_t>{3, 5, 37}, std::vector<int64_t>{2, 100, 512}, std::vector<int64_t>{1, 16}}) {
    INFO("shape [" << shape[0] << ", " << shape[1] << ", ...]");
    const at::Tensor x = at::randn(shape) * 3.0;
    const at::Tensor w = at::rand({shape.back()}) + 0.5;
    const at::Tensor upstream = at::randn(shape);
    const Grads got = run([](auto& in) { return mt::rms_norm(in[0], in[1], 1e-5); }, {x, w}, upstream);
    const Grads want = run([](auto& in) { return rms_norm_reference(in[0], in[1], 1e-5); },
                           {x.to(at::kDouble), w.to(at::kDouble)}, upstream);
    check_close(got, want);
  }
}

TEST_CASE("fused rms_norm gives the same result on two threads as on one", "[trainer][fused]") {
  at::manual_seed(2);
  const at::Tensor x = at::randn({4, 300, 64});
  const at::Tensor w = at::rand({64}) + 0.5;
  const at::Tensor upstream = at::randn({4, 300, 64});
  auto f = [](auto& in) { return mt::rms_norm(in[0], in[1], 1e-6); };
  const Grads one = [&] {
    const ThreadCount single(1);
    return run(f, {x, w}, upstream);
  }();
  const ThreadCount two(2);
  const Grads both = run(f, {x, w}, upstream);
  CHECK(at::equal(one.out, both.out));
  CHECK(at::equal(one.inputs[0], both.inputs[0]));
  // The weight gradient sums each thread's rows separately: the same terms, another order.
  CHECK(relative_error(both.inputs[1], one.inputs[1]) < kBound);
}

TEST_CASE("fused rotary embedding matches rotate-half, values and gradients", "[trainer][fused]") {
  at::manual_seed(3);
  for (int64_t head_dim : {10, 64}) {
    INFO("head_dim " << head_dim);
    const mt::Rope rope = mt::make_rope(rope_config(head_dim), 40, at::kFloat, at::kCPU);
    const at::Tensor x = at::randn({2, 33, 3, head_dim});
    const at::Tensor upstream = at::randn({2, 3, 33, head_dim});
    // Heads move forward after the rotation, as in the model: the gradient arrives strided.
    const Grads got =
        run([&](auto& in) { return mt::rotary(in[0], rope.cos, rope.sin).transpose(1, 2); }, {x}, upstream);
    const at::Tensor cos = rope.cos.to(at::kDouble);
    const at::Tensor sin = rope.sin.to(at::kDouble);
    const Grads want =
        run([&](auto& in) { return rotary_reference(in[0], cos, sin).transpose(1, 2); }, {x.to(at::kDouble)}, upstream);
    check_close(got, want);
    CHECK(got.out.transpose(1, 2).is_contiguous());
  }
}

TEST_CASE("fused rotary embedding splits rows across batch entries correctly on two threads", "[trainer][fused]") {
  at::manual_seed(4);
  const mt::Rope rope = mt::make_rope(rope_config(8), 300, at::kFloat, at::kCPU);
  const at::Tensor x = at::randn({3, 300, 2, 8});
  const at::Tensor upstream = at::randn({3, 300, 2, 8});
  auto f = [&](auto& in) { return mt::rotary(in[0], rope.cos, rope.sin); };
  const Grads one = [&] {
    const ThreadCount single(1);
    return run(f, {x}, upstream);
  }();
  const ThreadCount two(2);
  const Grads both = run(f, {x}, upstream);
  CHECK(at::equal(one.out, both.out));
  CHECK(at::equal(one.inputs[0], both.inputs[0]));
  const Grads want =
      run([&](auto& in) { return rotary_reference(in[0], rope.cos.to(at::kDouble), rope.sin.to(at::kDouble)); },
          {x.to(at::kDouble)}, upstream);
  check_close(both, want);
}

TEST_CASE("fused swiglu matches silu(gate) * up, including where exp() saturates", "[trainer][fused]") {
  at::manual_seed(5);
  // 1003 elements: vector loops with a tail; gates up to +-120 reach both clamps of exp().
  at::Tensor gate = at::randn({17, 59}) * 4.0;
  gate.view({-1}).narrow(0, 0, 6).copy_(at::tensor({-120.0f, -88.5f, -30.0f, 30.0f, 88.5f, 120.0f}));
  const at::Tensor up = at::randn({17, 59});
  const at::Tensor upstream = at::randn({17, 59});
  const Grads got = run([](auto& in) { return mt::swiglu(in[0], in[1]); }, {gate, up}, upstream);
  const Grads want =
      run([](auto& in) { return at::silu(in[0]) * in[1]; }, {gate.to(at::kDouble), up.to(at::kDouble)}, upstream);
  check_close(got, want);
  // Element by element where the gate is large: silu(-120) = -120 * 4e-53 is 0 in fp32, silu(120) = 120.
  const at::Tensor out = got.out.view({-1});
  CHECK(std::abs(out[0].item<float>()) < 1e-30f);
  const double expected = 120.0 * up.view({-1})[5].item<double>();
  CHECK(std::abs(out[5].item<double>() - expected) <= 1e-6 * std::abs(expected));
}

TEST_CASE("fused swiglu is accurate element by element over the range gates take", "[trainer][fused]") {
  // The bound above is relative to the largest element; here each element's own relative error is checked, so
  // an exp() that is off by more than a few ulp anywhere in [-20, 20] fails (sigmoid damps its error by 1 - s).
  const at::Tensor gate = at::linspace(-20.0, 20.0, 4001);
  const at::Tensor up = at::ones({4001});
  const at::Tensor upstream = at::ones({4001});
  const Grads got = run([](auto& in) { return mt::swiglu(in[0], in[1]); }, {gate, up}, upstream);
  const Grads want =
      run([](auto& in) { return at::silu(in[0]) * in[1]; }, {gate.to(at::kDouble), up.to(at::kDouble)}, upstream);
  auto elementwise = [](const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor w = b.to(at::kDouble);
    return ((a.to(at::kDouble) - w).abs() / (w.abs() + 1e-30)).max().item<double>();
  };
  CHECK(elementwise(got.out, want.out) < 2e-6);
  CHECK(elementwise(got.inputs[1], want.inputs[1]) < 2e-6);  // d/d(up) = silu(gate)
  // d/d(gate) = s * (1 + gate * (1 - s)) crosses zero near gate = -1.28: measured against its own scale there.
  CHECK(relative_error(got.inputs[0], want.inputs[0]) < 2e-6);
  // NaN passes the clamps of exp(): a diverging run shows NaN, not a finite value.
  const at::Tensor nan = at::full({20}, std::numeric_limits<float>::quiet_NaN());
  CHECK(mt::swiglu(nan, at::ones({20})).isnan().all().item<bool>());
}

TEST_CASE("fused operators take strided inputs and give their gradients", "[trainer][fused]") {
  at::manual_seed(7);
  // rms_norm of a transposed tensor; rotary of every other head of a wider projection.
  const at::Tensor wide = at::randn({48, 3, 40});
  const at::Tensor w = at::rand({48}) + 0.5;
  const at::Tensor upstream = at::randn({40, 3, 48});
  const Grads got = run([](auto& in) { return mt::rms_norm(in[0].transpose(0, 2), in[1], 1e-5); }, {wide, w}, upstream);
  const Grads want = run([](auto& in) { return rms_norm_reference(in[0].transpose(0, 2), in[1], 1e-5); },
                         {wide.to(at::kDouble), w.to(at::kDouble)}, upstream);
  check_close(got, want);

  const mt::Rope rope = mt::make_rope(rope_config(16), 20, at::kFloat, at::kCPU);
  const at::Tensor qkv = at::randn({2, 20, 6, 16});
  const at::Tensor up2 = at::randn({2, 20, 3, 16});
  auto every_other = [](const at::Tensor& t) { return t.slice(2, 0, 6, 2); };
  const Grads rotated = run([&](auto& in) { return mt::rotary(every_other(in[0]), rope.cos, rope.sin); }, {qkv}, up2);
  const Grads reference = run(
      [&](auto& in) {
        return rotary_reference(every_other(in[0]), rope.cos.to(at::kDouble), rope.sin.to(at::kDouble));
      },
      {qkv.to(at::kDouble)}, up2);
  check_close(rotated, reference);
}

TEST_CASE("fused operators refuse a second derivative and pass empty tensors to ATen", "[trainer][fused]") {
  const at::Tensor gate = at::randn({8}).set_requires_grad(true);
  const at::Tensor out = mt::swiglu(gate, at::ones({8})).sum();
  CHECK_THROWS_WITH(torch::autograd::grad({out}, {gate}, {}, /*retain_graph=*/true, /*create_graph=*/true),
                    Catch::Contains("not twice differentiable"));
  CHECK(mt::rms_norm(at::zeros({0, 16}), at::ones({16}), 1e-5).sizes() == at::IntArrayRef({0, 16}));
  CHECK(mt::swiglu(at::zeros({0}), at::zeros({0})).numel() == 0);
}

TEST_CASE("fused operators leave other dtypes to ATen", "[trainer][fused]") {
  at::manual_seed(6);
  const at::Tensor x = at::randn({4, 32}).to(at::kBFloat16);
  const at::Tensor w = (at::rand({32}) + 0.5).to(at::kBFloat16);
  CHECK(at::equal(mt::rms_norm(x, w, 1e-5), at::rms_norm(x, {32}, w, 1e-5)));
  CHECK(at::equal(mt::swiglu(x, x), at::silu(x) * x));
  // The fp32 kernels would refuse bf16 pointers: equality with ATen's formula shows the fallback ran.
  const mt::Rope rope = mt::make_rope(rope_config(8), 4, at::kBFloat16, at::kCPU);
  const at::Tensor q = at::randn({1, 4, 2, 8}).to(at::kBFloat16);
  const at::Tensor swapped = q.view({1, 4, 2, 2, 4}).flip(-2).view(q.sizes());
  CHECK(at::equal(mt::rotary(q, rope.cos, rope.sin), q * rope.cos.unsqueeze(1) + swapped * rope.sin.unsqueeze(1)));
}
