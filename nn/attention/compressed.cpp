// `compressed` (see compressed.hpp).
//
// Initialisation: the paper's code is tensor2tensor, whose conv_elems_1d compresses with a
// tf.layers conv (kernel = stride = factor, "valid") under t2t's default initializer
// "uniform_unit_scaling" (variance_scaling, fan_avg, uniform, gain 1) and a zero bias: that is
// xavier_uniform_ on the (out, in, s) weight (fans in*s and out*s, as PyTorch computes them)
// and zeros for the bias. The MHA projections keep ProjectedAttention's PyTorch Linear
// defaults.
#include "nn/attention/compressed.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "nn/attention/registry.hpp"
#include "nn/init.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {
namespace {

// A pruned layer's k_proj/v_proj keep every original head: give the Linear `rows` outputs
// (fresh PyTorch-default values; prune_heads overwrites them).
void resize_rows(Linear& l, int64_t rows) {
  Linear fresh(l.in_features, rows, l.bias.defined());
  l.out_features = rows;
  l.weight.set_data(fresh.weight);
  if (l.bias.defined()) l.bias.set_data(fresh.bias);
}

}  // namespace

StridedConv1d::StridedConv1d(int64_t in, int64_t out, int64_t s, bool has_bias) : stride(s) {
  weight = register_parameter("weight", init::xavier_uniform_(Tensor::empty({out, in, s})));  // (out, in, s)
  if (has_bias) bias = register_parameter("bias", zeros({out}));                             // (out)
}

Tensor StridedConv1d::forward(const Tensor& t) {
  const int64_t B = t.size(0), L = t.size(1), in = weight.size(1), out = weight.size(0), s = stride;
  Tensor windows = reshape(t, {B, L / s, s * in});                         // (B, L/s, s*in), row t*in + c
  Tensor w = reshape(permute(weight, {0, 2, 1}), {out, s * in});           // (out, s*in), same order
  Tensor y = matmul(windows, transpose(w, 0, 1));                          // (B, L/s, out)
  return bias.defined() ? y + bias : y;
}

VariantSchema CompressedAttention::schema() {
  VariantSchema s{"compressed",
                  "memory-compressed attention: keys/values shortened by a strided convolution (Liu et al. 2018)",
                  multihead_options(),
                  "O(B h N (M/s) (dk + dv) + B M H h (dk^2 + dv^2)) + projections O(B (N + M) D h (dk + dv))",
                  "O(B h N M/s) for the scores and probabilities, O(B M h (dk + dv)) for the convolutions"};
  using T = OptionType;
  s.options.push_back({"stride", T::Int, "4", "compression s: kernel size and stride of compress_k/compress_v", {}});
  s.options.push_back({"kv_heads", T::Int, "",
                       "heads of k_proj/v_proj and of the convolutions' inputs (default heads; set by prune_heads)",
                       {}});
  s.capabilities = Capabilities::key_summary();
  return s;
}

std::shared_ptr<Attention> CompressedAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  if (c.causal) o.reject("causal", "compressed cannot be causal: each compressed row mixes s consecutive keys");
  CompressedConfig cc;
  cc.stride = o.get_int("stride");
  if (cc.stride <= 0) o.reject("stride", "must be positive");
  cc.kv_heads = o.get_optional_int("kv_heads").value_or(c.heads);
  if (cc.kv_heads <= 0) o.reject("kv_heads", "must be positive");
  return std::make_shared<CompressedAttention>(d_model, c, cc);
}

CompressedAttention::CompressedAttention(int64_t d_model, const HeadConfig& head, const CompressedConfig& cc)
    : ProjectedAttention("compressed", d_model, head), settings(cc) {
  const int64_t h = head.heads, H = cc.kv_heads > 0 ? cc.kv_heads : h, dk = head.key_size, dv = head.value_size;
  settings.kv_heads = H;
  if (H != h) {
    resize_rows(*k_proj, H * dk);
    resize_rows(*v_proj, H * dv);
  }
  compress_k = register_module("compress_k", std::make_shared<StridedConv1d>(H * dk, h * dk, cc.stride, head.bias));
  compress_v = register_module("compress_v", std::make_shared<StridedConv1d>(H * dv, h * dv, cc.stride, head.bias));
}

AttentionResult CompressedAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                             bool /*need_weights: no probabilities over keys exist*/) {
  if (causal || config.causal)
    fail<ValueError>("compressed: causal attention is not supported (each compressed row mixes {} keys)",
                     settings.stride);
  const Tensor& c = check_inputs("compressed", d_model_, x, context, false);
  const int64_t h = config.heads, N = x.size(1), M = c.size(1), s = settings.stride;
  if (M % s != 0)
    fail<ValueError>("compressed: key length {} is not a multiple of stride={}; pad the sequence or change stride", M,
                     s);
  Tensor keys = key_mask(mask, N, M, "compressed");  // (B|1, h|1, 1, M) or undefined
  if (keys.defined() && keys.size(1) != 1)
    fail<ValueError>("compressed: the mask must be the same for every head, shaped (B|1, 1, 1, {}), got {}: the "
                     "convolutions mix the heads' keys",
                     M, to_string(mask.shape()));
  Tensor q = split_heads((*q_proj)(x), h) * (1.0 / std::sqrt(double(config.key_size)));  // (B, h, N, dk)
  Tensor k = (*k_proj)(c);                                                                // (B, M, H*dk)
  Tensor v = (*v_proj)(c);                                                                // (B, M, H*dv)
  Tensor allowed;                                                                         // (B|1, 1, 1, M/s)
  if (keys.defined()) {
    const int64_t Bk = keys.size(0);
    Tensor full = expand(keys, {Bk, 1, 1, M});    // (B|1, 1, 1, M)
    Tensor rows = reshape(full, {Bk, M, 1});      // (B|1, M, 1)
    k = where(rows, k, 0.0);
    v = where(rows, v, 0.0);
    Tensor per_window = reshape(to(full, k.dtype()), {Bk, 1, 1, M / s, s});  // (B|1, 1, 1, M/s, s)
    allowed = gt(sum(per_window, {4}), 0.0);                                   // (B|1, 1, 1, M/s)
  }
  Tensor kc = split_heads(compress_k->forward(k), h);                      // (B, h, M/s, dk)
  Tensor vc = split_heads(compress_v->forward(v), h);                      // (B, h, M/s, dv)
  Tensor p = softmax(matmul(q, transpose(kc, -2, -1)), -1, allowed);      // (B, h, N, M/s)
  Tensor o = matmul(attention_dropout(p, config.attn_dropout, is_training(), gen), vc);  // (B, h, N, dv)
  return {finish(o), Tensor()};
}

void CompressedAttention::own_options(OptionValues& v) const {
  v.set("stride", settings.stride).set("kv_heads", settings.kv_heads);
}

std::vector<HeadSlice> CompressedAttention::head_slices() const {
  // k_proj and v_proj stay whole: every head feeds the convolutions; their output channels are
  // per head.
  const int64_t dk = config.key_size, dv = config.value_size;
  return {{"out_proj.weight", dv, 1}, {"q_proj.", dk}, {"compress_k.", dk}, {"compress_v.", dv}};
}

}  // namespace attnlab::nn
