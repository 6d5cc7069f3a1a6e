/// @file
/// Generated sequence tasks for probing attention: copy, reverse, sort and associative recall.
/// Each returns a TensorDataset of int64 tensors; example i is drawn from the Philox stream
/// (seed, i) (experiments/data/philox_stream.hpp), so a data set is fixed by its seed and the
/// first k examples do not depend on n.
///
/// Copy, reverse, sort: no special tokens. vocab = `vocab`, every token is a symbol uniform in
/// [0, vocab) drawn independently (with repetition):
///   inputs  (n, length)   x_0 x_1 ... x_{L-1}
///   targets (n, length)   copy: x_0 ... x_{L-1}; reverse: x_{L-1} ... x_0;
///                         sort: the same multiset in non-decreasing order.
/// Targets align position by position with the inputs (one prediction per position).
///
/// Associative recall (Ba et al. 2016; the "in-context recall" of H3 / Zoology):
///   vocab = num_keys + num_values; keys are ids [0, num_keys), values are ids
///   [num_keys, num_keys + num_values).
///   inputs  (n, 2 * num_pairs + 1)   k_1 v_1 k_2 v_2 ... k_P v_P q
///   targets (n)                      the value id v_j with k_j == q
///   The P keys of an example are distinct (drawn without replacement), so the answer is unique;
///   values are drawn with replacement; the query is one of the P keys, uniformly.
/// @ingroup data
#pragma once
#include <cstdint>

#include "experiments/data/loader.hpp"

/// @addtogroup data
/// @{
namespace attnlab::data {

/// length >= 1, vocab >= 1, n >= 0; otherwise ValueError.
TensorDataset make_copy_task(int64_t n, int64_t length, int64_t vocab, uint64_t seed);
TensorDataset make_reverse_task(int64_t n, int64_t length, int64_t vocab, uint64_t seed);  ///< targets: the input reversed
TensorDataset make_sort_task(int64_t n, int64_t length, int64_t vocab, uint64_t seed);  ///< targets: the input sorted

/// 1 <= num_pairs <= num_keys, num_values >= 1; otherwise ValueError.
TensorDataset make_associative_recall(int64_t n, int64_t num_pairs, int64_t num_keys, int64_t num_values,
                                      uint64_t seed);
inline int64_t associative_recall_vocab(int64_t num_keys, int64_t num_values) { return num_keys + num_values; }  ///< keys and values

}  // namespace attnlab::data
/// @}
