// Helpers shared by the nn tests: deterministic inputs that the PyTorch reference scripts
// (quoted in comments next to the expected numbers) build with the same formula, and a
// gradcheck wrapper for modules whose parameters are checked along with the input, and the small
// causal LM that the decoding tests generate from.
#pragma once
#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_helpers.hpp"
#include "helpers.hpp"
#include "nn/generation.hpp"
#include "nn/transformer.hpp"

namespace attnlab::testing {

// float64 values 2 sin(a i + b), i = 0..n-1; in Python:
//   torch.tensor([math.sin(a * i + b) * 2 for i in range(n)], dtype=torch.float64)
inline Tensor seq(int64_t n, double a, double b = 0.0) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(std::sin(a * double(i) + b) * 2);
  return from_vector(v, Dims{n});
}

inline Tensor expected(std::vector<double> v, Dims shape) { return from_vector(v, shape); }

// Gradchecks `fn(x)` with respect to x and every parameter of `module` (already float64).
template <class M, class F>
void check_module_grad(const std::string& what, M& module, const Tensor& x, F fn, GradcheckOptions options = {}) {
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : module.parameters()) inputs.push_back(p);
  check_grad(what, [&](const std::vector<Tensor>& in) { return fn(in[0]); }, inputs, options);
}

// A 2-layer causal LM (d_model 16, vocabulary 11, max_len 24) with the given attention.
inline nn::LMConfig small_lm(const std::string& attention) {
  nn::LMConfig c;
  c.block.d_model = 16;
  c.block.attention = attention;
  c.layers = 2;
  c.vocab_size = 11;
  c.max_len = 24;
  return c;
}

// The same 20 new tokens after a seeded (2, 3) prompt, generated with and without the decoding
// cache: {prompt, cached, uncached}. `o` is used as given except for use_cache.
inline std::array<Tensor, 3> generate_cached_and_uncached(nn::CausalLM& lm, nn::GenerateOptions o) {
  Generator gen(9);
  Tensor prompt = randint(0, 11, {2, 3}, gen);
  o.use_cache = true;
  Tensor cached = nn::generate(lm, prompt, o);
  o.use_cache = false;
  Tensor uncached = nn::generate(lm, prompt, o);
  return {prompt, cached, uncached};
}

}  // namespace attnlab::testing
