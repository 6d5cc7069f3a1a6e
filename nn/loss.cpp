// Losses (see loss.hpp). cross_entropy reshapes to rows and calls the fused primitive;
// everything else here is composed from differentiable ops.
#include "nn/loss.hpp"

#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

namespace {

void check_reduction(const std::string& reduction, const char* op) {
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    fail<ValueError>("{}: reduction must be \"mean\", \"sum\" or \"none\", got \"{}\"", op, reduction);
}

// scores (..., C) and targets int64 (...), the shape rule shared by cross_entropy and nll_loss.
void check_class_inputs(const Tensor& scores, const Tensor& targets, const char* op) {
  if (scores.dim() == 0) fail<ShapeError>("{}: expected scores of shape (..., C), got a 0-d tensor", op);
  if (!scores.is_floating_point())
    fail<DTypeError>("{}: scores must be floating, got {}", op, dtype_name(scores.dtype()));
  if (targets.dtype() != kInt64)
    fail<DTypeError>("{}: targets must be int64 class indices, got {} {}", op, dtype_name(targets.dtype()),
                     to_string(targets.shape()));
  Dims lead = scores.shape();
  lead.erase(lead.size() - 1);
  if (targets.shape() != lead)
    fail<ShapeError>("{}: scores {} (..., C) need targets of shape {}, got {}", op, to_string(scores.shape()),
                     to_string(lead), to_string(targets.shape()));
}

void check_targets_in_range(const Tensor& targets, int64_t C, int64_t ignore_index, const char* op) {
  const Tensor t = kernels::contiguous(targets);
  const int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] != ignore_index && (p[i] < 0 || p[i] >= C))
      fail<IndexError>("{}: target {} (element {}) is out of range for {} classes (expected 0 to {}, or ignore_index {})",
                       op, p[i], i, C, C - 1, ignore_index);
}

// (1 - eps) * nll + eps * mean_c(-log p_c) at each position, 0 where ignored, then reduced.
Tensor smoothed_nll(const Tensor& lp, const Tensor& targets, int64_t ignore_index, double eps,
                    const std::string& reduction, const char* op) {
  check_targets_in_range(targets, lp.shape().back(), ignore_index, op);
  Tensor valid = ne(targets, double(ignore_index));                              // (...) bool
  Tensor safe = where(valid, targets, 0.0);                                      // (...) int64, ignored -> class 0
  Tensor nll = neg(squeeze(gather(lp, -1, unsqueeze(safe, -1)), -1));             // (...)
  Tensor loss = eps == 0 ? nll : nll * (1 - eps) + neg(mean(lp, {-1})) * eps;  // (...)
  loss = masked_fill(loss, logical_not(valid), 0.0);                            // (...)
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  const int64_t count = sum(to(valid, kInt64)).item<int64_t>();
  return sum(loss) * (1.0 / double(count));  // () ; NaN when every target is ignored, like PyTorch
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double label_smoothing,
                     const std::string& reduction) {
  check_reduction(reduction, "cross_entropy");
  check_class_inputs(logits, targets, "cross_entropy");
  const int64_t C = logits.shape().back(), R = targets.numel();
  Tensor rows = reshape(logits, Dims{R, C});  // (R, C)
  Tensor loss = cross_entropy_fused(rows, reshape(targets, Dims{R}), ignore_index, label_smoothing, reduction);
  return reduction == "none" ? reshape(loss, targets.shape()) : loss;  // (...) or ()
}

Tensor cross_entropy_reference(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                              double label_smoothing, const std::string& reduction) {
  check_reduction(reduction, "cross_entropy");
  check_class_inputs(logits, targets, "cross_entropy");
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    fail<ValueError>("cross_entropy: label_smoothing must be in [0, 1], got {}", label_smoothing);
  Tensor lp = log_softmax(logits, -1);  // (..., C)
  return smoothed_nll(lp, targets, ignore_index, label_smoothing, reduction, "cross_entropy");
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index, const std::string& reduction) {
  check_reduction(reduction, "nll_loss");
  check_class_inputs(log_probs, targets, "nll_loss");
  return smoothed_nll(log_probs, targets, ignore_index, 0.0, reduction, "nll_loss");
}

Tensor mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction) {
  check_reduction(reduction, "mse_loss");
  if (a.shape() != b.shape())
    fail<ShapeError>("mse_loss: input and target shapes differ: {} and {}", to_string(a.shape()), to_string(b.shape()));
  Tensor sq = square(a - b);  // (...)
  if (reduction == "none") return sq;
  return reduction == "sum" ? sum(sq) : mean(sq);
}

}  // namespace attnlab::nn
