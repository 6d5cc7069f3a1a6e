/// @file
/// Token n-gram language models with interpolated Kneser-Ney smoothing: the calibration of the
/// character LM (docs/experiments.md, "Where a char LM stands: the n-gram calibration").
///
/// Interpolated Kneser-Ney with one absolute discount per order, as Chen & Goodman 1998 ("An
/// Empirical Study of Smoothing Techniques for Language Modeling", Harvard TR-10-98) write it in
/// their interpolated form, with the discount estimate of Ney, Essen & Kneser 1994 they give for
/// absolute discounting. For a model of order n over a vocabulary of V token ids,
/// history h (the n-1 preceding tokens) and next token w, with h' = h without its first token:
///
///   P_0(w)      = 1 / V
///   P_k(w | h)  = ( max(c_k(h w) - D_k, 0) + D_k N1+(h .) P_{k-1}(w | h') ) / c_k(h .)   if c_k(h .) > 0
///               = P_{k-1}(w | h')                                                       if c_k(h .) = 0
///
///   c_k(g)      = the count of the k-gram g in the training text at the top level k = n, and its
///                 continuation count N1+(. g) (the number of distinct tokens seen before g) at the
///                 lower levels k < n;
///   c_k(h .)    = sum_w c_k(h w);   N1+(h .) = #{w : c_k(h w) > 0};
///   D_k         = n1 / (n1 + 2 n2), n1 and n2 the numbers of k-grams whose c_k is 1 and 2
///                 (at the top level from the raw counts, below it from the continuation counts);
///                 0.5 when no k-gram has c_k = 1 (tiny or periodic texts, where the formula gives 0
///                 and every unseen token would get probability 0).
///
/// D_k <= 1 and every stored count is >= 1, so sum_w max(c_k(h w) - D_k, 0) = c_k(h .) - D_k N1+(h .)
/// and each P_k sums to 1 over the vocabulary for every history (tested). The order-1 model is the
/// count unigram interpolated with the uniform distribution: (max(c(w) - D_1, 0) + D_1 N1+(.) / V) / T.
///
/// Smoothing::absolute keeps the same recursion and discounts but uses the raw counts at every
/// level (interpolated absolute discounting, Ney, Essen & Kneser 1994): the lower orders then
/// estimate how often a token occurs rather than in how many contexts, which is what Kneser-Ney
/// changes; it is kept as the comparison that shows what the continuation counts are worth.
///
/// The training text is one stream (the lm experiment's windows cross fortune boundaries too); its
/// k-grams are counted in open-addressing hash tables keyed by the k token ids packed into 64 bits.
/// A history shorter than n - 1 tokens (the first tokens of an evaluated text) is scored by the
/// model of order |h| + 1: its top level uses raw counts, as a model of that order would.
/// @ingroup analysis
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tensor/tensor.hpp"

/// @addtogroup analysis
/// @{
namespace attnlab::analysis {

/// Interpolated Kneser-Ney, or absolute discounting.
enum class Smoothing { kneser_ney, absolute };

/// A smoothed n-gram language model over token ids: the baseline a trained LM's bits per token are compared with.
class NGramModel {
 public:
  /// Counts every k-gram of `train` for k = 1..max_order. Token ids must lie in [0, vocab);
  /// ValueError for an id outside it, max_order < 1, or max_order * ceil(log2(vocab)) > 63 bits.
  NGramModel(std::span<const int64_t> train, int64_t vocab, int max_order,
             Smoothing smoothing = Smoothing::kneser_ney);
  ~NGramModel();
  NGramModel(NGramModel&&) noexcept;  ///< movable
  NGramModel& operator=(NGramModel&&) noexcept;  ///< movable

  int max_order() const;  ///< the longest n-gram counted
  int64_t vocab() const;  ///< token ids are in [0, vocab)
  /// D_k of the top level (raw counts) and of a lower level (continuation counts under
  /// Kneser-Ney, raw counts under absolute discounting), k = 1..max_order; ValueError outside it.
  /// The lower-level discount of k = max_order is never used (0.5 under Kneser-Ney).
  double discount(int k, bool top) const;
  /// Distinct k-grams of the training text.
  int64_t distinct(int k) const;

  /// P(w | history) under the model of order `order` (1..max_order): the last order - 1 tokens of
  /// `history` are used, all of them when it is shorter.
  double probability(int order, std::span<const int64_t> history, int64_t w) const;

  /// Bits per token of `text` under each order 1..max_order (element k-1 for order k): the mean of
  /// -log2 P(text[i] | text[i-k+1 .. i-1]) over the targets i = 1..T-1, the history cut at the
  /// text's start. text[0] is not a target: in the lm experiment a validation token is predicted
  /// only from at least one token before it. ValueError when `text` has fewer than 2 tokens.
  std::vector<double> bits_per_token(std::span<const int64_t> text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The same probability computed the plain way, for tiny texts: every count by scanning `train`,
/// the discounts from a std::map of every k-gram, the recursion as written above. The oracle of
/// NGramModel::probability.
double ngram_probability_reference(std::span<const int64_t> train, int64_t vocab, int order,
                            std::span<const int64_t> history, int64_t w, Smoothing smoothing = Smoothing::kneser_ney);

/// Bits per token of `val` under the orders 1..max_order of an NGramModel counted on `train`
/// (int64 (T) token tensors, ids in [0, vocab)): the n-gram calibration of a char-LM split.
std::vector<double> ngram_bits_per_token(const Tensor& train, const Tensor& val, int64_t vocab, int max_order,
                                         Smoothing smoothing = Smoothing::kneser_ney);

}  // namespace attnlab::analysis
/// @}
