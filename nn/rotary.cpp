// nn::RotaryEmbedding (see rotary.hpp), composed from narrow, cat and mul so its gradient
// comes from those primitives.
#include "nn/rotary.hpp"

#include <cmath>

#include "autograd/ops.hpp"

namespace attnlab::nn {

namespace {

// cos and sin of m * theta_i for positions m in [offset, offset + n), laid out cat(freqs, freqs):
// (n, dim) each.
template <class T>
std::pair<std::vector<T>, std::vector<T>> rope_tables(int64_t offset, int64_t n, int64_t dim, double base) {
  const int64_t half = dim / 2;
  std::vector<T> c(n * dim), s(n * dim);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(offset + r) * std::pow(base, -2.0 * double(i) / double(dim));  // m * theta_i
      c[r * dim + i] = c[r * dim + i + half] = T(std::cos(angle));
      s[r * dim + i] = s[r * dim + i + half] = T(std::sin(angle));
    }
  return {std::move(c), std::move(s)};
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(int64_t dim, int64_t max_len, double base) : dim(dim), max_len(max_len), base(base) {
  if (dim <= 0 || dim % 2 || max_len <= 0 || !(base > 0))
    fail<ValueError>("RotaryEmbedding: need an even positive dim, positive max_len and base, got dim={}, "
                     "max_len={}, base={}",
                     dim, max_len, base);
  auto [c, s] = rope_tables<float>(0, max_len, dim, base);  // (max_len, dim)
  cos = register_buffer("cos", from_vector(c, Dims{max_len, dim}), /*persistent=*/false);
  sin = register_buffer("sin", from_vector(s, Dims{max_len, dim}), /*persistent=*/false);
}

Tensor rotate_half(const Tensor& x) {
  const int64_t half = x.shape().back() / 2;
  Tensor x1 = narrow(x, -1, 0, half);     // (..., dim/2)
  Tensor x2 = narrow(x, -1, half, half);  // (..., dim/2)
  return cat({neg(x2), x1}, -1);          // (..., dim)
}

Tensor RotaryEmbedding::apply(const Tensor& x, int64_t offset) const {
  if (x.dim() < 2 || x.shape().back() != dim)
    fail<ShapeError>("RotaryEmbedding(dim={}): expected input (..., N, {}), got {}", dim, dim, to_string(x.shape()));
  const int64_t n = x.shape()[x.dim() - 2];
  if (offset < 0 || offset + n > max_len)
    fail<IndexError>("RotaryEmbedding: positions [{}, {}) of input {} exceed max_len {}", offset, offset + n,
                     to_string(x.shape()), max_len);
  Tensor c = attnlab::to(narrow(cos, 0, offset, n), x.dtype());  // (N, dim)
  Tensor s = attnlab::to(narrow(sin, 0, offset, n), x.dtype());  // (N, dim)
  return x * c + rotate_half(x) * s;                    // (..., N, dim)
}

Tensor rope_rotate(const Tensor& x, int64_t offset, double base) {
  const int64_t dim = x.dim() >= 2 ? x.shape().back() : 0;
  if (dim <= 0 || dim % 2 || offset < 0 || !(base > 0))
    fail<ValueError>("rope_rotate: need input (..., N, dim) with dim even, offset >= 0, base > 0; got {}, offset={}, base={}",
                     to_string(x.shape()), offset, base);
  const int64_t n = x.shape()[x.dim() - 2];
  auto [c, s] = rope_tables<double>(offset, n, dim, base);
  Tensor ct = attnlab::to(from_vector(c, Dims{n, dim}), x.dtype());  // (N, dim)
  Tensor st = attnlab::to(from_vector(s, Dims{n, dim}), x.dtype());  // (N, dim)
  return x * ct + rotate_half(x) * st;                                // (..., N, dim)
}

std::string RotaryEmbedding::extra_repr() const {
  return fmt::format("dim={}, max_len={}, base={}", dim, max_len, base);
}

}  // namespace attnlab::nn
