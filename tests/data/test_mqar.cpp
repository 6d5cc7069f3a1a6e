// MQAR and induction copying (experiments/data/mqar.hpp): the answer rule, distinct keys, no
// answer at or after a query, determinism by seed, disjoint splits, errors naming the option.
#include <map>
#include <set>

#include "experiments/data/mqar.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::data;

namespace {

std::vector<std::vector<int64_t>> rows(const Tensor& t) {
  auto all = t.to_vector<int64_t>();
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < t.size(0); ++i)
    out.emplace_back(all.begin() + i * t.size(1), all.begin() + (i + 1) * t.size(1));
  return out;
}

// The message of the ValueError `f` throws ("" when it does not throw one).
template <class F>
std::string value_error(F f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("mqar: layout, answers, distinct keys, no value at or after a query") {
  const MqarOptions o{.length = 40, .num_pairs = 8, .num_queries = 5, .num_keys = 12, .num_values = 6};
  const int64_t K = o.num_keys, V = o.num_values, P = o.num_pairs, Q = o.num_queries;
  TensorDataset ds = make_mqar(200, o, 3);
  CHECK(ds.inputs.shape() == Dims{200, 40});
  CHECK(ds.targets.shape() == Dims{200, 40});
  CHECK(mqar_vocab(o) == 1 + K + V);
  auto xs = rows(ds.inputs), ys = rows(ds.targets);
  std::set<int64_t> queried_pairs;
  for (size_t i = 0; i < xs.size(); ++i) {
    const auto &x = xs[i], &y = ys[i];
    std::set<int64_t> keys, queries;
    for (int64_t p = 0; p < P; ++p) {
      CHECK(x[2 * p] >= 1);
      CHECK(x[2 * p] <= K);
      CHECK(x[2 * p + 1] > K);
      CHECK(x[2 * p + 1] <= K + V);
      keys.insert(x[2 * p]);
    }
    CHECK(int64_t(keys.size()) == P);
    for (int64_t t = 0; t < o.length; ++t) {
      const bool is_query = t >= 2 * P && t < 2 * P + Q;
      if (t >= 2 * P) CHECK(x[t] <= K);  // no value at or after the first query
      if (t >= 2 * P + Q) CHECK(x[t] == kMqarFiller);
      if (!is_query) {
        CHECK(y[t] == kIgnoreTarget);
        continue;
      }
      queries.insert(x[t]);
      int64_t answer = -1;
      for (int64_t p = 0; p < P; ++p)
        if (x[2 * p] == x[t]) answer = x[2 * p + 1], queried_pairs.insert(p);
      CHECK(y[t] == answer);
    }
    CHECK(int64_t(queries.size()) == Q);  // distinct keys of the example
  }
  CHECK(int64_t(queried_pairs.size()) == P);  // every pair position gets queried somewhere
}

TEST_CASE("mqar with one token per pair: the pair id names key and value, same answers") {
  const MqarOptions o{.length = 24, .num_pairs = 6, .num_queries = 6, .num_keys = 8, .num_values = 5, .pair_tokens = 1};
  const int64_t K = 8, V = 5, P = 6, first_pair = 1 + K + V;
  CHECK(mqar_vocab(o) == first_pair + K * V);
  TensorDataset ds = make_mqar(100, o, 5);
  auto xs = rows(ds.inputs), ys = rows(ds.targets);
  for (size_t i = 0; i < xs.size(); ++i) {
    const auto &x = xs[i], &y = ys[i];
    std::map<int64_t, int64_t> value_of;  // key id -> value id
    for (int64_t p = 0; p < P; ++p) {
      REQUIRE(x[p] >= first_pair);
      REQUIRE(x[p] < first_pair + K * V);
      const int64_t key = 1 + (x[p] - first_pair) / V, value = 1 + K + (x[p] - first_pair) % V;
      CHECK(value_of.count(key) == 0);
      value_of[key] = value;
      CHECK(y[p] == kIgnoreTarget);
    }
    for (int64_t t = P; t < o.length; ++t) {
      CHECK(x[t] < first_pair);  // no pair (so no value) at or after the first query
      if (t < 2 * P) CHECK(y[t] == value_of.at(x[t]));
      else CHECK(y[t] == kIgnoreTarget);
    }
  }
}

TEST_CASE("mqar and induction: determined by the seed, prefix-stable, seeds disjoint") {
  const MqarOptions o{};
  TensorDataset a = make_mqar(50, o, 7), b = make_mqar(50, o, 7), c = make_mqar(20, o, 7), d = make_mqar(50, o, 8);
  CHECK(a.inputs.to_vector<int64_t>() == b.inputs.to_vector<int64_t>());
  CHECK(a.targets.to_vector<int64_t>() == b.targets.to_vector<int64_t>());
  auto train = rows(a.inputs), other = rows(d.inputs);
  CHECK(rows(c.inputs) == std::vector<std::vector<int64_t>>(train.begin(), train.begin() + 20));
  std::set<std::vector<int64_t>> seen(train.begin(), train.end());
  for (const auto& r : other) CHECK(seen.count(r) == 0);

  TensorDataset i1 = make_induction(30, 16, 8, 1), i2 = make_induction(30, 16, 8, 1), i3 = make_induction(30, 16, 8, 2);
  CHECK(i1.inputs.to_vector<int64_t>() == i2.inputs.to_vector<int64_t>());
  const auto first = rows(i1.inputs);
  std::set<std::vector<int64_t>> ind(first.begin(), first.end());
  for (const auto& r : rows(i3.inputs)) CHECK(ind.count(r) == 0);
}

TEST_CASE("induction: the second half repeats the first, next-token targets on the repeat only") {
  const int64_t L = 20, half = 10, V = 5;
  TensorDataset ds = make_induction(40, L, V, 4);
  CHECK(ds.inputs.shape() == Dims{40, L});
  auto xs = rows(ds.inputs), ys = rows(ds.targets);
  for (size_t i = 0; i < xs.size(); ++i) {
    for (int64_t t = 0; t < half; ++t) {
      CHECK(xs[i][t] >= 0);
      CHECK(xs[i][t] < V);
      CHECK(xs[i][t + half] == xs[i][t]);
    }
    for (int64_t t = 0; t < L; ++t)
      CHECK(ys[i][t] == (t >= half && t + 1 < L ? xs[i][t + 1] : kIgnoreTarget));
  }
}

TEST_CASE("mqar and induction: bad options are ValueErrors naming the option") {
  auto mqar = [](MqarOptions o) { return value_error([&] { make_mqar(4, o, 0); }); };
  CHECK(mqar({.num_pairs = 0}).find("num_pairs") != std::string::npos);
  CHECK(mqar({.num_pairs = 8, .num_queries = 8, .num_keys = 4}).find("num_keys") != std::string::npos);
  CHECK(mqar({.num_pairs = 4, .num_queries = 5}).find("num_queries") != std::string::npos);
  CHECK(mqar({.num_queries = 8, .num_values = 0}).find("num_values") != std::string::npos);
  CHECK(mqar({.length = 20, .num_pairs = 8, .num_queries = 8}).find("length 20") != std::string::npos);
  CHECK(mqar({.pair_tokens = 3}).find("pair_tokens") != std::string::npos);
  CHECK(value_error([] { make_induction(4, 7, 5, 0); }).find("length") != std::string::npos);
  CHECK(value_error([] { make_induction(4, 8, 1, 0); }).find("vocab") != std::string::npos);
}
