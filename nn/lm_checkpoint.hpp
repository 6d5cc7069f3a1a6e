/// @file
/// A CausalLM checkpoint: one safetensors file with the weights and, in its metadata, the LMConfig
/// (keys "lm.*") plus whatever the caller adds (a tokenizer, the training step). `attnlab
/// generate` rebuilds the model from the file alone.
/// @ingroup nn
#pragma once
#include <memory>
#include <string>

#include "nn/transformer.hpp"
#include "tensor/io.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// Writes atomically; `extra` keys must not start with "lm.".
void save_causal_lm(const std::string& path, const CausalLM& model, const Metadata& extra = {});

/// A CausalLM read from a checkpoint, with the file's metadata.
struct LoadedLM {
  std::shared_ptr<CausalLM> model;  ///< built from the lm.* metadata, weights loaded
  Metadata metadata;  ///< everything in the file's metadata, "lm.*" included
};
/// FileError names the path when the file is not a CausalLM checkpoint or a key is missing or
/// malformed, when the header's tensors do not fit the metadata (check_causal_lm_header, before
/// the model is built or any tensor data read), or a weight is not finite; the weights are loaded
/// strictly. A file without lm.positions has learned positions.
LoadedLM load_causal_lm(const std::string& path);

/// Where the values of an LMConfig were read, for the messages of check_causal_lm_header: a
/// CausalLM file's metadata (the default) or a run's config.toml and task.
struct LMConfigOrigin {
  std::string source = "the metadata";  ///< "<source> gives <key> = <value>"
  std::string d_model = "lm.d_model";        ///< the key that gives the model width
  std::string layers = "lm.layers";          ///< the key that gives the number of blocks
  std::string vocab_size = "lm.vocab_size";  ///< the key that gives the vocabulary size
  std::string max_len = "lm.max_len";        ///< the key that gives the context length
  std::string ffn_hidden = "lm.ffn_hidden";  ///< the key that gives the feed-forward width
  std::string prefix;  ///< of the model's tensors in the file ("model." in a runner checkpoint)
};

/// The blocks a header holds (tensors "<prefix>blocks.<i>.*", i = 0 .. n-1) against `layers`:
/// FileError "<path>: holds n blocks, but <source> gives <layers key> = <layers>".
void check_block_count(const std::map<std::string, Dims>& shapes, int64_t layers, const std::string& path,
                       const LMConfigOrigin& origin = {});

/// Compares the tensors a file's header declares (safetensors_shapes: names and shapes, no data)
/// with the CausalLM `config` describes, before anything of the size of the model is built:
/// tok_emb (V, D), pos_emb (max_len, D) with learned positions, the blocks present (blocks.0 ..)
/// against `layers`, block 0's ffn.fc1 (hidden, D), then every name, shape and the tensor count
/// against a model of one block (built once those sizes agree). With positions "none", max_len
/// bounds the decoding caches only, which must fit in physical memory. FileError naming `path`,
/// the key, the value it gives and what the file holds.
void check_causal_lm_header(const std::map<std::string, Dims>& shapes, const LMConfig& config, const std::string& path,
                            const LMConfigOrigin& origin = {});

/// FileError "<path>: tensor '<prefix><name>' holds N non-finite values (the first, nan, at flat
/// index i)" for the first floating-point tensor holding a NaN or an infinity: a model with such
/// a weight computes NaN logits, and every sample from it would be meaningless. `prefix` restores
/// the name the file gives a tensor whose prefix the caller removed ("model.").
void check_finite_weights(const TensorMap& weights, const std::string& path, const std::string& prefix = "");

}  // namespace attnlab::nn
/// @}
