// nn::Dropout (see dropout.hpp).
#include "nn/dropout.hpp"

#include "autograd/ops.hpp"

namespace attnlab::nn {

uint64_t draw_seed(Generator& from) {
  auto r = Generator::philox(from.seed(), from.advance(1));
  return (uint64_t(r[0]) << 32) | r[1];
}

Dropout::Dropout(double p) : p(p), gen_(draw_seed()) {
  register_generator("generator", gen_);
  if (!(p >= 0 && p < 1)) fail<ValueError>("Dropout: p must be in [0, 1), got {}", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0) return x;
  if (!x.is_floating_point())
    fail<DTypeError>("Dropout: expected a floating input, got {} {}", dtype_name(x.dtype()), to_string(x.shape()));
  Tensor keep = bernoulli(x.shape(), 1 - p, gen_, x.dtype());  // (...) of 0/1, no history
  mul_(keep, 1.0 / (1.0 - p));                                // (...) of 0 or 1/(1-p)
  return x * keep;                                              // (...)
}

std::string Dropout::extra_repr() const { return fmt::format("p={}", p); }

}  // namespace attnlab::nn
