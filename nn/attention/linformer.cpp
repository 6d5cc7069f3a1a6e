// `linformer` (see linformer.hpp).
//
// Initialisation: proj_k and proj_v as the authors' fairseq code (examples/linformer,
// MultiheadLinearAttention.reset_parameters: compress_k/compress_v, nn.Linear(max_seq_len,
// compressed_len) weights of shape (k, L)) does with q/k/v of equal size:
// xavier_uniform_(gain = 1/sqrt(2)), i.e. U(-a, a) with a = sqrt(6 / (k + L)) / sqrt(2).
// The MHA projections keep ProjectedAttention's PyTorch Linear defaults.
#include "nn/attention/linformer.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "nn/init.hpp"

namespace attnlab::nn {
VariantSchema Linformer::schema() {
  VariantSchema s{"linformer",
                  "keys and values projected to k rows along the sequence (Wang et al. 2020, Linformer)",
                  multihead_options(),
                  "O(B h k M (dk + dv) + B h N k (dk + dv)) + projections O(B (N + M) D h (dk + dv))",
                  "O(B h N k) for the scores and probabilities, O(B h k (dk + dv)) projected keys/values"};
  using T = OptionType;
  s.options.push_back({"proj_len", T::Int, "64", "projected length k", {}});
  s.options.push_back({"max_len", T::Int, "512", "longest key sequence L (proj_k is (k, L))", {}});
  s.options.push_back({"share", T::Choice, "none", "kv: proj_k projects the values too (no proj_v)", {"none", "kv"}});
  s.capabilities = Capabilities::key_summary();
  return s;
}

std::shared_ptr<Attention> Linformer::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  if (c.causal) o.reject("causal", "linformer cannot be causal: every projected row mixes the whole key sequence");
  LinformerConfig l;
  l.proj_len = o.get_int("proj_len");
  l.max_len = o.get_int("max_len");
  l.share_kv = o.get_choice("share") == "kv";
  if (l.proj_len <= 0) o.reject("proj_len", "must be positive");
  if (l.max_len <= 0) o.reject("max_len", "must be positive");
  return std::make_shared<Linformer>(d_model, c, l);
}

Linformer::Linformer(int64_t d_model, const HeadConfig& head, const LinformerConfig& l)
    : ProjectedAttention("linformer", d_model, head), settings(l) {
  const double gain = 1.0 / std::sqrt(2.0);
  proj_k = register_parameter("proj_k", init::xavier_uniform_(Tensor::empty({l.proj_len, l.max_len}), gain));
  if (!l.share_kv)
    proj_v = register_parameter("proj_v", init::xavier_uniform_(Tensor::empty({l.proj_len, l.max_len}), gain));
}

AttentionResult Linformer::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                   bool /*need_weights: no probabilities over keys exist*/) {
  if (causal || config.causal)
    fail<ValueError>("linformer: causal attention is not supported (every projected row mixes all keys)");
  const Tensor& c = check_inputs("linformer", d_model_, x, context, false);
  const int64_t N = x.size(1), M = c.size(1);
  if (M > settings.max_len)
    fail<ValueError>("linformer: key length {} exceeds max_len={} (proj_k is ({}, {})); raise option max_len", M,
                     settings.max_len, settings.proj_len, settings.max_len);
  Tensor keys = key_mask(mask, N, M, "linformer");  // (B|1, h|1, 1, M) or undefined
  Heads hd = project(x, c);
  Tensor q = hd.q * (1.0 / std::sqrt(double(config.key_size)));  // (B, h, N, dk)
  Tensor k = hd.k, v = hd.v;                                      // (B, h, M, dk), (B, h, M, dv)
  if (keys.defined()) {
    Tensor rows = transpose(expand(keys, {-1, -1, 1, M}), -2, -1);  // (B|1, h|1, M, 1)
    k = where(rows, k, 0.0);
    v = where(rows, v, 0.0);
  }
  Tensor ek = narrow(proj_k, 1, 0, M);                               // (k, M)
  Tensor ev = settings.share_kv ? ek : narrow(proj_v, 1, 0, M);      // (k, M)
  Tensor kp = matmul(ek, k);                                         // (B, h, k, dk)
  Tensor vp = matmul(ev, v);                                         // (B, h, k, dv)
  Tensor p = softmax(matmul(q, transpose(kp, -2, -1)), -1);          // (B, h, N, k)
  Tensor o = matmul(attention_dropout(p, config.attn_dropout, is_training(), gen), vp);  // (B, h, N, dv)
  return {finish(o), Tensor()};
}

void Linformer::own_options(OptionValues& v) const {
  v.set("proj_len", settings.proj_len).set("max_len", settings.max_len).set("share", settings.share_kv ? "kv" : "none");
}

}  // namespace attnlab::nn
