// MQAR and induction-copying data sets (token layouts in mqar.hpp).
#include "experiments/data/mqar.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "experiments/data/philox_stream.hpp"

namespace attnlab::data {
namespace {

// The first `count` steps of a Fisher-Yates shuffle of `items`: a uniform draw of `count`
// distinct items, in random order, in items[0, count).
void choose_distinct(std::vector<int64_t>& items, int64_t count, PhiloxStream& rng) {
  const int64_t n = int64_t(items.size());
  for (int64_t p = 0; p < count; ++p) std::swap(items[p], items[p + int64_t(rng.below(uint64_t(n - p)))]);
}

}  // namespace

TensorDataset make_mqar(int64_t n, const MqarOptions& o, uint64_t seed) {
  auto require = [&](bool ok, const char* option, int64_t value, const char* expected) {
    if (!ok) fail<ValueError>("make_mqar: {} must be {}, got {}", option, expected, value);
  };
  require(n >= 0, "n", n, ">= 0");
  require(o.num_pairs >= 1, "num_pairs", o.num_pairs, ">= 1");
  require(o.num_keys >= o.num_pairs, "num_keys", o.num_keys, ">= num_pairs (the keys of an example are distinct)");
  require(o.num_queries >= 1 && o.num_queries <= o.num_pairs, "num_queries", o.num_queries,
          "in [1, num_pairs] (the queries are distinct keys of the example)");
  require(o.num_values >= 1, "num_values", o.num_values, ">= 1");
  require(o.pair_tokens == 1 || o.pair_tokens == 2, "pair_tokens", o.pair_tokens, "1 or 2");
  const int64_t S = o.pair_tokens;  // positions per pair
  if (S * o.num_pairs + o.num_queries > o.length)
    fail<ValueError>("make_mqar: length {} is shorter than pair_tokens num_pairs + num_queries = {}*{} + {} = {}",
                     o.length, S, o.num_pairs, o.num_queries, S * o.num_pairs + o.num_queries);
  const int64_t N = o.length, P = o.num_pairs, Q = o.num_queries, K = o.num_keys, V = o.num_values;
  TensorDataset ds{Tensor::empty({n, N}, kInt64), Tensor::empty({n, N}, kInt64)};
  int64_t* x = ds.inputs.data<int64_t>();   // (n, N)
  int64_t* y = ds.targets.data<int64_t>();  // (n, N)
  std::vector<int64_t> keys(static_cast<size_t>(o.num_keys)), pairs(static_cast<size_t>(P));
  for (int64_t i = 0; i < n; ++i) {
    PhiloxStream rng(seed, uint64_t(i));
    std::iota(keys.begin(), keys.end(), int64_t{1});
    choose_distinct(keys, P, rng);
    int64_t *xi = x + i * N, *yi = y + i * N;
    std::fill(xi, xi + N, kMqarFiller);
    std::fill(yi, yi + N, kIgnoreTarget);
    std::vector<int64_t> values(static_cast<size_t>(P));
    for (int64_t p = 0; p < P; ++p) {
      values[size_t(p)] = 1 + K + int64_t(rng.below(uint64_t(V)));
      if (S == 2) {
        xi[2 * p] = keys[size_t(p)];
        xi[2 * p + 1] = values[size_t(p)];
      } else {
        xi[p] = 1 + K + V + (keys[size_t(p)] - 1) * V + (values[size_t(p)] - 1 - K);
      }
    }
    std::iota(pairs.begin(), pairs.end(), int64_t{0});
    choose_distinct(pairs, Q, rng);
    for (int64_t j = 0; j < Q; ++j) {
      const int64_t p = pairs[size_t(j)];
      xi[S * P + j] = keys[size_t(p)];
      yi[S * P + j] = values[size_t(p)];
    }
  }
  return ds;
}

TensorDataset make_induction(int64_t n, int64_t length, int64_t vocab, uint64_t seed) {
  if (n < 0) fail<ValueError>("make_induction: n must be >= 0, got {}", n);
  if (length < 4 || length % 2 != 0)
    fail<ValueError>("make_induction: length must be even and >= 4 (a half and its repeat), got {}", length);
  if (vocab < 2) fail<ValueError>("make_induction: vocab must be >= 2, got {}", vocab);
  const int64_t L = length, half = length / 2;
  TensorDataset ds{Tensor::empty({n, L}, kInt64), Tensor::empty({n, L}, kInt64)};
  int64_t* x = ds.inputs.data<int64_t>();   // (n, L)
  int64_t* y = ds.targets.data<int64_t>();  // (n, L)
  for (int64_t i = 0; i < n; ++i) {
    PhiloxStream rng(seed, uint64_t(i));
    int64_t *xi = x + i * L, *yi = y + i * L;
    for (int64_t t = 0; t < half; ++t) xi[t] = int64_t(rng.below(uint64_t(vocab)));
    std::copy(xi, xi + half, xi + half);
    std::fill(yi, yi + L, kIgnoreTarget);
    for (int64_t t = half; t + 1 < L; ++t) yi[t] = xi[t + 1];
  }
  return ds;
}

}  // namespace attnlab::data
