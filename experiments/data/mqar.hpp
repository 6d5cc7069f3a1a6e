/// @file
/// Generated recall tasks with one target per scored position, for comparing attention variants
/// by how much they can recall against how much they keep (the `recall` experiment,
/// docs/experiments.md). Example i is drawn from the Philox stream (seed, i)
/// (experiments/data/philox_stream.hpp), so a data set is fixed by its seed and the first k
/// examples do not depend on n. Targets are int64 with kIgnoreTarget at every position that is
/// not scored (nn::cross_entropy's default ignore_index).
///
/// Multi-query associative recall, MQAR (Arora et al. 2023, "Zoology", section 3):
///   ids: 0 = filler, keys [1, 1 + K), values [1 + K, 1 + K + V);  vocab = 1 + K + V
///   inputs  (n, N)   k_1 v_1 k_2 v_2 ... k_P v_P  q_1 q_2 ... q_Q  0 0 ... 0
///   targets (n, N)   at q_j's position the value paired with key q_j; kIgnoreTarget elsewhere
///   The P keys of an example are distinct (drawn without replacement), so every answer is
///   unique; values are drawn with replacement; the Q queries are Q distinct keys of the P, in
///   random order. Every value sits before the first query, so no query position and no later
///   position holds an answer: the task is the same for causal and bidirectional attention.
///   The filler after the queries brings every example to length N; it is a token like any
///   other (not a padding mask), so every variant processes a context of N positions.
/// With pair_tokens = 1 each pair is one token whose id names both key and value:
///   ids: 0 = filler, keys [1, 1 + K) (the queries), values [1 + K, 1 + K + V) (targets only),
///        pairs [1 + K + V, 1 + K + V + K V), pair (k, v) = 1 + K + V + (k - 1) V + (v - 1 - K)
///   inputs  (n, N)   (k_1, v_1) ... (k_P, v_P)  q_1 ... q_Q  0 ... 0;  targets as above
///   One attention layer can answer by matching the query to the pairs' key part; the two-token
///   layout first needs a layer that moves each key onto its value's position (or back).
///
/// Induction copying (Olsson et al. 2022, "In-context Learning and Induction Heads", section 3):
///   inputs  (n, L)   x_0 ... x_{L/2-1} x_0 ... x_{L/2-1},  each x_t uniform in [0, vocab)
///   targets (n, L)   next-token targets x_{t+1} at the positions t = L/2 .. L-2 of the repeated
///                    half, whose token already occurred at t - L/2; kIgnoreTarget elsewhere
///                    (the first half is random and cannot be predicted)
///   L/2 - 1 scored positions. The next token is visible in the input, so the task needs causal
///   attention.
/// @ingroup data
#pragma once
#include <cstdint>

#include "experiments/data/loader.hpp"

/// @addtogroup data
/// @{
namespace attnlab::data {

inline constexpr int64_t kIgnoreTarget = -100;  ///< a target the loss skips (cross_entropy's ignore_index)

/// The shape of multi-query associative recall examples (see the file's description).
struct MqarOptions {
  int64_t length = 64;     ///< N
  int64_t num_pairs = 8;   ///< P
  int64_t num_queries = 8; ///< Q <= P
  int64_t num_keys = 16;   ///< K >= P
  int64_t num_values = 16; ///< V
  int64_t pair_tokens = 2;  ///< 2: k v; 1: one token per pair
};
/// The vocabulary size of MQAR examples with these options.
inline int64_t mqar_vocab(const MqarOptions& o) {
  return 1 + o.num_keys + o.num_values + (o.pair_tokens == 1 ? o.num_keys * o.num_values : 0);
}
inline constexpr int64_t kMqarFiller = 0;  ///< the filler token id

/// ValueError naming the option unless n >= 0, 1 <= num_pairs <= num_keys, 1 <= num_queries <=
/// num_pairs, num_values >= 1, pair_tokens 1 or 2 and pair_tokens num_pairs + num_queries <= length.
TensorDataset make_mqar(int64_t n, const MqarOptions& options, uint64_t seed);

/// ValueError naming the option unless n >= 0, length even and >= 4, vocab >= 2.
TensorDataset make_induction(int64_t n, int64_t length, int64_t vocab, uint64_t seed);

}  // namespace attnlab::data
/// @}
