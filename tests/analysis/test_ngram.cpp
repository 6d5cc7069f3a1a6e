// Interpolated Kneser-Ney n-gram models (experiments/analysis/ngram.hpp): the hash-table model
// against its brute-force twin ngram_probability_reference, normalisation over the vocabulary for every
// history, the order-1 formula by hand, a periodic text, the shortened history at the start of a
// scored text, determinism and the errors.
#include <cmath>
#include <map>

#include "experiments/analysis/ngram.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::analysis;
using attnlab::testing::error_of;

namespace {

// A deterministic pseudo-random text over ids [0, vocab) (a 64-bit LCG's high bits), with
// repeated phrases so that higher orders have counts above 1.
std::vector<int64_t> random_text(size_t n, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> t;
  uint64_t s = seed;
  auto next = [&] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return s >> 33;
  };
  while (t.size() < n) {
    if (t.size() >= 8 && next() % 3 == 0) {  // copy a recent phrase
      const size_t from = t.size() - 8 + next() % 4, len = 2 + next() % 3;
      for (size_t j = 0; j < len && t.size() < n; ++j) t.push_back(t[from + j]);
    } else {
      t.push_back(int64_t(next() % uint64_t(vocab)));
    }
  }
  return t;
}

// Every history of exactly `len` tokens over [0, vocab), in order.
std::vector<std::vector<int64_t>> histories(int64_t vocab, size_t len) {
  std::vector<std::vector<int64_t>> out = {{}};
  for (size_t j = 0; j < len; ++j) {
    std::vector<std::vector<int64_t>> longer;
    for (const auto& h : out)
      for (int64_t v = 0; v < vocab; ++v) {
        longer.push_back(h);
        longer.back().push_back(v);
      }
    out = std::move(longer);
  }
  return out;
}

}  // namespace

TEST_CASE("ngram: probabilities sum to 1 over the vocabulary for every history and order") {
  // Id 4 never occurs in training: it lives on the interpolation with the uniform distribution.
  const int64_t vocab = 5;
  std::vector<int64_t> train = random_text(400, 4, 7);
  for (Smoothing smoothing : {Smoothing::kneser_ney, Smoothing::absolute}) {
    const NGramModel model(train, vocab, 4, smoothing);
    for (int order = 1; order <= 4; ++order)
      for (size_t len = 0; len <= 3; ++len)
        for (const auto& h : histories(vocab, len)) {
          double sum = 0;
          for (int64_t w = 0; w < vocab; ++w) {
            const double p = model.probability(order, h, w);
            CHECK(p > 0);
            sum += p;
          }
          CAPTURE(order);
          CAPTURE(len);
          CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
        }
  }
}

TEST_CASE("ngram: the hash-table model equals the brute-force ngram_probability_reference") {
  const int64_t vocab = 4;
  const std::vector<int64_t> train = random_text(80, vocab, 3);
  for (Smoothing smoothing : {Smoothing::kneser_ney, Smoothing::absolute}) {
    const NGramModel model(train, vocab, 4, smoothing);
    int compared = 0;
    for (int order = 1; order <= 4; ++order)
      for (size_t len = 0; len <= 3; ++len)
        for (const auto& h : histories(vocab, len))
          for (int64_t w = 0; w < vocab; ++w) {
            const double fast = model.probability(order, h, w);
            const double slow = ngram_probability_reference(train, vocab, order, h, w, smoothing);
            CAPTURE(order);
            CAPTURE(len);
            CAPTURE(w);
            CHECK(fast == doctest::Approx(slow).epsilon(1e-12));
            ++compared;
          }
    CHECK(compared == 4 * (1 + 4 + 16 + 64) * 4);
  }
}

TEST_CASE("ngram: Kneser-Ney and absolute discounting differ only below the top level") {
  const std::vector<int64_t> train = random_text(300, 4, 9);
  const NGramModel kn(train, 4, 3), absolute(train, 4, 3, Smoothing::absolute);
  for (int64_t w = 0; w < 4; ++w) CHECK(kn.probability(1, {}, w) == absolute.probability(1, {}, w));
  CHECK(kn.discount(2, true) == absolute.discount(2, true));
  CHECK(absolute.discount(2, false) == absolute.discount(2, true));
  const std::vector<int64_t> h = {1};
  bool differs = false;
  for (int64_t w = 0; w < 4; ++w) differs |= kn.probability(2, h, w) != absolute.probability(2, h, w);
  CHECK(differs);
}

TEST_CASE("ngram: order 1 is the count unigram interpolated with the uniform distribution") {
  // Counts 0:4, 1:2, 2:1, 3:1, 4:0 over V = 5: n1 = 2, n2 = 1, so D = 2 / (2 + 2) = 0.5; 4 types.
  const std::vector<int64_t> train = {0, 1, 0, 2, 0, 1, 3, 0};
  const NGramModel model(train, 5, 1);
  CHECK(model.discount(1, true) == 0.5);
  const std::map<int64_t, double> count = {{0, 4}, {1, 2}, {2, 1}, {3, 1}, {4, 0}};
  const double T = 8, D = 0.5, types = 4, V = 5;
  for (const auto& [w, c] : count) {
    const double expected = (std::max(c - D, 0.0) + D * types / V) / T;
    CHECK(model.probability(1, {}, w) == doctest::Approx(expected).epsilon(1e-15));
    // The history is ignored at order 1.
    const std::vector<int64_t> h = {3, 2};
    CHECK(model.probability(1, h, w) == model.probability(1, {}, w));
  }
  // bits_per_token at order 1: the mean over text[1..] of -log2 P(w).
  const std::vector<int64_t> val = {4, 0, 1, 4, 2};
  double bits = 0;
  for (size_t i = 1; i < val.size(); ++i) bits -= std::log2(model.probability(1, {}, val[i]));
  CHECK(model.bits_per_token(val)[0] == doctest::Approx(bits / 4).epsilon(1e-14));
}

TEST_CASE("ngram: a periodic text is predicted almost surely at a high order, not at order 1") {
  // Period 8: after `0 1 0` comes 2 or 3, which only the token before it tells (4 tokens of history).
  const std::vector<int64_t> period = {0, 1, 0, 2, 0, 1, 0, 3};
  std::vector<int64_t> train, val;
  for (int r = 0; r < 400; ++r) train.insert(train.end(), period.begin(), period.end());
  for (int r = 0; r < 50; ++r) val.insert(val.end(), period.begin(), period.end());
  const NGramModel model(train, 4, 6);
  const std::vector<double> bits = model.bits_per_token(val);
  CHECK(bits[0] > 1.7);   // the unigram entropy of the period: 1.75 bits
  CHECK(bits[1] > 0.5);   // after a 0, which of 1, 2, 3 is not known
  CHECK(bits[3] > 0.2);   // 3 tokens of history: after `0 1 0`, 2 or 3 (1 bit at 2 targets of 8)
  CHECK(bits[4] < 0.02);  // 4 tokens of history settle it
  CHECK(bits[5] < 0.02);
}

TEST_CASE("ngram: the first tokens of a scored text use the shorter history available") {
  const int64_t vocab = 4;
  const std::vector<int64_t> train = random_text(300, vocab, 11), val = random_text(40, vocab, 12);
  const NGramModel model(train, vocab, 5);
  const std::vector<double> bits = model.bits_per_token(val);
  for (int order = 1; order <= 5; ++order) {
    double sum = 0;
    for (size_t i = 1; i < val.size(); ++i) {
      const size_t from = i >= size_t(order - 1) ? i - size_t(order - 1) : 0;
      const std::vector<int64_t> h(val.begin() + ptrdiff_t(from), val.begin() + ptrdiff_t(i));
      sum -= std::log2(model.probability(order, h, val[i]));
    }
    CAPTURE(order);
    CHECK(bits[size_t(order - 1)] == doctest::Approx(sum / double(val.size() - 1)).epsilon(1e-13));
  }
  // A history shorter than order - 1 is scored by the model of order |h| + 1.
  const std::vector<int64_t> h = {2};
  for (int64_t w = 0; w < vocab; ++w) CHECK(model.probability(5, h, w) == model.probability(2, h, w));
}

TEST_CASE("ngram: counting and scoring are deterministic") {
  const std::vector<int64_t> train = random_text(5000, 30, 5), val = random_text(500, 30, 6);
  const std::vector<double> a = NGramModel(train, 30, 6).bits_per_token(val);
  const std::vector<double> b = NGramModel(std::vector<int64_t>(train), 30, 6).bits_per_token(val);
  CHECK(a == b);  // bitwise
  Tensor tt = Tensor::empty({int64_t(train.size())}, kInt64), tv = Tensor::empty({int64_t(val.size())}, kInt64);
  std::copy(train.begin(), train.end(), tt.data<int64_t>());
  std::copy(val.begin(), val.end(), tv.data<int64_t>());
  CHECK(ngram_bits_per_token(tt, tv, 30, 6) == a);
}

TEST_CASE("ngram: errors name the value and the range") {
  const std::vector<int64_t> text = {0, 1, 2, 1};
  CHECK(error_of([&] { NGramModel(text, 2, 3); }).find("training token 2 at position 2 is outside the vocabulary [0, 2)") !=
        std::string::npos);
  CHECK(error_of([&] { NGramModel(text, 3, 0); }).find("max_order must be in [1, 31]") != std::string::npos);
  CHECK(error_of([&] { NGramModel(text, 1 << 20, 6); }).find("max_order must be in [1, 3] for a vocabulary of 1048576 (20 bits") !=
        std::string::npos);
  const NGramModel model(text, 3, 2);
  CHECK(error_of([&] { model.bits_per_token(std::vector<int64_t>{1}); }).find("at least 2 tokens") != std::string::npos);
  CHECK(error_of([&] { model.probability(3, {}, 0); }).find("order must be in [1, 2], got 3") != std::string::npos);
  CHECK(error_of([&] { model.probability(1, {}, 3); }).find("predicted token 3") != std::string::npos);
}
