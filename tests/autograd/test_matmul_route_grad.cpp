// The autograd matmul's gradients when float32 products run on oneDNN (tensor/matmul_route.hpp):
// the float32 gradients of a, b against the float64 ones (float64 always runs on OpenBLAS), for
// the products of a training step: a linear layer (folded batch, transposed weight), a batched
// attention-like product with broadcast, and a product large enough for oneDNN's row blocks.
#include "grad_helpers.hpp"
#include "tensor/matmul_route.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// The gradients of sum(f(a, b) * w) with respect to a and b, in a's dtype.
std::pair<Tensor, Tensor> grads_of(const Tensor& a0, const Tensor& b0, const Tensor& w0, bool transpose_b) {
  Tensor a = a0.detach(), b = b0.detach();
  a.requires_grad_();
  b.requires_grad_();
  Tensor y = matmul(a, transpose_b ? transpose(b, -1, -2) : b);
  sum(y * w0).backward();
  return {a.grad(), b.grad()};
}

// Relative error of got (float32) against want (float64), by the Frobenius norm.
double rel_err(const Tensor& got, const Tensor& want) {
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) num += (g[i] - w[i]) * (g[i] - w[i]), den += w[i] * w[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace

TEST_CASE("matmul route: float32 gradients under each route match float64") {
  struct Case {
    Dims a, b, out;
    bool transpose_b;
    const char* what;
  };
  const std::vector<Case> cases = {
      {{4, 33, 48}, {40, 48}, {4, 33, 40}, true, "linear layer x @ W^T, folded batch"},
      {{2, 3, 17, 24}, {1, 3, 24, 19}, {2, 3, 17, 19}, false, "batched, b broadcast over the batch"},
      {{160, 96}, {96, 130}, {160, 130}, false, "2-d, 4 MFLOP (row blocks)"},
  };
  std::vector<MatmulRoute> routes{MatmulRoute::OpenBLAS, MatmulRoute::Auto};
  if (onednn_built()) routes.push_back(MatmulRoute::OneDNN);
  uint64_t seed = 900;
  for (const Case& c : cases) {
    Generator g(++seed);
    Tensor a = randn(c.a, g, kFloat64), b = randn(c.b, g, kFloat64), w = randn(c.out, g, kFloat64);
    auto [ga64, gb64] = grads_of(a, b, w, c.transpose_b);
    for (MatmulRoute r : routes) {
      INFO(c.what, ", route ", matmul_route_name(r));
      MatmulRouteGuard route(r);
      auto [ga, gb] = grads_of(to(a, kFloat32), to(b, kFloat32), to(w, kFloat32), c.transpose_b);
      CHECK(ga.dtype() == kFloat32);
      CHECK(ga.shape() == a.shape());
      CHECK(gb.shape() == b.shape());
      CHECK(rel_err(ga, ga64) < 1e-5);
      CHECK(rel_err(gb, gb64) < 1e-5);
    }
  }
}
