/// @file
/// Small-sample statistics for sweep reports (docs/sweeps.md, "Intervals and verdicts").
///
/// A configuration is run over a few seeds, so its mean is reported with a Student-t 95% interval
/// (the seeds are the only source of variation the sweep controls). Two configurations run over the
/// same seeds are compared by their paired differences d_s = a_s - b_s, whose interval removes the
/// seed-to-seed variation the two share (same data order, same initial draws where shapes agree).
/// @ingroup runner
#pragma once
#include <cstddef>
#include <span>
#include <string>

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// A mean with its two-sided 95% Student-t interval over n finite values (NaN entries skipped).
/// n = 0: everything NaN; n = 1: low = high = NaN (no spread is known from one value).
struct Interval {
  double mean;  ///< the mean of the finite values
  double sd;    ///< the sample standard deviation (n - 1 in the denominator)
  double low;   ///< the interval's lower end
  double high;  ///< the interval's upper end
  size_t n;     ///< the finite values
  double half_width() const { return (high - low) / 2; }  ///< (high - low) / 2
};

/// The 0.975 quantile of Student's t with `df` degrees of freedom (df >= 1): tabulated to three
/// decimals up to 30, a Cornish-Fisher expansion beyond (error < 1e-3).
double t_quantile_975(size_t df);

Interval mean_interval(std::span<const double> xs);  ///< the interval of the mean of xs (see Interval)

/// The interval of the mean of a[i] - b[i] over the i where both are finite.
Interval paired_interval(std::span<const double> a, std::span<const double> b);

/// What the data say of an expected relation between two configurations (or one and a value).
///   better: a's metric beats b's (lower when lower_is_better)   -> the interval of d = a - b
///   equal:  |a - b| <= margin                                      (equivalence within a margin)
///   below / above: a's mean metric is below / above `value`       -> the interval of a's mean
/// Verdicts: "holds" when the whole interval is on the expected side (within the margin for
/// equal), "contradicted" when the whole interval is on the other side (outside the margin for
/// equal), "inconclusive" otherwise, including when fewer than two values are known.
enum class Relation { Better, Equal, Below, Above };
Relation relation_from(const std::string& text);  ///< ValueError naming the allowed words
const char* relation_name(Relation r);  ///< "better", "equal", "below" or "above"

/// The verdict on an expectation, and the reason in one clause.
struct Verdict {
  std::string word;  ///< holds | inconclusive | contradicted
  std::string why;   ///< one clause, e.g. "the interval [-0.031, -0.012] is below 0"
};
/// The verdict of `relation` on `interval`, by the rules above.
Verdict judge(Relation relation, const Interval& interval, bool lower_is_better, double margin, double value);

}  // namespace attnlab::runner
/// @}
