// Generated tasks: targets correct by construction, token ranges, determinism by seed, errors.
#include <algorithm>
#include <set>

#include "experiments/data/tasks.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::data;

namespace {

std::vector<int64_t> row(const Tensor& t, int64_t i) {
  auto all = t.to_vector<int64_t>();
  const int64_t w = t.dim() == 2 ? t.size(1) : 1;
  return std::vector<int64_t>(all.begin() + i * w, all.begin() + (i + 1) * w);
}

bool same(const TensorDataset& a, const TensorDataset& b) {
  return a.inputs.shape() == b.inputs.shape() && a.inputs.to_vector<int64_t>() == b.inputs.to_vector<int64_t>() &&
         a.targets.to_vector<int64_t>() == b.targets.to_vector<int64_t>();
}

// Every token in [0, vocab) and every symbol used somewhere.
void check_vocab(const Tensor& x, int64_t vocab) {
  std::set<int64_t> seen;
  for (int64_t t : x.to_vector<int64_t>()) {
    CHECK(t >= 0);
    CHECK(t < vocab);
    seen.insert(t);
  }
  CHECK(int64_t(seen.size()) == vocab);
}

}  // namespace

TEST_CASE("copy, reverse and sort targets") {
  const int64_t n = 50, L = 12, V = 7;
  TensorDataset copy = make_copy_task(n, L, V, 1), rev = make_reverse_task(n, L, V, 1);
  TensorDataset srt = make_sort_task(n, L, V, 1);
  for (const TensorDataset* ds : {&copy, &rev, &srt}) {
    CHECK(ds->inputs.shape() == Dims{n, L});
    CHECK(ds->targets.shape() == Dims{n, L});
    CHECK(ds->inputs.dtype() == kInt64);
    CHECK(ds->targets.dtype() == kInt64);
    CHECK(ds->size() == n);
    check_vocab(ds->inputs, V);
  }
  // The same seed draws the same inputs for all three; only the targets differ.
  CHECK(copy.inputs.to_vector<int64_t>() == rev.inputs.to_vector<int64_t>());
  CHECK(copy.inputs.to_vector<int64_t>() == srt.inputs.to_vector<int64_t>());
  for (int64_t i = 0; i < n; ++i) {
    auto x = row(copy.inputs, i);
    CHECK(row(copy.targets, i) == x);
    std::vector<int64_t> r(x.rbegin(), x.rend());
    CHECK(row(rev.targets, i) == r);
    auto s = row(srt.targets, i);
    CHECK(std::is_sorted(s.begin(), s.end()));
    CHECK(std::is_permutation(s.begin(), s.end(), x.begin()));
  }
  // The rows are not all equal (the draw really is per example).
  CHECK(row(copy.inputs, 0) != row(copy.inputs, 1));
}

TEST_CASE("associative recall layout and answers") {
  const int64_t n = 200, P = 6, K = 10, V = 8;
  TensorDataset ds = make_associative_recall(n, P, K, V, 3);
  CHECK(ds.inputs.shape() == Dims{n, 2 * P + 1});
  CHECK(ds.targets.shape() == Dims{n});
  CHECK(associative_recall_vocab(K, V) == 18);
  std::set<int64_t> query_slots, answers;
  for (int64_t i = 0; i < n; ++i) {
    auto x = row(ds.inputs, i);
    const int64_t y = ds.targets.to_vector<int64_t>()[i];
    std::set<int64_t> keys;
    int64_t found = -1;
    for (int64_t p = 0; p < P; ++p) {
      CHECK(x[2 * p] >= 0);
      CHECK(x[2 * p] < K);
      CHECK(x[2 * p + 1] >= K);
      CHECK(x[2 * p + 1] < K + V);
      keys.insert(x[2 * p]);
      if (x[2 * p] == x[2 * P]) {
        found = x[2 * p + 1];
        query_slots.insert(p);
      }
    }
    CHECK(int64_t(keys.size()) == P);  // distinct keys: the answer is unique
    CHECK(found == y);
    answers.insert(y);
  }
  CHECK(int64_t(query_slots.size()) == P);  // the query is not always the same pair
  CHECK(int64_t(answers.size()) == V);
  // Every pair present: num_pairs == num_keys uses each key once.
  TensorDataset full = make_associative_recall(5, 4, 4, 3, 0);
  auto x = row(full.inputs, 0);
  std::set<int64_t> keys{x[0], x[2], x[4], x[6]};
  CHECK(keys == std::set<int64_t>{0, 1, 2, 3});
}

TEST_CASE("associative recall with one token per pair: the same pairs and query, one id each") {
  const int64_t n = 100, P = 6, K = 8, V = 8;
  TensorDataset two = make_associative_recall(n, P, K, V, 5), one = make_associative_recall(n, P, K, V, 5, 1);
  CHECK(one.inputs.shape() == Dims{n, P + 1});
  CHECK(associative_recall_vocab(K, V, 1) == K + V + K * V);
  CHECK(one.targets.to_vector<int64_t>() == two.targets.to_vector<int64_t>());
  for (int64_t i = 0; i < n; ++i) {
    auto x1 = row(one.inputs, i), x2 = row(two.inputs, i);
    for (int64_t p = 0; p < P; ++p) {
      // pair (k, v) = K + V + k V + (v - K): the two-token example's pair p, in one id
      CHECK(x1[p] == K + V + x2[2 * p] * V + (x2[2 * p + 1] - K));
      CHECK(x1[p] < associative_recall_vocab(K, V, 1));
    }
    CHECK(x1[P] == x2[2 * P]);  // the query is a key id in both layouts
  }
  CHECK_THROWS_AS(make_associative_recall(4, 2, 4, 3, 0, 3), ValueError);
  CHECK(attnlab::testing::error_of([] { make_associative_recall(4, 2, 4, 3, 0, 0); }).find("pair_tokens 0") !=
        std::string::npos);
}

TEST_CASE("tasks are fixed by the seed, example by example") {
  CHECK(same(make_copy_task(20, 8, 5, 7), make_copy_task(20, 8, 5, 7)));
  CHECK(!same(make_copy_task(20, 8, 5, 7), make_copy_task(20, 8, 5, 8)));
  CHECK(same(make_associative_recall(20, 3, 6, 4, 7), make_associative_recall(20, 3, 6, 4, 7)));
  CHECK(!same(make_associative_recall(20, 3, 6, 4, 7), make_associative_recall(20, 3, 6, 4, 8)));
  // The first k examples do not depend on n.
  TensorDataset small = make_sort_task(5, 8, 5, 7), big = make_sort_task(20, 8, 5, 7);
  for (int64_t i = 0; i < 5; ++i) {
    CHECK(row(small.inputs, i) == row(big.inputs, i));
    CHECK(row(small.targets, i) == row(big.targets, i));
  }
  CHECK(make_copy_task(0, 4, 3, 0).inputs.shape() == Dims{0, 4});
}

TEST_CASE("task argument errors") {
  CHECK_THROWS_AS(make_copy_task(4, 0, 3, 0), ValueError);
  CHECK_THROWS_AS(make_reverse_task(4, 3, 0, 0), ValueError);
  CHECK_THROWS_AS(make_sort_task(-1, 3, 3, 0), ValueError);
  CHECK_THROWS_AS(make_associative_recall(4, 5, 4, 3, 0), ValueError);
  CHECK_THROWS_AS(make_associative_recall(4, 0, 4, 3, 0), ValueError);
  CHECK_THROWS_AS(make_associative_recall(4, 2, 4, 0, 0), ValueError);
  std::string msg = attnlab::testing::error_of([] { make_associative_recall(4, 5, 4, 3, 0); });
  CHECK(msg.find("num_pairs 5") != std::string::npos);
}
