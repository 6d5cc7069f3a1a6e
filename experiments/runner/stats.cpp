// Small-sample statistics (experiments/runner/stats.hpp).
#include "experiments/runner/stats.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "tensor/error.hpp"

namespace attnlab::runner {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// t_{0.975, df} for df = 1 ... 30 (standard tables).
constexpr std::array<double, 30> kT975 = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                          2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                          2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};

}  // namespace

double t_quantile_975(size_t df) {
  if (df == 0) fail<ValueError>("t_quantile_975: df must be >= 1, got 0");
  if (df <= kT975.size()) return kT975[df - 1];
  // Cornish-Fisher expansion of t in powers of 1/df around the normal quantile z.
  const double z = 1.959963984540054, n = double(df);
  const double z3 = z * z * z, z5 = z3 * z * z;
  return z + (z3 + z) / (4 * n) + (5 * z5 + 16 * z3 + 3 * z) / (96 * n * n);
}

Interval mean_interval(std::span<const double> xs) {
  Interval r{kNaN, kNaN, kNaN, kNaN, 0};
  double sum = 0;
  for (double x : xs)
    if (std::isfinite(x)) sum += x, ++r.n;
  if (r.n == 0) return r;
  r.mean = sum / double(r.n);
  if (r.n == 1) return r;
  double ss = 0;
  for (double x : xs)
    if (std::isfinite(x)) ss += (x - r.mean) * (x - r.mean);
  r.sd = std::sqrt(ss / double(r.n - 1));
  // Equal values whose mean is inexact leave a rounding residue; it would print as "± 1e-16".
  if (r.sd <= 1e-12 * std::max(1.0, std::abs(r.mean))) r.sd = 0;
  const double h = t_quantile_975(r.n - 1) * r.sd / std::sqrt(double(r.n));
  r.low = r.mean - h;
  r.high = r.mean + h;
  return r;
}

Interval paired_interval(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size())
    fail<ValueError>("paired_interval: {} values against {} (pairs need equal lengths)", a.size(), b.size());
  std::vector<double> d;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) && std::isfinite(b[i])) d.push_back(a[i] - b[i]);
  return mean_interval(d);
}

Relation relation_from(const std::string& text) {
  if (text == "better") return Relation::Better;
  if (text == "equal") return Relation::Equal;
  if (text == "below") return Relation::Below;
  if (text == "above") return Relation::Above;
  fail<ValueError>("relation: expected better, equal, below or above, got '{}'", text);
}

const char* relation_name(Relation r) {
  switch (r) {
    case Relation::Better: return "better";
    case Relation::Equal: return "equal";
    case Relation::Below: return "below";
    case Relation::Above: return "above";
  }
  return "?";
}

Verdict judge(Relation relation, const Interval& in, bool lower_is_better, double margin, double value) {
  if (in.n < 2 || !std::isfinite(in.low))
    return {"inconclusive", fmt::format("{} value(s): no interval", in.n)};
  const std::string iv = fmt::format("[{:.4g}, {:.4g}]", in.low, in.high);
  switch (relation) {
    case Relation::Better: {
      // Better means a negative difference when lower is better.
      const bool good_low = lower_is_better;
      if (good_low ? in.high < 0 : in.low > 0) return {"holds", fmt::format("the interval {} excludes 0", iv)};
      if (good_low ? in.low > 0 : in.high < 0)
        return {"contradicted", fmt::format("the interval {} excludes 0 on the other side", iv)};
      return {"inconclusive", fmt::format("the interval {} contains 0", iv)};
    }
    case Relation::Equal:
      if (in.low >= -margin && in.high <= margin)
        return {"holds", fmt::format("the interval {} is inside ±{:.4g}", iv, margin)};
      if (in.low > margin || in.high < -margin)
        return {"contradicted", fmt::format("the interval {} is outside ±{:.4g}", iv, margin)};
      return {"inconclusive", fmt::format("the interval {} crosses ±{:.4g}", iv, margin)};
    case Relation::Below:
    case Relation::Above: {
      const bool below = relation == Relation::Below;
      if (below ? in.high < value : in.low > value)
        return {"holds", fmt::format("the interval {} is {} {:.4g}", iv, below ? "below" : "above", value)};
      if (below ? in.low > value : in.high < value)
        return {"contradicted", fmt::format("the interval {} is {} {:.4g}", iv, below ? "above" : "below", value)};
      return {"inconclusive", fmt::format("the interval {} contains {:.4g}", iv, value)};
    }
  }
  return {"inconclusive", ""};
}

}  // namespace attnlab::runner
