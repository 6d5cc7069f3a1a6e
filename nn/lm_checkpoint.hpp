// A CausalLM checkpoint: one safetensors file with the weights and, in its metadata, the LMConfig
// (keys "lm.*") plus whatever the caller adds (a tokenizer, the training step). `attnlab
// generate` rebuilds the model from the file alone.
#pragma once
#include <memory>
#include <string>

#include "nn/transformer.hpp"
#include "tensor/io.hpp"

namespace attnlab::nn {

// Writes atomically; `extra` keys must not start with "lm.".
void save_causal_lm(const std::string& path, const CausalLM& model, const Metadata& extra = {});

struct LoadedLM {
  std::shared_ptr<CausalLM> model;
  Metadata metadata;  // everything in the file's metadata, "lm.*" included
};
// FileError names the path when the file is not a CausalLM checkpoint or a key is missing or
// malformed, or a weight is not finite; the weights are loaded strictly. A file without
// lm.positions has learned positions.
LoadedLM load_causal_lm(const std::string& path);

// FileError "<path>: tensor '<prefix><name>' holds N non-finite values (the first, nan, at flat
// index i)" for the first floating-point tensor holding a NaN or an infinity: a model with such
// a weight computes NaN logits, and every sample from it would be meaningless. `prefix` restores
// the name the file gives a tensor whose prefix the caller removed ("model.").
void check_finite_weights(const TensorMap& weights, const std::string& path, const std::string& prefix = "");

}  // namespace attnlab::nn
