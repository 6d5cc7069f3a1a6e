// Copy, reverse, sort and associative-recall data sets (token layouts in tasks.hpp).
#include "experiments/data/tasks.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "experiments/data/philox_stream.hpp"

namespace attnlab::data {
namespace {

enum class SeqTask { Copy, Reverse, Sort };

TensorDataset make_sequence_task(SeqTask task, const char* name, int64_t n, int64_t length, int64_t vocab,
                                 uint64_t seed) {
  if (n < 0 || length < 1 || vocab < 1)
    fail<ValueError>("{}: need n >= 0, length >= 1, vocab >= 1, got n {}, length {}, vocab {}", name, n, length,
                     vocab);
  TensorDataset ds{Tensor::empty({n, length}, kInt64), Tensor::empty({n, length}, kInt64)};
  int64_t* x = ds.inputs.data<int64_t>();   // (n, L)
  int64_t* y = ds.targets.data<int64_t>();  // (n, L)
  for (int64_t i = 0; i < n; ++i) {
    PhiloxStream rng(seed, static_cast<uint64_t>(i));
    int64_t *xi = x + i * length, *yi = y + i * length;
    for (int64_t t = 0; t < length; ++t) xi[t] = static_cast<int64_t>(rng.below(uint64_t(vocab)));
    std::copy(xi, xi + length, yi);
    if (task == SeqTask::Reverse) std::reverse(yi, yi + length);
    if (task == SeqTask::Sort) std::sort(yi, yi + length);
  }
  return ds;
}

}  // namespace

TensorDataset make_copy_task(int64_t n, int64_t length, int64_t vocab, uint64_t seed) {
  return make_sequence_task(SeqTask::Copy, "make_copy_task", n, length, vocab, seed);
}
TensorDataset make_reverse_task(int64_t n, int64_t length, int64_t vocab, uint64_t seed) {
  return make_sequence_task(SeqTask::Reverse, "make_reverse_task", n, length, vocab, seed);
}
TensorDataset make_sort_task(int64_t n, int64_t length, int64_t vocab, uint64_t seed) {
  return make_sequence_task(SeqTask::Sort, "make_sort_task", n, length, vocab, seed);
}

TensorDataset make_associative_recall(int64_t n, int64_t num_pairs, int64_t num_keys, int64_t num_values,
                                      uint64_t seed, int64_t pair_tokens) {
  if (n < 0 || num_pairs < 1 || num_pairs > num_keys || num_values < 1 || (pair_tokens != 1 && pair_tokens != 2))
    fail<ValueError>("make_associative_recall: need n >= 0, 1 <= num_pairs <= num_keys, num_values >= 1, "
                     "pair_tokens 1 or 2, got n {}, num_pairs {}, num_keys {}, num_values {}, pair_tokens {}",
                     n, num_pairs, num_keys, num_values, pair_tokens);
  const int64_t len = pair_tokens * num_pairs + 1;
  TensorDataset ds{Tensor::empty({n, len}, kInt64), Tensor::empty({n}, kInt64)};
  int64_t* x = ds.inputs.data<int64_t>();   // (n, pair_tokens P + 1)
  int64_t* y = ds.targets.data<int64_t>();  // (n)
  std::vector<int64_t> keys(num_keys), values(num_pairs);
  for (int64_t i = 0; i < n; ++i) {
    PhiloxStream rng(seed, static_cast<uint64_t>(i));
    // The first P steps of a Fisher-Yates shuffle: P distinct keys, uniformly.
    std::iota(keys.begin(), keys.end(), int64_t{0});
    for (int64_t p = 0; p < num_pairs; ++p)
      std::swap(keys[p], keys[p + static_cast<int64_t>(rng.below(uint64_t(num_keys - p)))]);
    for (int64_t p = 0; p < num_pairs; ++p) values[p] = static_cast<int64_t>(rng.below(uint64_t(num_values)));
    const int64_t q = static_cast<int64_t>(rng.below(uint64_t(num_pairs)));
    int64_t* xi = x + i * len;
    for (int64_t p = 0; p < num_pairs; ++p) {
      if (pair_tokens == 2) {
        xi[2 * p] = keys[p];
        xi[2 * p + 1] = num_keys + values[p];
      } else {
        xi[p] = num_keys + num_values + keys[p] * num_values + values[p];
      }
    }
    xi[len - 1] = keys[q];
    y[i] = num_keys + values[q];
  }
  return ds;
}

}  // namespace attnlab::data
