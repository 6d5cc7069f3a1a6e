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
// malformed; the weights are loaded strictly. A file without lm.positions has learned positions.
LoadedLM load_causal_lm(const std::string& path);

}  // namespace attnlab::nn
