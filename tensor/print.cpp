// NumPy-like printing: nested brackets, a common width per tensor, summarised with "..." when
// large, and the shape and dtype at the end.
#include <cmath>

#include "tensor/kernels.hpp"

namespace attnlab {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdge = 3;

std::string format_value(double v, DType dtype, bool sci) {
  if (dtype == kBool) return v != 0 ? "True" : "False";
  if (dtype == kInt64) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return sci ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v);
}

struct Printer {
  const Tensor& t;
  bool summarize;
  bool sci;
  size_t width;
  std::string out;

  void rec(int d, int64_t offset, int indent) {
    if (d == t.dim()) {
      std::string s = format_value(t.dtype() == kBool ? double(static_cast<const bool*>(t.storage()->data())[offset])
                                                      : element(offset),
                                   t.dtype(), sci);
      out += std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
      return;
    }
    out += '[';
    const int64_t n = t.shape()[d];
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdge && i == kEdge) {
        out += d + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' ');
        i = n - kEdge;
      }
      rec(d + 1, offset + i * t.strides()[d], indent + 1);
      if (i + 1 < n) out += d + 1 == t.dim() ? ", " : ",\n" + std::string(t.dim() - d - 1 > 1 ? 1 : 0, '\n') +
                                                      std::string(indent + 1, ' ');
    }
    out += ']';
  }
  double element(int64_t offset) const {
    return dispatch_all(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return static_cast<double>(static_cast<const T*>(t.storage()->data())[offset]);
    });
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const bool summarize = numel() > kSummarizeAbove;
  bool sci = false;
  size_t width = 0;
  if (numel() > 0) {
    std::vector<double> vals = to_vector<double>();
    double amax = 0, amin = INFINITY;
    for (double v : vals)
      if (std::isfinite(v) && v != 0) {
        amax = std::max(amax, std::abs(v));
        amin = std::min(amin, std::abs(v));
      }
    sci = is_floating_storage(dtype()) && (amax >= 1e8 || (amin < 1e-4 && amin > 0));
    for (double v : vals) width = std::max(width, format_value(v, dtype(), sci).size());
  }
  Printer p{*this, summarize, sci, width, "tensor("};
  p.rec(0, offset(), 7);
  p.out += fmt::format(", shape={}, dtype={})", to_string(shape()), dtype_name(dtype()));
  return p.out;
}

}  // namespace attnlab
