/// @file
/// Transformer assemblies that take any attention variant from the registry
/// (nn/attention/registry.hpp) by spec string:
///   - TransformerBlock: attention + feed-forward, pre-norm or post-norm, optional
///     cross-attention (decoder blocks);
///   - EncoderClassifier: token ids or feature vectors -> blocks -> CLS or mean pooling -> classes;
///   - CausalLM: a decoder-only language model;
///   - EncoderDecoder: sequence to sequence with cross-attention.
/// Parameter names follow the usual PyTorch layout (`blocks.0.attn.q_proj.weight`).
/// @ingroup nn
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "nn/attention/attention.hpp"
#include "nn/dropout.hpp"
#include "nn/embedding.hpp"
#include "nn/feed_forward.hpp"
#include "nn/layer_norm.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

struct BlockConfig {
  int64_t d_model = 128;
  std::string attention = "mha";  ///< spec string, see docs/attention.md
  int64_t ffn_hidden = 0;         ///< 0 = 4 * d_model
  std::string activation = "gelu";
  double dropout = 0.0;           ///< on the residual branches
  bool norm_first = true;         ///< pre-norm (true) or post-norm (false)
  double norm_eps = 1e-5;
  std::string cross_attention;    ///< non-empty: a decoder block with this cross-attention spec
};

class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const BlockConfig& config);
  /// x (B, N, D); mask broadcastable to (B, h, N, N); memory (B, M, D) for cross-attention with
  /// memory_mask broadcastable to (B, h, N, M); segment_ids int64 (B, N) for packed sequences: the
  /// self-attention keeps each query to the keys of its own segment (Attention::forward_packed).
  Tensor forward(const Tensor& x, const Tensor& mask = {}, bool causal = false, const Tensor& memory = {},
                 const Tensor& memory_mask = {}, const Tensor& segment_ids = {});
  std::string type_name() const override { return "TransformerBlock"; }
  /// Incremental causal decoding of a block without cross-attention: x_new (B, T, D) are the
  /// next T positions; `cache` comes from attn->make_cache (see Attention::forward_step).
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache);

  /// Called after every forward() with the self-attention's result. While it is set the block
  /// asks its attention for need_weights = true, so result.attention holds the (B, h, N, N)
  /// probabilities where the variant has them (undefined or empty where it has none); unset, the
  /// forward is exactly the plain one (mha keeps its fused kernel). For analysis
  /// (experiments/analysis/): attention maps, and the head outputs' gradients through the graph.
  std::function<void(const AttentionResult&)> attention_observer;

  BlockConfig config;
  std::shared_ptr<Attention> attn, cross_attn;
  std::shared_ptr<LayerNorm> norm1, norm2, norm_cross;
  std::shared_ptr<FeedForward> ffn;
  std::shared_ptr<Dropout> dropout;
};

/// The sum of every attention layer's expected-L0 gate penalty in `model` (0 without gates).
Tensor l0_penalty(const Module& model);

struct EncoderConfig {
  BlockConfig block;
  int64_t layers = 2;
  int64_t vocab_size = 0;    ///< > 0: inputs are token ids (B, N)
  int64_t input_dim = 0;     ///< > 0: inputs are features (B, N, input_dim), e.g. image patches
  int64_t max_len = 512;     ///< learned positions
  int64_t num_classes = 10;
  std::string pooling = "cls";  ///< cls | mean
};

class EncoderClassifier : public Module {
 public:
  explicit EncoderClassifier(const EncoderConfig& config);
  /// inputs: int64 (B, N) or float (B, N, input_dim); padding: optional bool (B, N), true = real
  /// token; segment_ids: optional int64 (B, N), packed sequences (tokens attend their own segment;
  /// the CLS token joins the first token's segment; positions stay 0..N-1). Returns logits (B, num_classes).
  Tensor forward(const Tensor& inputs, const Tensor& padding = {}, const Tensor& segment_ids = {});
  std::string type_name() const override { return "EncoderClassifier"; }

  EncoderConfig config;
  std::shared_ptr<Embedding> tok_emb;  ///< vocab_size > 0
  std::shared_ptr<Linear> input_proj;  ///< input_dim > 0
  Tensor cls_token;                    ///< (1, 1, D), pooling = cls
  std::shared_ptr<Embedding> pos_emb;  ///< (max_len [+1 for CLS], D)
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<LayerNorm> norm;     ///< final norm (pre-norm only)
  std::shared_ptr<Linear> head;
};

struct LMConfig {
  BlockConfig block;
  int64_t layers = 2;
  int64_t vocab_size = 256;
  int64_t max_len = 256;
  bool tie_weights = false;  ///< lm_head shares tok_emb.weight
  /// Where the model learns token order (docs/nn.md, "Positions of a CausalLM"):
  ///   "learned"  pos_emb (max_len, D) added to the token embeddings; sequences <= max_len
  ///   "none"     no pos_emb: positions come from the attention alone (e.g. mha(alibi=true) or
  ///              mha(rope=true)); forward takes any length, max_len bounds only the decoding caches
  std::string positions = "learned";
};

/// A causal LM's decoding state: one attention cache per block.
struct LMCache {
  std::vector<std::unique_ptr<AttentionCache>> layers;
  int64_t batch = 0;
  int64_t length = 0;  ///< tokens consumed so far
};

class CausalLM : public Module {
 public:
  explicit CausalLM(const LMConfig& config);
  /// tokens int64 (B, N) -> logits (B, N, vocab). segment_ids: optional int64 (B, N), packed
  /// documents: each token attends the earlier tokens of its own segment, and learned positions
  /// restart at each segment (a token's position is its index within its segment).
  Tensor forward(const Tensor& tokens, const Tensor& segment_ids = {});
  /// Incremental decoding (eval mode, no gradients): make_cache for `batch` sequences, then
  /// forward_step with the next T tokens (B, T) -> their logits (B, T, vocab), equal to the last
  /// T rows of forward() over every token so far.
  LMCache make_cache(int64_t batch) const;
  Tensor forward_step(const Tensor& tokens_new, LMCache& cache);
  std::string type_name() const override { return "CausalLM"; }
  bool learned_positions() const { return config.positions == "learned"; }

  LMConfig config;
  std::shared_ptr<Embedding> tok_emb;
  std::shared_ptr<Embedding> pos_emb;  ///< positions = "learned" only
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> lm_head;
};

struct Seq2SeqConfig {
  BlockConfig block;                ///< the encoder's; the decoder adds cross-attention
  std::string cross_attention = "mha";
  int64_t encoder_layers = 2, decoder_layers = 2;
  int64_t src_vocab = 32, tgt_vocab = 32;
  int64_t max_len = 256;
};

class EncoderDecoder : public Module {
 public:
  explicit EncoderDecoder(const Seq2SeqConfig& config);
  /// src int64 (B, M), tgt int64 (B, N) (teacher forcing) -> logits (B, N, tgt_vocab).
  /// src_padding: optional bool (B, M), true = real token.
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_padding = {});
  Tensor encode(const Tensor& src, const Tensor& src_padding = {});
  Tensor decode(const Tensor& tgt, const Tensor& memory, const Tensor& src_padding = {});
  std::string type_name() const override { return "EncoderDecoder"; }

  Seq2SeqConfig config;
  std::shared_ptr<Embedding> src_emb, tgt_emb, pos_emb;
  std::shared_ptr<ModuleList> encoder, decoder;
  std::shared_ptr<LayerNorm> encoder_norm, decoder_norm;
  std::shared_ptr<Linear> lm_head;
};

}  // namespace attnlab::nn
/// @}
