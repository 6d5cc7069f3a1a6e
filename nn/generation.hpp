/// @file
/// Sampling text from a CausalLM: temperature, top-k and a seed, with or without the decoding
/// cache (CausalLM::forward_step). Both paths draw the same random numbers in the same order, so
/// they produce the same tokens whenever their logits agree (the test checks that they do).
/// @ingroup nn
#pragma once
#include <cstdint>

#include "nn/transformer.hpp"
#include "tensor/random.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// Whether a layer's decoding state is the default one (Attention::make_cache), which keeps the
/// inputs and recomputes the causal forward over all of them at each step, rather than a cache
/// of its own (keys and values, a window or a recurrent state). Defined in attention.cpp.
bool recomputes_per_step(const AttentionCache& cache);

/// How generate() samples.
struct GenerateOptions {
  int64_t max_new_tokens = 100;  ///< tokens appended to the prompt
  double temperature = 1.0;  ///< 0 = greedy (argmax)
  int64_t top_k = 0;         ///< > 0: sample among the k most likely tokens only
  uint64_t seed = 0;  ///< the sampling generator's seed
  bool use_cache = true;     ///< false: recompute the whole sequence for every new token
};

/// prompt int64 (B, P), 1 <= P -> (B, P + max_new_tokens); with learned positions
/// P + max_new_tokens <= max_len (without, the layers' decoding caches bound the length).
/// Runs in eval mode (restoring the model's mode afterwards), without gradients.
Tensor generate(CausalLM& model, const Tensor& prompt, const GenerateOptions& options);

/// One token per row of logits (B, V): int64 (B). One uniform draw per row from `gen`. ValueError
/// naming the row and token when a logit is NaN or infinite (generate's names the step too).
Tensor sample_next(const Tensor& logits, double temperature, int64_t top_k, Generator& gen);

}  // namespace attnlab::nn
/// @}
