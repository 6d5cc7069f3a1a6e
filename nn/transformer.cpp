#include "nn/transformer.hpp"

#include <cstdint>
#include <unordered_map>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/registry.hpp"
#include "nn/init.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {
namespace {

// (B, N) "real token" flags -> a key mask (B, 1, 1, N) for attention.
Tensor padding_mask(const Tensor& padding, int64_t batch, int64_t n, const char* who) {
  if (!padding.defined()) return {};
  if (padding.dtype() != kBool || padding.dim() != 2 || padding.size(0) != batch || padding.size(1) != n)
    fail<ShapeError>("{}: padding must be bool ({}, {}) with true = real token, got {} {}", who, batch, n,
                     dtype_name(padding.dtype()), to_string(padding.shape()));
  return reshape(padding, {batch, 1, 1, n});
}

Tensor check_tokens(const Tensor& tokens, int64_t max_len, const char* who) {
  if (tokens.dtype() != kInt64 || tokens.dim() != 2)
    fail<ShapeError>("{}: tokens must be int64 (B, N), got {} {}", who, dtype_name(tokens.dtype()),
                     to_string(tokens.shape()));
  if (tokens.size(1) > max_len)
    fail<ValueError>("{}: sequence length {} exceeds max_len {}", who, tokens.size(1), max_len);
  return tokens;
}

// Learned positions 0..n-1 as (1, n, D).
Tensor positions(const Embedding& pos, int64_t n) { return unsqueeze(narrow(pos.weight, 0, 0, n), 0); }

// Each token's index within its segment, int64 (B, N): the number of earlier tokens of its row
// with the same segment id (packed sequences: positions restart at each segment).
Tensor segment_positions(const Tensor& segment_ids) {
  const Tensor ids = kernels::contiguous(segment_ids);  // (B, N)
  const int64_t B = ids.size(0), N = ids.size(1);
  Tensor pos = Tensor::empty({B, N}, kInt64);  // (B, N)
  const int64_t* s = ids.data<int64_t>();
  int64_t* p = pos.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    std::unordered_map<int64_t, int64_t> seen;  // id -> tokens of that id so far in this row
    for (int64_t n = 0; n < N; ++n) p[b * N + n] = seen[s[b * N + n]]++;
  }
  return pos;
}

}  // namespace

TransformerBlock::TransformerBlock(const BlockConfig& c) : config(c) {
  const int64_t hidden = c.ffn_hidden > 0 ? c.ffn_hidden : 4 * c.d_model;
  attn = register_module("attn", make_attention(c.attention, c.d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(c.d_model, c.norm_eps));
  if (!c.cross_attention.empty()) {
    cross_attn = register_module("cross_attn", make_attention(c.cross_attention, c.d_model));
    norm_cross = register_module("norm_cross", std::make_shared<LayerNorm>(c.d_model, c.norm_eps));
  }
  ffn = register_module("ffn", std::make_shared<FeedForward>(c.d_model, hidden, c.activation));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(c.d_model, c.norm_eps));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& mask, bool causal, const Tensor& memory,
                                 const Tensor& memory_mask, const Tensor& segment_ids) {
  if (memory.defined() && !cross_attn)
    fail<ValueError>("TransformerBlock: got a memory, but the block has no cross_attention");
  const bool observed = static_cast<bool>(attention_observer);
  auto self_attention = [&](const Tensor& in) {
    AttentionResult r = attn->forward_packed(in, segment_ids, mask, causal, /*need_weights=*/observed);
    if (observed) attention_observer(r);
    return r.output;  // (B, N, D)
  };
  // Every residual add that a layer norm reads at once runs fused with it (forward_residual):
  // one pass gives the sum, which the next residual add needs, and its norm.
  if (config.norm_first) {
    Tensor branch = (*dropout)(self_attention((*norm1)(x)));  // (B, N, D)
    Tensor h = x;                                              // (B, N, D)
    if (cross_attn && memory.defined()) {
      AddLayerNorm a = norm_cross->forward_residual(h, branch);  // h + branch, and its norm
      branch = (*dropout)(cross_attn->forward(a.normed, memory, memory_mask).output);
      h = a.sum;
    }
    AddLayerNorm a = norm2->forward_residual(h, branch);  // (B, N, D) twice
    return a.sum + (*dropout)((*ffn)(a.normed));
  }
  Tensor h = norm1->forward_residual(x, (*dropout)(self_attention(x))).normed;  // (B, N, D)
  if (cross_attn && memory.defined())
    h = norm_cross->forward_residual(h, (*dropout)(cross_attn->forward(h, memory, memory_mask).output)).normed;
  return norm2->forward_residual(h, (*dropout)((*ffn)(h))).normed;
}

Tensor TransformerBlock::forward_step(const Tensor& x_new, AttentionCache& cache) {
  if (cross_attn) fail<ValueError>("TransformerBlock: forward_step supports blocks without cross-attention only");
  if (config.norm_first) {
    AddLayerNorm a = norm2->forward_residual(x_new, attn->forward_step((*norm1)(x_new), cache));  // (B, T, D)
    return a.sum + (*ffn)(a.normed);
  }
  Tensor h = norm1->forward_residual(x_new, attn->forward_step(x_new, cache)).normed;  // (B, T, D)
  return norm2->forward_residual(h, (*ffn)(h)).normed;
}

Tensor l0_penalty(const Module& model) {
  Tensor total;
  for (auto& [name, m] : model.named_modules())
    if (auto a = std::dynamic_pointer_cast<Attention>(m)) {
      Tensor p = a->l0_penalty();
      total = total.defined() ? total + p : p;
    }
  return total.defined() ? total : zeros({});
}

// ---------------------------------------------------------------------------

EncoderClassifier::EncoderClassifier(const EncoderConfig& c) : config(c) {
  const int64_t D = c.block.d_model;
  if ((c.vocab_size > 0) == (c.input_dim > 0))
    fail<ValueError>("EncoderClassifier: set exactly one of vocab_size (token inputs) and input_dim (feature inputs)");
  if (c.pooling != "cls" && c.pooling != "mean")
    fail<ValueError>("EncoderClassifier: pooling must be cls or mean, got {}", c.pooling);
  if (c.vocab_size > 0) tok_emb = register_module("tok_emb", std::make_shared<Embedding>(c.vocab_size, D));
  if (c.input_dim > 0) input_proj = register_module("input_proj", std::make_shared<Linear>(c.input_dim, D));
  if (c.pooling == "cls") {
    Generator& g = default_generator();
    cls_token = register_parameter("cls_token", randn({1, 1, D}, g, kFloat32, 0, 0.02));
  }
  pos_emb = register_module("pos_emb", std::make_shared<Embedding>(c.max_len + (c.pooling == "cls"), D));
  blocks = register_module("blocks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<TransformerBlock>(c.block));
  if (c.block.norm_first) norm = register_module("norm", std::make_shared<LayerNorm>(D, c.block.norm_eps));
  head = register_module("head", std::make_shared<Linear>(D, c.num_classes));
}

Tensor EncoderClassifier::forward(const Tensor& inputs, const Tensor& padding, const Tensor& segment_ids) {
  Tensor x;
  if (tok_emb) {
    check_tokens(inputs, config.max_len, "EncoderClassifier");
    x = embedding(tok_emb->weight, inputs);  // (B, N, D)
  } else {
    if (inputs.dim() != 3 || inputs.size(2) != config.input_dim)
      fail<ShapeError>("EncoderClassifier: inputs must be (B, N, {}), got {}", config.input_dim,
                       to_string(inputs.shape()));
    if (inputs.size(1) > config.max_len)
      fail<ValueError>("EncoderClassifier: sequence length {} exceeds max_len {}", inputs.size(1), config.max_len);
    x = (*input_proj)(inputs);  // (B, N, D)
  }
  const int64_t B = x.size(0);
  check_segment_ids(segment_ids, B, x.size(1), "EncoderClassifier");
  Tensor pad = padding, seg = segment_ids;
  if (cls_token.defined()) {
    x = cat({expand(cls_token, {B, 1, -1}), x}, 1);  // (B, 1 + N, D)
    if (pad.defined()) pad = cat({ones({B, 1}, kBool), pad}, 1);
    if (seg.defined()) seg = cat({narrow(seg, 1, 0, 1), seg}, 1);  // (B, 1 + N): CLS joins the first segment
  }
  const int64_t N = x.size(1);
  x = x + positions(*pos_emb, N);
  Tensor mask = padding_mask(pad, B, N, "EncoderClassifier");
  for (const ModulePtr& m : *blocks) x = static_cast<TransformerBlock&>(*m).forward(x, mask, false, {}, {}, seg);
  if (norm) x = (*norm)(x);
  Tensor pooled;
  if (cls_token.defined()) {
    pooled = select(x, 1, 0);  // (B, D)
  } else if (pad.defined()) {
    Tensor w = unsqueeze(to(pad, x.dtype()), -1);                           // (B, N, 1)
    pooled = sum(x * w, {1}) / clamp_min(sum(w, {1}), 1.0);                 // (B, D)
  } else {
    pooled = mean(x, {1});  // (B, D)
  }
  return (*head)(pooled);  // (B, classes)
}

// ---------------------------------------------------------------------------

CausalLM::CausalLM(const LMConfig& c) : config(c) {
  if (c.positions != "learned" && c.positions != "none")
    fail<ValueError>("CausalLM: positions must be learned or none, got '{}'", c.positions);
  const int64_t D = c.block.d_model;
  tok_emb = register_module("tok_emb", std::make_shared<Embedding>(c.vocab_size, D));
  if (learned_positions()) pos_emb = register_module("pos_emb", std::make_shared<Embedding>(c.max_len, D));
  blocks = register_module("blocks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<TransformerBlock>(c.block));
  norm = register_module("norm", std::make_shared<LayerNorm>(D, c.block.norm_eps));
  lm_head = register_module("lm_head", std::make_shared<Linear>(D, c.vocab_size, !c.tie_weights));
  // GPT-2's embedding init, N(0, 0.02^2): a small residual stream at the start lets the blocks'
  // outputs steer it early, which trains language models much faster than N(0, 1).
  init::normal_(tok_emb->weight, 0.0, 0.02);
  if (pos_emb) init::normal_(pos_emb->weight, 0.0, 0.02);
  if (c.tie_weights) lm_head->weight.set_data(tok_emb->weight);
}

Tensor CausalLM::forward(const Tensor& tokens, const Tensor& segment_ids) {
  check_tokens(tokens, learned_positions() ? config.max_len : INT64_MAX, "CausalLM");
  check_segment_ids(segment_ids, tokens.size(0), tokens.size(1), "CausalLM");
  Tensor x = embedding(tok_emb->weight, tokens);  // (B, N, D)
  if (pos_emb && segment_ids.defined())
    x = x + embedding(pos_emb->weight, segment_positions(segment_ids));  // (B, N, D): restarting at each segment
  else if (pos_emb)
    x = x + positions(*pos_emb, tokens.size(1));  // (B, N, D)
  for (const ModulePtr& m : *blocks) x = static_cast<TransformerBlock&>(*m).forward(x, {}, true, {}, {}, segment_ids);
  x = (*norm)(x);
  if (config.tie_weights) return matmul(x, transpose(tok_emb->weight, 0, 1));  // (B, N, V)
  return (*lm_head)(x);                                                    // (B, N, V)
}

LMCache CausalLM::make_cache(int64_t batch) const {
  if (batch <= 0) fail<ValueError>("CausalLM: make_cache: batch must be positive, got {}", batch);
  LMCache c;
  c.batch = batch;
  for (const ModulePtr& m : *blocks)
    c.layers.push_back(static_cast<const TransformerBlock&>(*m).attn->make_cache(batch, config.max_len));
  return c;
}

Tensor CausalLM::forward_step(const Tensor& tokens_new, LMCache& cache) {
  const int64_t bound = learned_positions() ? config.max_len : INT64_MAX;
  check_tokens(tokens_new, bound, "CausalLM");
  if (is_training()) fail<ValueError>("CausalLM: forward_step is for inference; call eval() first");
  const int64_t B = tokens_new.size(0), T = tokens_new.size(1);
  if (B != cache.batch) fail<ShapeError>("CausalLM: forward_step: batch {} but the cache was made for {}", B, cache.batch);
  // Without learned positions the layers' caches bound the length themselves (mha's at max_len;
  // local's window and the recurrent states never).
  if (cache.length + T > bound)
    fail<ValueError>("CausalLM: forward_step: {} tokens exceed max_len {}", cache.length + T, config.max_len);
  NoGradGuard no_grad;
  Tensor x = embedding(tok_emb->weight, tokens_new);                                      // (B, T, D)
  if (pos_emb) x = x + unsqueeze(narrow(pos_emb->weight, 0, cache.length, T), 0);         // (B, T, D)
  size_t i = 0;
  for (const ModulePtr& m : *blocks) x = static_cast<TransformerBlock&>(*m).forward_step(x, *cache.layers[i++]);
  cache.length += T;
  x = (*norm)(x);
  if (config.tie_weights) return matmul(x, transpose(tok_emb->weight, 0, 1));  // (B, T, V)
  return (*lm_head)(x);                                                    // (B, T, V)
}

// ---------------------------------------------------------------------------

EncoderDecoder::EncoderDecoder(const Seq2SeqConfig& c) : config(c) {
  const int64_t D = c.block.d_model;
  src_emb = register_module("src_emb", std::make_shared<Embedding>(c.src_vocab, D));
  tgt_emb = register_module("tgt_emb", std::make_shared<Embedding>(c.tgt_vocab, D));
  pos_emb = register_module("pos_emb", std::make_shared<Embedding>(c.max_len, D));
  encoder = register_module("encoder", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.encoder_layers; ++i) encoder->push_back(std::make_shared<TransformerBlock>(c.block));
  BlockConfig dec = c.block;
  dec.cross_attention = c.cross_attention;
  decoder = register_module("decoder", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.decoder_layers; ++i) decoder->push_back(std::make_shared<TransformerBlock>(dec));
  encoder_norm = register_module("encoder_norm", std::make_shared<LayerNorm>(D, c.block.norm_eps));
  decoder_norm = register_module("decoder_norm", std::make_shared<LayerNorm>(D, c.block.norm_eps));
  lm_head = register_module("lm_head", std::make_shared<Linear>(D, c.tgt_vocab));
}

Tensor EncoderDecoder::encode(const Tensor& src, const Tensor& src_padding) {
  check_tokens(src, config.max_len, "EncoderDecoder");
  Tensor x = embedding(src_emb->weight, src) + positions(*pos_emb, src.size(1));  // (B, M, D)
  Tensor mask = padding_mask(src_padding, src.size(0), src.size(1), "EncoderDecoder");
  for (const ModulePtr& m : *encoder) x = static_cast<TransformerBlock&>(*m).forward(x, mask);
  return (*encoder_norm)(x);
}

Tensor EncoderDecoder::decode(const Tensor& tgt, const Tensor& memory, const Tensor& src_padding) {
  check_tokens(tgt, config.max_len, "EncoderDecoder");
  Tensor x = embedding(tgt_emb->weight, tgt) + positions(*pos_emb, tgt.size(1));  // (B, N, D)
  Tensor mmask = padding_mask(src_padding, memory.size(0), memory.size(1), "EncoderDecoder");
  for (const ModulePtr& m : *decoder) x = static_cast<TransformerBlock&>(*m).forward(x, {}, true, memory, mmask);
  return (*lm_head)((*decoder_norm)(x));  // (B, N, tgt_vocab)
}

Tensor EncoderDecoder::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_padding) {
  return decode(tgt, encode(src, src_padding), src_padding);
}

}  // namespace attnlab::nn
