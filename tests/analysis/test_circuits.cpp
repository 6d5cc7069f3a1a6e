// Previous-token and induction scores (experiments/analysis/circuits.hpp): the repeated random
// sequences, the scores of hand-built heads that do exactly one thing, the CLS offset, the roles
// and role table they give, and the measurement through a real model's probe.
#include "experiments/analysis/circuits.hpp"
#include "experiments/analysis/statistics.hpp"
#include "helpers.hpp"
#include "nn/transformer.hpp"

using namespace attnlab;
using namespace attnlab::analysis;

namespace {

// (B, 3, N, N) causal maps for sequences of 2 K tokens starting at `start`: head 0 attends the
// previous token, head 1 the token after the earlier occurrence (in the second half; the first
// half attends itself), head 2 is uniform over the visible keys.
Tensor hand_maps(int64_t B, int64_t N, int64_t start, int64_t K) {
  std::vector<double> v(size_t(B * 3 * N * N), 0.0);
  auto at = [&](int64_t b, int64_t h, int64_t n, int64_t m) -> double& { return v[size_t(((b * 3 + h) * N + n) * N + m)]; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n) {
      at(b, 0, n, n > 0 ? n - 1 : 0) = 1;
      at(b, 1, n, n >= start + K && n < start + 2 * K ? n - K + 1 : n) = 1;
      for (int64_t m = 0; m <= n; ++m) at(b, 2, n, m) = 1.0 / double(n + 1);
    }
  return from_vector(v, {B, 3, N, N});
}

}  // namespace

TEST_CASE("repeated_random_tokens: K tokens then the same K, distinct when the vocabulary allows, never pad") {
  Generator gen(3);
  Tensor t = repeated_random_tokens(4, 6, 10, 0, gen);  // (4, 12)
  REQUIRE(t.shape() == Dims{4, 12});
  const std::vector<int64_t> v = t.to_vector<int64_t>();
  for (int64_t b = 0; b < 4; ++b) {
    std::vector<int64_t> half(v.begin() + b * 12, v.begin() + b * 12 + 6);
    for (int64_t j = 0; j < 6; ++j) {
      CHECK(v[size_t(b * 12 + 6 + j)] == half[size_t(j)]);
      CHECK(half[size_t(j)] >= 1);
      CHECK(half[size_t(j)] < 10);
    }
    std::sort(half.begin(), half.end());
    CHECK(std::unique(half.begin(), half.end()) == half.end());
  }
  // A vocabulary smaller than K draws with replacement.
  CHECK(repeated_random_tokens(1, 8, 3, -1, gen).shape() == Dims{1, 16});
  CHECK_THROWS_AS(repeated_random_tokens(1, 1, 10, -1, gen), ValueError);
  CHECK_THROWS_AS(repeated_random_tokens(1, 4, 2, 0, gen), ValueError);
}

TEST_CASE("circuit_scores: a previous-token head, an induction head and a uniform head score as built") {
  const int64_t B = 2, K = 5, N = 2 * K;
  Tensor tokens = zeros({B, N}, kInt64);
  CircuitStats c = circuit_scores({hand_maps(B, N, 0, K)}, tokens, K, /*causal=*/true);
  CHECK(c.examples == B);
  REQUIRE(c.previous_token.size() == 1);
  CHECK(c.previous_token[0][0] == doctest::Approx(1.0));
  CHECK(c.induction[0][1] == doctest::Approx(1.0));
  // The induction head's first half attends itself: no weight on the previous token.
  CHECK(c.previous_token[0][1] == doctest::Approx(0.0));
  // The uniform head scores its baselines exactly.
  CHECK(c.previous_token[0][2] == doctest::Approx(c.previous_uniform));
  CHECK(c.induction[0][2] == doctest::Approx(c.induction_uniform));
  double u = 0;
  for (int64_t j = 0; j < K; ++j) u += 1.0 / double(K + j + 1);
  CHECK(c.induction_uniform == doctest::Approx(u / K));

  // The roles: >= 0.5 and 0.1 above uniform.
  AttentionStats s;
  s.layers.resize(1);
  s.layers[0].heads.resize(3);
  s.circuits = c;
  auto roles = head_roles(s);
  CHECK(roles[0][0].label() == "previous_token");
  CHECK(roles[0][1].label() == "induction");
  CHECK(roles[0][2].label() == "-");
  const std::string table = role_table(s);
  CHECK(table.find("| previous token | induction |") != std::string::npos);
  CHECK(table.find("Previous-token and induction") != std::string::npos);
  // Not measured: NaN scores, no roles, no columns.
  AttentionStats none;
  none.layers.resize(1);
  none.layers[0].heads.resize(1);
  CHECK(std::isnan(head_roles(none)[0][0].induction));
  CHECK(role_table(none).find("induction") == std::string::npos);
}

TEST_CASE("circuit_scores: the sequence starts after a CLS position; bad shapes are errors") {
  const int64_t K = 4, N = 2 * K + 1;
  std::vector<int64_t> tok(size_t(N), 7);
  tok[0] = -1;  // CLS
  Tensor tokens = from_vector(tok, {1, N});
  CircuitStats c = circuit_scores({hand_maps(1, N, 1, K)}, tokens, K, /*causal=*/false);
  CHECK(c.induction[0][1] == doctest::Approx(1.0));
  CHECK(c.previous_token[0][0] == doctest::Approx(1.0));
  CHECK(c.previous_uniform == doctest::Approx(1.0 / N));
  CHECK_THROWS_AS(circuit_scores({hand_maps(1, N, 1, K)}, tokens, K + 1, true), ShapeError);
  CHECK_THROWS_AS(circuit_scores({zeros({1, 3, N, N - 1})}, tokens, K, true), ShapeError);
}

TEST_CASE("measure_circuits runs a language model's probe on repeated sequences") {
  manual_seed(4);
  nn::LMConfig cfg;
  cfg.block.d_model = 16;
  cfg.block.attention = "mha(heads=2)";
  cfg.layers = 2;
  cfg.vocab_size = 12;
  cfg.max_len = 16;
  nn::CausalLM model(cfg);
  Probe probe = lm_probe(model);
  Generator gen(0);
  CircuitStats c = measure_circuits(probe, 3, 8, 12, gen);
  CHECK(c.examples == 3);
  REQUIRE(c.induction.size() == 2);
  for (const auto& layer : c.induction)
    for (double v : layer) {
      CHECK(v >= 0);
      CHECK(v <= 1);
    }
}
