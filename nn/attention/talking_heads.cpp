#include "nn/attention/talking_heads.hpp"

#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/mha.hpp"  // head_scale
#include "nn/init.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

VariantSchema TalkingHeadsAttention::schema() {
  using T = OptionType;
  VariantSchema s{"talking_heads", "talking-heads attention: learned mixes across heads (Shazeer et al. 2020)",
                  multihead_options(),
                  "O(B hk N M dk + B N M (hk h + h hv) + B hv N M dv)",
                  "O(B (hk + h + hv) N M)"};
  s.options[0].doc = "number of softmax heads h";
  s.options.insert(s.options.begin() + 1,
                   {{"logit_heads", T::Int, "", "heads hk of the q/k projections and logits (default h)", {}},
                    {"value_heads", T::Int, "", "heads hv of the value projection and gates (default h)", {}}});
  // after key_size and value_size (at 3 and 4 once logit_heads and value_heads are in)
  s.options.insert(s.options.begin() + 5,
                   {{"pre", T::Bool, "true", "learned pre-softmax mix pre_mix (hk, h); false needs hk = h", {}},
                    {"post", T::Bool, "true", "learned post-softmax mix post_mix (h, hv); false needs hv = h", {}},
                    {"mix_init", T::Choice, "identity",
                     "identity: square mixes start as the identity (the layer as mha); random: normal(0, 1/sqrt(rows))",
                     {"identity", "random"}}});
  s.capabilities = Capabilities::all();
  return s;
}

std::shared_ptr<Attention> TalkingHeadsAttention::make(const Options& o, int64_t d_model) {
  TalkingHeadsConfig c;
  // dk and dv default to D/h with h the softmax heads (docs/attention.md), not hk or hv.
  c.head = read_head_config(o, d_model, o.get_int("heads"));
  auto heads = [&](const char* name) {
    int64_t v = o.get_optional_int(name).value_or(c.head.heads);
    if (v <= 0) o.reject(name, "must be positive");
    return v;
  };
  c.logit_heads = heads("logit_heads");
  c.value_heads = heads("value_heads");
  c.pre = o.get_bool("pre");
  c.post = o.get_bool("post");
  c.mix_init = o.get_choice("mix_init");
  return std::make_shared<TalkingHeadsAttention>(d_model, c);
}

namespace {

// A mixing matrix (rows, cols): with `identity` init the identity when square, so a fresh layer
// starts as plain multi-head attention; otherwise normal(0, 1/sqrt(rows)), which keeps the mixed
// logits' variance that of one head's.
Tensor init_mix(int64_t rows, int64_t cols, bool identity) {
  if (identity && rows == cols) return eye(rows);
  Tensor w = empty({rows, cols});
  init::normal_(w, 0.0, 1.0 / std::sqrt(double(rows)));
  return w;
}

}  // namespace

TalkingHeadsAttention::TalkingHeadsAttention(int64_t d_model, const TalkingHeadsConfig& c)
    : config(c), gen(default_generator().next_u64()) {
  register_generator("generator", gen);  // attention dropout: saved in checkpoints
  d_model_ = d_model;
  const int64_t h = c.head.heads, hk = c.logit_heads, hv = c.value_heads;
  const int64_t dk = c.head.key_size, dv = c.head.value_size;
  if (h <= 0 || hk <= 0 || hv <= 0 || dk <= 0 || dv <= 0 || d_model <= 0)
    fail<ValueError>("talking_heads: heads={}, logit_heads={}, value_heads={}, key_size={}, value_size={} and "
                     "d_model={} must all be positive",
                     h, hk, hv, dk, dv, d_model);
  if (!c.pre && hk != h)
    fail<ValueError>("talking_heads: pre=false needs logit_heads == heads (the logits are the softmax heads), got "
                     "logit_heads={} and heads={}; set logit_heads={} or pre=true",
                     hk, h, h);
  if (!c.post && hv != h)
    fail<ValueError>("talking_heads: post=false needs value_heads == heads (the softmax heads weight the values), got "
                     "value_heads={} and heads={}; set value_heads={} or post=true",
                     hv, h, h);
  if (c.mix_init != "identity" && c.mix_init != "random")
    fail<ValueError>("talking_heads: option mix_init={}: expected one of identity, random", c.mix_init);
  const bool identity = c.mix_init == "identity";
  const bool bias = c.head.bias;
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, hk * dk, bias));
  k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, hk * dk, bias));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, hv * dv, bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(hv * dv, d_model, bias));
  if (c.pre) pre_mix = register_parameter("pre_mix", init_mix(hk, h, identity));     // (hk, h)
  if (c.post) post_mix = register_parameter("post_mix", init_mix(h, hv, identity));  // (h, hv)
  if (c.head.gate.kind == "hard_concrete")
    gate = register_module("gate", std::make_shared<HardConcreteGate>(hv, c.head.gate));
  head_mask = register_buffer("head_mask", ones({hv}));
}

AttentionResult TalkingHeadsAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                               bool need_weights) {
  const bool is_causal = causal || config.head.causal;
  const Tensor& c = check_inputs("talking_heads", d_model_, x, context, is_causal);
  const int64_t N = x.size(1), M = c.size(1);
  const double scale = 1.0 / std::sqrt(double(config.head.key_size));
  Tensor q = split_heads((*q_proj)(x), config.logit_heads) * scale;  // (B, hk, N, dk)
  Tensor k = split_heads((*k_proj)(c), config.logit_heads);          // (B, hk, M, dk)
  Tensor v = split_heads((*v_proj)(c), config.value_heads);          // (B, hv, M, dv)
  Tensor logits = matmul(q, transpose(k, -2, -1));                    // J: (B, hk, N, M)
  // The mask goes on after the pre mix: a -inf in J would leak into every softmax head.
  if (config.pre) logits = einsum("banm,aj->bjnm", {logits, pre_mix});           // L: (B, h, N, M)
  Tensor w = softmax(logits, -1, allowed_mask(mask, N, M, is_causal, "talking_heads"));  // W: (B, h, N, M)
  Tensor u = attention_dropout(w, config.head.attn_dropout, is_training(), gen);         // (B, h, N, M)
  if (config.post) u = einsum("bjnm,jv->bvnm", {u, post_mix});                            // U: (B, hv, N, M)
  Tensor o = matmul(u, v);                                                                // (B, hv, N, dv)
  o = o * head_scale(gate, head_mask);                                                    // (B, hv, N, dv)
  return {(*out_proj)(merge_heads(o)), need_weights ? w : Tensor()};                     // (B, N, D)
}

std::unique_ptr<AttentionCache> TalkingHeadsAttention::make_cache(int64_t batch, int64_t max_len) const {
  return make_kv_cache(this, batch, max_len, config.logit_heads, config.head.key_size, config.value_heads,
                       config.head.value_size, q_proj->weight.dtype());
}

// forward's steps on the T new query rows against every cached key: the pre mix combines the
// logit heads of one (n, m) entry and the post mix the softmax heads of one entry, so rows of
// earlier positions are never needed again.
Tensor TalkingHeadsAttention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  KVCache& c = step_cache<KVCache>(cache, "talking_heads");
  check_step("talking_heads", d_model_, x_new, c.v.size(0), c.length, c.v.size(2));
  NoGradGuard no_grad;
  const int64_t T = x_new.size(1), L = c.length + T;
  const double scale = 1.0 / std::sqrt(double(config.head.key_size));
  Tensor q = split_heads((*q_proj)(x_new), config.logit_heads) * scale;             // (B, hk, T, dk)
  write_rows(c.k, 2, c.length, split_heads((*k_proj)(x_new), config.logit_heads));  // rows [length, L)
  write_rows(c.v, 2, c.length, split_heads((*v_proj)(x_new), config.value_heads));
  Tensor k = narrow(c.k, 2, 0, L), v = narrow(c.v, 2, 0, L);                        // (B, hk|hv, L, dk|dv)
  Tensor logits = matmul(q, transpose(k, -2, -1));                                  // J: (B, hk, T, L)
  if (config.pre) logits = einsum("banm,aj->bjnm", {logits, pre_mix});               // L: (B, h, T, L)
  Tensor u = softmax(logits, -1, step_causal_mask(T, c.length));                    // W: (B, h, T, L)
  if (config.post) u = einsum("bjnm,jv->bvnm", {u, post_mix});                      // U: (B, hv, T, L)
  Tensor o = matmul(u, v) * head_scale(gate, head_mask);                            // (B, hv, T, dv)
  c.length = L;
  return (*out_proj)(merge_heads(o));  // (B, T, D)
}

std::string TalkingHeadsAttention::spec() const {
  const VariantSchema s = schema();
  OptionValues v;
  set_head_options(v, config.head, s);
  v.set("logit_heads", config.logit_heads).set("value_heads", config.value_heads).set("pre", config.pre);
  v.set("post", config.post).set("mix_init", config.mix_init);
  return format_spec(s, v);
}

std::shared_ptr<Attention> TalkingHeadsAttention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.value_heads, "talking_heads");
  // Every size is already resolved in `config` (dk, dv from D/h, hk from h), so the new layer
  // keeps them; only hv shrinks, which needs a post mix unless the identity already selected.
  TalkingHeadsConfig c = config;
  c.value_heads = static_cast<int64_t>(keep.size());
  c.post = true;
  auto out = std::make_shared<TalkingHeadsAttention>(d_model_, c);
  const int64_t dv = config.head.value_size;
  // post=false means U = W, i.e. post_mix = I (h = hv): keep its columns.
  const Tensor post = config.post ? post_mix : eye(config.head.heads, q_proj->weight.dtype());
  copy_pruned_state(*this, *out, keep, {{"v_proj.", dv}, {"out_proj.weight", dv, 1}, {"post_mix", 1, 1}},
                    "talking_heads", [&](const std::string& name, const Tensor& from, const Tensor&) {
                      return name == "post_mix" ? take_heads(post, keep, 1, 1) : from;
                    });
  return out;
}

}  // namespace attnlab::nn
