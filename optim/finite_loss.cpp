#include "optim/finite_loss.hpp"

#include <cmath>

namespace attnlab::optim {

double check_finite_loss(const Tensor& loss, const std::string& loop, int64_t step) {
  const double value = loss.item();
  if (!std::isfinite(value))
    fail<ValueError>("{}: the loss is {} at step {}; training diverged (try a lower learning rate or gradient "
                     "clipping)",
                     loop, value, step);
  return value;
}

}  // namespace attnlab::optim
