// The ops of autograd/ops.hpp that record no gradient: comparisons and logical ops (their
// results are bool, never differentiated) and in-place updates (refused on a tensor that
// requires grad while grad mode is on, so they never have to rewrite a graph). Every op with a
// gradient is indexed in derivatives.cpp.
#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"

namespace attnlab {

namespace k = kernels;
using k::Binary;
using k::Unary;

namespace {

void check_inplace(const Tensor& x, const char* op) {
  if (GradMode::is_enabled() && x.requires_grad())
    fail<AutogradError>("{}: in-place update of a tensor that requires grad; wrap it in a NoGradGuard", op);
}

}  // namespace

// ============================ comparisons (no gradient) ============================

Tensor eq(const Tensor& a, const Tensor& b) { return k::binary(Binary::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return k::binary(Binary::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return k::binary(Binary::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return k::binary(Binary::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return k::binary(Binary::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return k::binary(Binary::Ge, a, b, "ge"); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return k::binary(Binary::LogicalAnd, a, b, "logical_and"); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return k::binary(Binary::LogicalOr, a, b, "logical_or"); }
Tensor logical_not(const Tensor& x) { return k::logical_not(x); }

// ============================ in place ============================

Tensor& add_(Tensor& x, const Tensor& other, double alpha) {
  check_inplace(x, "add_");
  if (alpha == 1.0)
    k::binary_(Binary::Add, x, other, "add_");
  else
    k::add_scaled_(x, other, alpha);
  return x;
}

Tensor& mul_(Tensor& x, double value) {
  check_inplace(x, "mul_");
  k::unary_(Unary::MulScalar, x, {value});
  return x;
}

Tensor& copy_(Tensor& x, const Tensor& src) {
  check_inplace(x, "copy_");
  k::copy_(x, src);
  return x;
}

Tensor& fill_(Tensor& x, double value) {
  check_inplace(x, "fill_");
  k::fill_(x, value);
  return x;
}

Tensor& zero_(Tensor& x) { return fill_(x, 0); }

}  // namespace attnlab
