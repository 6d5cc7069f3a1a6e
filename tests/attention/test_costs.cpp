// attention_density and attention_state_per_token (nn/attention/costs.hpp) on a few variants,
// against the numbers their formulas give.
#include "helpers.hpp"
#include "nn/attention/costs.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::nn;

TEST_CASE("attention_density: dense 1, causal (N+1)/2N, local and sinkhorn by their patterns") {
  const int64_t n = 32, d = 16;
  auto density = [&](const std::string& spec, bool causal = false) {
    return attention_density(*make_attention(spec, d), n, causal);
  };
  CHECK(density("mha(heads=2)") == doctest::Approx(1.0));
  CHECK(density("mha(heads=2)", true) == doctest::Approx(double(n + 1) / (2.0 * n)));
  CHECK(density("linear(heads=2)") == doctest::Approx(1.0));
  CHECK(density("linformer(heads=2, proj_len=8, max_len=32)") == doctest::Approx(1.0));
  // |n - m| <= 2: 5 keys per query, minus 2 + 1 cut at each edge.
  CHECK(density("local(heads=2, window=2)") == doctest::Approx(double(5 * n - 6) / double(n * n)));
  // and every query also sees keys 0, 1 (those outside its window).
  int64_t sinks = 0;
  for (int64_t q = 0; q < n; ++q)
    for (int64_t k = 0; k < n; ++k) sinks += (std::abs(q - k) <= 2 || k < 2);
  CHECK(density("local(heads=2, window=2, sink_tokens=2)") == doctest::Approx(double(sinks) / double(n * n)));
  CHECK(density("sinkhorn(heads=2, block=8, max_len=32)") == doctest::Approx(0.5));
  const double lsh = density("lsh(heads=2, buckets=4, hashes=1, chunk=4)");
  CHECK(lsh > 0.0);
  CHECK(lsh <= 8.0 / n);  // its own chunk and the previous one: at most 2c keys a query
  // longformer: a window of 2 each side plus global position 0 (its row and its column).
  int64_t lf = 0;
  for (int64_t q = 0; q < n; ++q)
    for (int64_t k = 0; k < n; ++k) lf += (std::abs(q - k) <= 2 || q == 0 || k == 0);
  CHECK(density("longformer(heads=2, window=2, global_first=1)") == doctest::Approx(double(lf) / double(n * n)));
}

TEST_CASE("attention_state_per_token: KV caches, latents, windows and fixed states") {
  const int64_t n = 64, d = 32;
  auto state = [&](const std::string& spec) { return attention_state_per_token(*make_attention(spec, d), n); };
  CHECK(state("mha(heads=4)") == doctest::Approx(2.0 * 4 * 8));        // 2 h dk
  CHECK(state("mha(heads=4, kv_heads=1)") == doctest::Approx(2.0 * 8));  // 2 g dk
  CHECK(state("local(heads=4, window=8)") == doctest::Approx(8.0 * 4 * 16 / n));
  CHECK(state("linear(heads=4)") == doctest::Approx(4.0 * 8 * 9 / n));  // h dk (dv + 1)
  CHECK(state("linformer(heads=4, proj_len=16, max_len=64)") == doctest::Approx(4.0 * 16 * 16 / n));
  CHECK(state("nystrom(heads=4, landmarks=8)") == doctest::Approx(4.0 * 8 * 16 / n));
  CHECK(state("lsh(heads=4, buckets=4, chunk=8)") == doctest::Approx(4.0 * 16));
  auto layer = make_attention("mha(heads=4)", d);
  layer->train();
  attention_state_per_token(*layer, n);
  CHECK(layer->is_training());  // the mode is restored
}

TEST_CASE("attention_restricts_pairs: the pattern variants, not those that mix every pair") {
  const int64_t d = 16;
  for (const char* spec : {"local(heads=2, window=2)", "lsh(heads=2, buckets=2, chunk=4)", "sinkhorn(heads=2, block=4)",
                           "bigbird(heads=2, block=4, max_len=32)", "longformer(heads=2, window=2)"})
    CHECK_MESSAGE(attention_restricts_pairs(*make_attention(spec, d)), spec);
  for (const char* spec : {"mha(heads=2)", "linear(heads=2)", "performer(heads=2)", "mla(heads=2)", "nystrom(heads=2)"})
    CHECK_FALSE_MESSAGE(attention_restricts_pairs(*make_attention(spec, d)), spec);
}

