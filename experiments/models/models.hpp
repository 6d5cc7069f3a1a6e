/// @file
/// The models of the catalog's experiments, built from a config, so that later code (e.g. head
/// analysis of a finished run) rebuilds the model of a run from its config.toml and loads its
/// checkpoint.safetensors (docs/experiments.md). Part of the experiments library, which the CLI's
/// commands (generate, analyze, viz, the heads commands) and the catalog both use; the catalog
/// links the library, never the other way (docs/conventions.md, the layering table).
///
///   model.attention   attention spec string (docs/attention.md), e.g. "talking_heads(heads=8)"
///   model.d_model, model.layers, model.ffn_hidden (0 = 4 d_model), model.dropout,
///   model.pooling     cls | mean (classifiers)
///   model.heads, model.key_size   0 = as in the spec; > 0 overrides the spec's `heads` /
///                     `key_size` option, so a sweep can vary them as numbers (a report's x axis)
/// @ingroup runner
#pragma once
#include <filesystem>
#include <memory>

#include "experiments/runner/config.hpp"
#include "experiments/runner/task.hpp"
#include "nn/lm_checkpoint.hpp"
#include "nn/transformer.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::models {

/// The defaults of the model.* keys an experiment gets from add_model_keys.
struct ModelDefaults {
  std::string attention = "mha(heads=4)";  ///< model.attention, a spec (docs/attention.md)
  int64_t d_model = 64;                    ///< model.d_model, D
  int64_t layers = 2;                      ///< model.layers
  int64_t ffn_hidden = 128;                ///< model.ffn_hidden (0 = 4 D)
  double dropout = 0.0;                    ///< model.dropout on the residual branches
  std::string pooling = "mean";            ///< model.pooling of classifiers: cls | mean
  int64_t heads = 0;     ///< 0 = the spec's
  int64_t key_size = 0;  ///< 0 = the spec's
};
/// Adds the model.* keys (above) to `schema` with these defaults and their bounds; returns it.
runner::Schema& add_model_keys(runner::Schema& schema, const ModelDefaults& defaults = {});

/// model.attention with the model.heads / model.key_size overrides applied, e.g. "mha(heads=4)" with
/// model.heads = 8 gives "mha(heads=8)". ConfigError when an override is negative or the variant has
/// no such option (fnet, mixer have no heads).
std::string attention_spec(const runner::Config& config);

/// One transformer block's config from model.d_model, model.attention (overrides applied),
/// model.ffn_hidden and model.dropout; ConfigError for a key out of range.
nn::BlockConfig block_config(const runner::Config& config);

/// The Experiment::check of the catalog's experiments, run before a run directory is created: the
/// model.* keys in range, model.pooling and model.positions (where the schema has it) known, and
/// one transformer block built from model.attention (model.heads / model.key_size applied) at
/// model.d_model, so an unknown variant or option, a bad option value or a width the heads do not
/// divide is a ConfigError naming the spec, where it came from and what the layer said.
void check_model(const runner::Config& config);

/// An encoder classifier for a classification task (token or feature inputs, one label per
/// example). ConfigError for a language-modelling or per-position task.
std::shared_ptr<nn::EncoderClassifier> build_classifier(const runner::Config& config, const runner::TaskData& task);
/// An independent copy of a classifier (same config, weights copied, eval mode): masking its
/// heads or training it leaves `model` unchanged.
std::shared_ptr<nn::EncoderClassifier> copy_classifier(const nn::EncoderClassifier& model);
/// A causal LM for a language-modelling task (context = task.seq_len; positions from
/// model.positions where the schema has it, else learned).
std::shared_ptr<nn::CausalLM> build_lm(const runner::Config& config, const runner::TaskData& task);
/// Whichever of the two fits the task.
std::shared_ptr<nn::Module> build_model(const runner::Config& config, const runner::TaskData& task);

/// Accuracy and mean cross-entropy of a classifier over a whole split (eval mode, no grad).
struct Scores {
  double accuracy = 0;  ///< share of examples whose argmax is the label
  double loss = 0;      ///< mean cross-entropy
};
/// Scores of `model` over `split`, `batch` examples per forward; a stop signal is honoured between batches.
Scores evaluate_classifier(nn::EncoderClassifier& model, const runner::TaskData& task,
                           const data::TensorDataset& split, int64_t batch = 256);

/// A run directory's model: the experiment named in meta.json, config.toml resolved against its
/// schema, the task built from it, and the "model." tensors of checkpoint.safetensors loaded.
/// FileError when a file is missing; ConfigError when config.toml does not fit the schema.
struct LoadedRun {
  std::string experiment;  ///< meta.json's experiment name
  runner::Config config;              ///< config.toml resolved against the experiment's schema
  runner::TaskData task;              ///< the task built from it
  std::shared_ptr<nn::Module> model;  ///< the model with the checkpoint's weights, in eval mode
  int64_t step;  ///< of the checkpoint
};
/// Loads the run in `run_dir` (see LoadedRun); the checkpoint's tensors are checked against the model before loading.
LoadedRun load_run(const std::filesystem::path& run_dir);

/// The CausalLM of a run whose experiment trains one on a language-modelling task (the catalog's
/// `lm`), for `attnlab generate`: `path` is the run directory or its checkpoint.safetensors. The
/// model is built from the run's config.toml (vocabulary and context from the task it names)
/// after the shapes of the checkpoint's "model." tensors, read from its header alone, are checked
/// against the config (embedding width and vocabulary, position table, block count); the weights
/// are read and loaded once every name and shape matches the built model. The
/// metadata holds the tokenizer as `attnlab generate` reads it ("tokenizer.bytes": the bytes of
/// ids 0..V-1 in hex, "tokenizer.unk": "true" when id 0 is <unk>) and the checkpoint's "step".
/// FileError naming the file for a missing file, a run of a non-LM task, or tensors that do not
/// fit the config.
nn::LoadedLM load_lm_run(const std::filesystem::path& path);

}  // namespace attnlab::models
/// @}
