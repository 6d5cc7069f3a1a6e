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

/// The shape and options of one TransformerBlock.
struct BlockConfig {
  int64_t d_model = 128;  ///< D, the model width
  std::string attention = "mha";  ///< spec string, see docs/attention.md
  int64_t ffn_hidden = 0;         ///< 0 = 4 * d_model
  std::string activation = "gelu";  ///< the feed-forward activation (nn/activation.hpp names)
  double dropout = 0.0;           ///< on the residual branches
  bool norm_first = true;         ///< pre-norm (true) or post-norm (false)
  double norm_eps = 1e-5;  ///< the layer norms' eps
  std::string cross_attention;    ///< non-empty: a decoder block with this cross-attention spec
};

/// Attention and feed-forward with residuals and layer norms, pre-norm or post-norm; with cross-attention in a decoder.
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const BlockConfig& config);  ///< builds the attention from config.attention (make_attention; its errors) and the rest
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

  BlockConfig config;  ///< what it was built from
  std::shared_ptr<Attention> attn;        ///< the self-attention
  std::shared_ptr<Attention> cross_attn;  ///< the cross-attention (decoder blocks only)
  std::shared_ptr<LayerNorm> norm1;       ///< before (pre-norm) or after (post-norm) the self-attention
  std::shared_ptr<LayerNorm> norm2;       ///< before or after the feed-forward
  std::shared_ptr<LayerNorm> norm_cross;  ///< before or after the cross-attention
  std::shared_ptr<FeedForward> ffn;  ///< the position-wise feed-forward network
  std::shared_ptr<Dropout> dropout;  ///< on the residual branches
};

/// The sum of every attention layer's expected-L0 gate penalty in `model` (0 without gates).
Tensor l0_penalty(const Module& model);

/// The shape of an EncoderClassifier.
struct EncoderConfig {
  BlockConfig block;  ///< every block's configuration
  int64_t layers = 2;  ///< the number of blocks
  int64_t vocab_size = 0;    ///< > 0: inputs are token ids (B, N)
  int64_t input_dim = 0;     ///< > 0: inputs are features (B, N, input_dim), e.g. image patches
  int64_t max_len = 512;     ///< learned positions
  int64_t num_classes = 10;  ///< the classifier's outputs
  std::string pooling = "cls";  ///< cls | mean
};

/// A transformer encoder with a classification head: token ids or feature vectors -> blocks -> CLS or mean pooling -> logits.
class EncoderClassifier : public Module {
 public:
  explicit EncoderClassifier(const EncoderConfig& config);  ///< ValueError unless exactly one of vocab_size and input_dim is > 0, or for a pooling other than cls or mean
  /// inputs: int64 (B, N) or float (B, N, input_dim); padding: optional bool (B, N), true = real
  /// token; segment_ids: optional int64 (B, N), packed sequences (tokens attend their own segment;
  /// the CLS token joins the first token's segment; positions stay 0..N-1). Returns logits (B, num_classes).
  Tensor forward(const Tensor& inputs, const Tensor& padding = {}, const Tensor& segment_ids = {});
  std::string type_name() const override { return "EncoderClassifier"; }

  EncoderConfig config;  ///< what it was built from
  std::shared_ptr<Embedding> tok_emb;  ///< vocab_size > 0
  std::shared_ptr<Linear> input_proj;  ///< input_dim > 0
  Tensor cls_token;                    ///< (1, 1, D), pooling = cls
  std::shared_ptr<Embedding> pos_emb;  ///< (max_len [+1 for CLS], D)
  std::shared_ptr<ModuleList> blocks;  ///< the TransformerBlocks
  std::shared_ptr<LayerNorm> norm;     ///< final norm (pre-norm only)
  std::shared_ptr<Linear> head;  ///< (num_classes, D)
};

/// The shape of a CausalLM.
struct LMConfig {
  BlockConfig block;  ///< every block's configuration
  int64_t layers = 2;  ///< the number of blocks
  int64_t vocab_size = 256;  ///< token ids are in [0, vocab_size)
  int64_t max_len = 256;  ///< the longest sequence (learned positions) and decoding cache
  bool tie_weights = false;  ///< lm_head shares tok_emb.weight
  /// Where the model learns token order (docs/nn.md, "Positions of a CausalLM"):
  ///   "learned"  pos_emb (max_len, D) added to the token embeddings; sequences <= max_len
  ///   "none"     no pos_emb: positions come from the attention alone (e.g. mha(alibi=true) or
  ///              mha(rope=true)); forward takes any length, max_len bounds only the decoding caches
  std::string positions = "learned";
};

/// A causal LM's decoding state: one attention cache per block.
struct LMCache {
  std::vector<std::unique_ptr<AttentionCache>> layers;  ///< one per block
  int64_t batch = 0;  ///< the sequences decoded together
  int64_t length = 0;  ///< tokens consumed so far
};

/// A decoder-only language model: token and position embeddings, causal blocks, final norm, LM head.
class CausalLM : public Module {
 public:
  explicit CausalLM(const LMConfig& config);  ///< ValueError for positions other than learned or none, and the errors of make_attention
  /// tokens int64 (B, N) -> logits (B, N, vocab). segment_ids: optional int64 (B, N), packed
  /// documents: each token attends the earlier tokens of its own segment, and learned positions
  /// restart at each segment (a token's position is its index within its segment).
  Tensor forward(const Tensor& tokens, const Tensor& segment_ids = {});
  /// Incremental decoding (eval mode, no gradients): make_cache for `batch` sequences, then
  /// forward_step with the next T tokens (B, T) -> their logits (B, T, vocab), equal to the last
  /// T rows of forward() over every token so far.
  LMCache make_cache(int64_t batch) const;
  Tensor forward_step(const Tensor& tokens_new, LMCache& cache);  ///< the logits (B, T, vocab) of the next tokens (B, T) (see make_cache)
  std::string type_name() const override { return "CausalLM"; }
  bool learned_positions() const { return config.positions == "learned"; }  ///< positions = "learned"

  LMConfig config;  ///< what it was built from
  std::shared_ptr<Embedding> tok_emb;  ///< (vocab_size, D)
  std::shared_ptr<Embedding> pos_emb;  ///< positions = "learned" only
  std::shared_ptr<ModuleList> blocks;  ///< the causal TransformerBlocks
  std::shared_ptr<LayerNorm> norm;  ///< the final norm
  std::shared_ptr<Linear> lm_head;  ///< (vocab_size, D), tied to tok_emb.weight with tie_weights
};

/// The shape of an EncoderDecoder.
struct Seq2SeqConfig {
  BlockConfig block;                ///< the encoder's; the decoder adds cross-attention
  std::string cross_attention = "mha";  ///< the decoder blocks' cross-attention spec
  int64_t encoder_layers = 2;  ///< blocks in the encoder
  int64_t decoder_layers = 2;  ///< blocks in the decoder
  int64_t src_vocab = 32;  ///< source token ids are in [0, src_vocab)
  int64_t tgt_vocab = 32;  ///< target token ids are in [0, tgt_vocab)
  int64_t max_len = 256;  ///< the longest source or target (learned positions)
};

/// Sequence to sequence: a transformer encoder and a decoder with cross-attention over its output.
class EncoderDecoder : public Module {
 public:
  explicit EncoderDecoder(const Seq2SeqConfig& config);  ///< builds both stacks; the errors of make_attention
  /// src int64 (B, M), tgt int64 (B, N) (teacher forcing) -> logits (B, N, tgt_vocab).
  /// src_padding: optional bool (B, M), true = real token.
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_padding = {});
  Tensor encode(const Tensor& src, const Tensor& src_padding = {});  ///< src int64 (B, M) -> memory (B, M, D), the encoder's output
  Tensor decode(const Tensor& tgt, const Tensor& memory, const Tensor& src_padding = {});  ///< tgt int64 (B, N) over memory (B, M, D) -> logits (B, N, tgt_vocab)
  std::string type_name() const override { return "EncoderDecoder"; }

  Seq2SeqConfig config;  ///< what it was built from
  std::shared_ptr<Embedding> src_emb;  ///< (src_vocab, D)
  std::shared_ptr<Embedding> tgt_emb;  ///< (tgt_vocab, D)
  std::shared_ptr<Embedding> pos_emb;  ///< (max_len, D), learned positions shared by source and target
  std::shared_ptr<ModuleList> encoder;  ///< the encoder blocks
  std::shared_ptr<ModuleList> decoder;  ///< the decoder blocks (with cross-attention)
  std::shared_ptr<LayerNorm> encoder_norm;  ///< the encoder's final norm
  std::shared_ptr<LayerNorm> decoder_norm;  ///< the decoder's final norm
  std::shared_ptr<Linear> lm_head;  ///< (tgt_vocab, D)
};

}  // namespace attnlab::nn
/// @}
