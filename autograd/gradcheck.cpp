#include "autograd/gradcheck.hpp"

#include <cmath>

#include "autograd/ops.hpp"

namespace attnlab {
namespace {

// The next multi-index in row-major order.
void advance(Dims& idx, const Dims& shape) {
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    if (++idx[d] < shape[d]) return;
    idx[d] = 0;
  }
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad() && inputs[i].dtype() != kFloat64)
      fail<DTypeError>("gradcheck: input {} is {}; gradients are checked in float64 (convert with to(x, kFloat64))", i,
                       dtype_name(inputs[i].dtype()));
  GradcheckResult result;
  Tensor out = fn(inputs);
  if (!out.requires_grad()) {
    result.ok = false;
    result.message = "gradcheck: the output does not require grad (no input requires grad?)";
    return result;
  }
  Generator gen(options.seed);
  Tensor upstream = randn(out.shape(), gen, kFloat64);
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
  out.backward(upstream);

  auto objective = [&]() {
    NoGradGuard no_grad;
    return sum(mul(fn(inputs), upstream)).item();
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor analytic = x.grad();
    std::vector<double> an = analytic.defined() ? analytic.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    double* base = static_cast<double*>(x.storage()->data());
    Dims idx = Dims::filled(x.dim(), 0);
    const int64_t n = x.numel(), picks = options.max_elements > 0 ? std::min(options.max_elements, n) : n;
    for (int64_t j = 0; j < n; ++j) {
      const bool checked = (j * picks) / n != ((j + 1) * picks) / n;  // `picks` evenly spread elements
      if (!checked) {
        advance(idx, x.shape());
        continue;
      }
      int64_t off = x.offset();
      for (int d = 0; d < x.dim(); ++d) off += idx[d] * x.strides()[d];
      const double orig = base[off];
      base[off] = orig + options.eps;
      const double plus = objective();
      base[off] = orig - options.eps;
      const double minus = objective();
      base[off] = orig;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double err = std::abs(an[j] - numeric);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (!(err <= options.atol + options.rtol * std::abs(numeric)) && result.ok) {
        result.ok = false;
        result.message = fmt::format("gradcheck: input {} (shape {}), element {}: analytic {:.10g}, numeric {:.10g}", i,
                                     to_string(x.shape()), j, an[j], numeric);
      }
      advance(idx, x.shape());
    }
  }
  return result;
}

}  // namespace attnlab
