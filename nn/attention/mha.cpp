#include "nn/attention/mha.hpp"

#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

VariantSchema MultiHeadAttention::schema() {
  VariantSchema s{"mha", "scaled dot-product multi-head attention (Vaswani et al. 2017; Bhojanapalli et al. 2020)",
                  multihead_options(),
                  "O(B h N M (dk + dv)) + projections O(B (N + M) D h (dk + dv))",
                  "O(B h N M) for the scores and probabilities"};
  s.options.insert(s.options.begin() + 4,
                   {"key_bias", OptionType::Bool, "", "k_proj.bias exists (default = bias); it cannot change the output", {}});
  return s;
}

std::shared_ptr<Attention> MultiHeadAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  const bool key_bias = o.given("key_bias") ? o.get_bool("key_bias") : c.bias;
  return std::make_shared<MultiHeadAttention>(d_model, c, key_bias);
}

MultiHeadAttention::MultiHeadAttention(int64_t d_model, const HeadConfig& c, bool kb)
    : config(c), key_bias(kb), gen(default_generator().next_u64()) {
  register_generator("generator", gen);  // attention dropout: saved in checkpoints
  d_model_ = d_model;
  const int64_t h = c.heads;
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, h * c.key_size, c.bias));
  k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, h * c.key_size, c.bias && kb));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, h * c.value_size, c.bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(h * c.value_size, d_model, c.bias));
  if (c.gate.kind == "hard_concrete") gate = register_module("gate", std::make_shared<HardConcreteGate>(h, c.gate));
  head_mask = register_buffer("head_mask", ones({h}));
}

Tensor head_scale(const std::shared_ptr<HardConcreteGate>& gate, const Tensor& head_mask) {
  Tensor s = gate ? gate->forward() * head_mask : head_mask;  // (h)
  return reshape(s, {1, -1, 1, 1});                          // (1, h, 1, 1)
}

AttentionResult MultiHeadAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                            bool need_weights) {
  const bool is_causal = causal || config.causal;
  const Tensor& c = check_inputs("mha", d_model_, x, context, is_causal);
  const int64_t h = config.heads, N = x.size(1), M = c.size(1);
  const double scale = 1.0 / std::sqrt(double(config.key_size));
  if (!need_weights) {
    // The fused path: tiled online-softmax attention, no (N, M) matrix in memory; backward
    // recomputes the probabilities from the saved row log-sum-exps. The composed path below
    // (the readable twin, and the one that can return the probabilities) is what tests check
    // it against.
    check_mask(mask, N, M, "mha");
    TilePattern pattern = dense_tile_pattern(N, M, is_causal, mask);
    TileOptions options;
    options.scale = scale;
    if (is_training() && config.attn_dropout > 0) options.dropout = config.attn_dropout, options.seed = gen.next_u64();
    Tensor q = split_heads((*q_proj)(x), h), k = split_heads((*k_proj)(c), h), v = split_heads((*v_proj)(c), h);
    Tensor o = tile_attention(q, k, v, pattern, options).out * head_scale(gate, head_mask);  // (B, h, N, dv)
    return {(*out_proj)(merge_heads(o)), Tensor()};
  }
  Tensor q = split_heads((*q_proj)(x), h) * scale;  // (B, h, N, dk), scaled once here
  Tensor k = split_heads((*k_proj)(c), h);          // (B, h, M, dk)
  Tensor v = split_heads((*v_proj)(c), h);          // (B, h, M, dv)
  Tensor scores = matmul(q, transpose(k, -2, -1));  // (B, h, N, M)
  Tensor p = softmax(scores, -1, allowed_mask(mask, N, M, is_causal, "mha"));  // (B, h, N, M)
  Tensor o = matmul(attention_dropout(p, config.attn_dropout, is_training(), gen), v);  // (B, h, N, dv)
  o = o * head_scale(gate, head_mask);              // (B, h, N, dv)
  return {(*out_proj)(merge_heads(o)), need_weights ? p : Tensor()};  // (B, N, D)
}

std::unique_ptr<AttentionCache> MultiHeadAttention::make_cache(int64_t batch, int64_t max_len) const {
  return make_kv_cache(this, batch, max_len, config.heads, config.key_size, config.heads, config.value_size,
                       q_proj->weight.dtype());
}

Tensor MultiHeadAttention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  KVCache& c = step_cache<KVCache>(cache, "mha");
  check_step("mha", d_model_, x_new, c.v.size(0), c.length, c.v.size(2));
  NoGradGuard no_grad;
  const int64_t h = config.heads, T = x_new.size(1), L = c.length + T;
  const double scale = 1.0 / std::sqrt(double(config.key_size));
  Tensor q = split_heads((*q_proj)(x_new), h) * scale;               // (B, h, T, dk)
  write_rows(c.k, 2, c.length, split_heads((*k_proj)(x_new), h));    // rows [length, L)
  write_rows(c.v, 2, c.length, split_heads((*v_proj)(x_new), h));
  Tensor k = narrow(c.k, 2, 0, L), v = narrow(c.v, 2, 0, L);         // (B, h, L, dk|dv)
  Tensor p = softmax(matmul(q, transpose(k, -2, -1)), -1, step_causal_mask(T, c.length));  // (B, h, T, L)
  Tensor o = matmul(p, v) * head_scale(gate, head_mask);             // (B, h, T, dv)
  c.length = L;
  return (*out_proj)(merge_heads(o));  // (B, T, D)
}

std::string MultiHeadAttention::spec() const {
  const HeadConfig& c = config;
  std::string s = fmt::format("mha(heads={}, key_size={}, value_size={}, bias={}, key_bias={}, causal={}, attn_dropout={}",
                              c.heads, c.key_size, c.value_size, c.bias, key_bias, c.causal, c.attn_dropout);
  if (c.gate.kind != "none")
    s += fmt::format(", gate={}, gate_init={}, gate_temperature={}, gate_gamma={}, gate_zeta={}, gate_hard={}",
                     c.gate.kind, c.gate.init, c.gate.temperature, c.gate.gamma, c.gate.zeta, c.gate.hard);
  return s + ")";
}

std::shared_ptr<Attention> MultiHeadAttention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.heads, "mha");
  HeadConfig c = config;
  c.heads = static_cast<int64_t>(keep.size());
  auto out = std::make_shared<MultiHeadAttention>(d_model_, c, key_bias);
  out->to(q_proj->weight.dtype());
  NoGradGuard no_grad;
  const int64_t dk = config.key_size, dv = config.value_size;
  auto copy_rows = [&](const std::shared_ptr<Linear>& from, const std::shared_ptr<Linear>& to, int64_t d) {
    kernels::copy_(to->weight, take_heads(from->weight, keep, d, 0));
    if (from->bias.defined()) kernels::copy_(to->bias, take_heads(from->bias, keep, d, 0));
  };
  copy_rows(q_proj, out->q_proj, dk);
  copy_rows(k_proj, out->k_proj, dk);
  copy_rows(v_proj, out->v_proj, dv);
  kernels::copy_(out->out_proj->weight, take_heads(out_proj->weight, keep, dv, 1));
  if (out_proj->bias.defined()) kernels::copy_(out->out_proj->bias, out_proj->bias);
  kernels::copy_(out->head_mask, take_heads(head_mask, keep, 1, 0));
  if (gate) kernels::copy_(out->gate->log_alpha, take_heads(gate->log_alpha, keep, 1, 0));
  out->train(is_training());
  return out;
}

}  // namespace attnlab::nn
