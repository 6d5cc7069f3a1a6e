// `mixer` (see mixer.hpp). The token MLP runs as two Linear-shaped products on x transposed to
// (B, D, N), i.e. on every channel at once, so each weight gradient is one folded gemm.
//
// Choices the papers leave open (docs/attention.md, `mixer`): initialisation as PyTorch's
// Linear (fan-in L for w1, hm for w2); `bias=false` removes both biases; prune_heads is an
// error (no heads); l0_penalty() is 0; there is no head_mask.
#include "nn/attention/mixer.hpp"

#include "autograd/ops.hpp"
#include "nn/attention/fnet.hpp"

namespace attnlab::nn {

TokenMlp::TokenMlp(int64_t max_len, int64_t hidden, bool bias) {
  w1 = register_module("w1", std::make_shared<Linear>(max_len, hidden, bias));  // weight (hm, L)
  w2 = register_module("w2", std::make_shared<Linear>(hidden, max_len, bias));  // weight (L, hm)
}

VariantSchema Mixer::schema() {
  using T = OptionType;
  return {"mixer",
          "attention-free token-mixing MLP, tanh GELU (Tolstikhin et al. 2021, MLP-Mixer)",
          {{"max_len", T::Int, "512", "longest sequence L (N <= L)", {}},
           {"hidden", T::Int, "256", "hidden width hm of the token MLP", {}},
           {"bias", T::Bool, "true", "token_mlp.w1.bias and token_mlp.w2.bias exist", {}},
           {"causal", T::Bool, "false", "must be false: mixer is not causal", {}}},
          "O(B N D hm)",
          "O(B D hm) activations kept for backward + O(L hm) parameters",
          Capabilities::none()};
}

std::shared_ptr<Attention> Mixer::make(const Options& o, int64_t d_model) {
  if (o.get_bool("causal")) o.reject("causal", "mixer is not causal: the token MLP mixes every position with every other");
  const int64_t L = o.get_int("max_len"), hm = o.get_int("hidden");
  if (L <= 0) o.reject("max_len", "must be positive");
  if (hm <= 0) o.reject("hidden", "must be positive");
  return std::make_shared<Mixer>(d_model, L, hm, o.get_bool("bias"));
}

Mixer::Mixer(int64_t d_model, int64_t L, int64_t hm, bool b) : max_len(L), hidden(hm), bias(b) {
  if (d_model <= 0) fail<ValueError>("mixer: d_model must be positive, got {}", d_model);
  if (L <= 0 || hm <= 0) fail<ValueError>("mixer: max_len and hidden must be positive, got {} and {}", L, hm);
  d_model_ = d_model;
  token_mlp = register_module("token_mlp", std::make_shared<TokenMlp>(L, hm, b));
}

AttentionResult Mixer::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal, bool) {
  check_attention_free("mixer", d_model_, x, context, mask, causal);
  const int64_t N = x.size(1);
  if (N > max_len)
    fail<ShapeError>("mixer: sequence length N={} exceeds max_len={}; build the layer with max_len >= {}", N, max_len,
                     N);
  const Linear &w1 = *token_mlp->w1, &w2 = *token_mlp->w2;
  Tensor xt = transpose(x, 1, 2);                                   // (B, D, N)
  Tensor hid = matmul(xt, transpose(narrow(w1.weight, 1, 0, N), 0, 1));  // (B, D, hm)
  if (w1.bias.defined()) hid = hid + w1.bias;
  hid = gelu(hid, "tanh");
  Tensor y = matmul(hid, transpose(narrow(w2.weight, 0, 0, N), 0, 1));  // (B, D, N)
  if (w2.bias.defined()) y = y + narrow(w2.bias, 0, 0, N);
  return {contiguous(transpose(y, 1, 2)), Tensor()};  // (B, N, D)
}

std::shared_ptr<Attention> Mixer::prune_heads(const std::vector<int64_t>&) const {
  fail<ValueError>("mixer: prune_heads: mixer is attention-free and has no heads to prune");
}

std::string Mixer::spec() const {
  return format_spec(schema(), OptionValues().set("max_len", max_len).set("hidden", hidden).set("bias", bias));
}

}  // namespace attnlab::nn
