/// @file
/// What head analysis needs from a trained model: its self-attention layers in order, a forward
/// pass over a batch with the loss and the logit to explain, and the token ids on the attention
/// axes. Also capturing every layer's attention probabilities during a normal forward
/// (TransformerBlock::attention_observer), and reading Hard Concrete gate values.
/// (docs/analysis.md)
/// @ingroup analysis
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "experiments/data/loader.hpp"
#include "nn/transformer.hpp"

/// @addtogroup analysis
/// @{
namespace attnlab::analysis {

/// [layer][head] values (heads may differ per layer after pruning).
using HeadMatrix = std::vector<std::vector<double>>;

/// A trained model prepared for head analysis: its blocks, and how to run a batch through it.
struct Probe {
  nn::Module* model = nullptr;  ///< the model analysed (not owned)
  /// The self-attention blocks, in forward order (layer l = blocks[l]).
  std::vector<nn::TransformerBlock*> blocks;
  /// logits of a batch: classifier (B, C), language model (B, N, V).
  std::function<Tensor(const data::Batch&)> forward;
  /// The mean training loss of a batch from its logits (0-d): head importance differentiates it.
  std::function<Tensor(const Tensor& logits, const data::Batch&)> loss;
  /// The scalar LRP explains, summed over the batch's examples (0-d): the top logit of each
  /// example (classifier), of each sequence's last position (language model).
  std::function<Tensor(const Tensor& logits)> explained;
  /// The token ids along the attention axes, int64 (B, N): the inputs, with -1 for a prepended
  /// CLS position. Undefined when the inputs are not tokens (feature vectors).
  std::function<Tensor(const data::Batch&)> axis_tokens;
  int64_t pad_id = -1;  ///< axis tokens equal to it are padding: neither queries nor keys
  bool causal = false;  ///< queries see keys m <= n only
  /// Tensors whose gradient x value sums to the input relevance (the embedding tables, CLS,
  /// input_proj.weight): LRP's conservation check.
  std::vector<Tensor> input_tensors;
};

/// An EncoderClassifier on token inputs (B, N) or features (B, N, F) with targets (B);
/// pad_id >= 0 marks padding tokens (ListOps: data::kListOpsPad), passed to the model as its
/// padding mask. Loss: cross-entropy.
Probe classifier_probe(nn::EncoderClassifier& model, int64_t pad_id = -1);
/// A CausalLM on inputs (B, N) with next-token targets (B, N). Loss: mean cross-entropy over
/// positions. With tie_weights the input relevance also counts lm_head's use of the table, so
/// input_tensors is left empty (no conservation check).
Probe lm_probe(nn::CausalLM& model);

/// Sets an attention observer on every block of `probe` for its lifetime, then restores the
/// previous ones. The callback gets (layer, result); result.attention is (B, h, N, N), or
/// undefined / empty for variants without probabilities.
class ObserverScope {
 public:
  ObserverScope(const Probe& probe, std::function<void(int64_t, const nn::AttentionResult&)> callback);  ///< observes every block of `probe` with `callback`
  ~ObserverScope();
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;

 private:
  std::vector<nn::TransformerBlock*> blocks_;
  std::vector<std::function<void(const nn::AttentionResult&)>> previous_;
};

/// Every layer's attention probabilities (B, h, N, N), detached, for one forward in eval mode
/// without gradients; also returns the logits. ValueError naming the layer and its spec when a
/// variant has no probabilities (linformer, compressed, fnet, mixer, and lsh/routing's
/// approximations return none).
std::pair<Tensor, std::vector<Tensor>> capture_attention(const Probe& probe, const data::Batch& batch);

/// The head_mask buffer of layer l's attention (hv), ValueError when the variant has none.
Tensor head_mask_of(const nn::TransformerBlock& block, int64_t layer);

/// Eval-mode gate values g per head (deterministic: the Hard Concrete gate without noise), for
/// every attention module of `model` in named_modules order; an attention layer without gates
/// gives its head_mask (ones unless heads were masked). For logging gate trajectories.
std::vector<std::pair<std::string, std::vector<double>>> gate_values(const nn::Module& model);
/// The same as flat metrics: "gate.<module name>.<head>" -> g, e.g. "gate.blocks.0.attn.3".
std::vector<std::pair<std::string, double>> gate_metrics(const nn::Module& model);

/// Restores a model's training flag and its parameters' requires_grad on scope exit; the
/// analysis runs in eval mode and differentiates only what it asks for.
class FreezeScope {
 public:
  explicit FreezeScope(nn::Module& model);  ///< remembers `model`'s flags to restore them
  ~FreezeScope();
  FreezeScope(const FreezeScope&) = delete;
  FreezeScope& operator=(const FreezeScope&) = delete;

 private:
  nn::Module& model_;
  bool training_;
  std::vector<std::pair<Tensor, bool>> params_;
};

}  // namespace attnlab::analysis
/// @}
