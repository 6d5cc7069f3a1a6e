// `collaborative` heads and the mha -> collaborative conversion (Cordonnier, Loukas, Jaggi
// 2020; docs/attention.md, "collaborative"). The layer follows the paper's reference code
// (epfml/collaborative-attention): shared bias-free query/key projections, a mixing matrix,
// a bias-free `content_bias` Linear (D -> h) on the keys' sequence, and the scale applied to
// the sum of both terms.
#include "nn/attention/collaborative.hpp"

#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {
namespace {

constexpr const char* kName = "collaborative";

// mixing[i, r] = 1 iff r is in head i's block of Dk~/h shared dimensions.
Tensor concatenate_layout(int64_t heads, int64_t shared_key_size) {
  const int64_t block = shared_key_size / heads;
  std::vector<float> m(heads * shared_key_size, 0.0f);
  for (int64_t i = 0; i < heads; ++i)
    for (int64_t r = i * block; r < (i + 1) * block; ++r) m[i * shared_key_size + r] = 1.0f;
  return from_vector(m, {heads, shared_key_size});  // (h, Dk~)
}

}  // namespace

VariantSchema CollaborativeAttention::schema() {
  using T = OptionType;
  VariantSchema s{kName, "collaborative heads sharing one query/key projection (Cordonnier, Loukas, Jaggi 2020)", {},
                  "O(B N M Dk~ h + B h N M dv)",
                  "O(B h N M + B h N Dk~)"};
  // The common options without key_size: the keys are shared, so only Dk~ is a key size.
  for (OptionSchema o : multihead_options()) {
    if (o.name == "key_size") continue;
    s.options.push_back(o);
    if (o.name == "heads")
      s.options.push_back({"shared_key_size", T::Int, "", "shared query/key size Dk~ (default D)", {}});
    if (o.name == "causal") {
      s.options.push_back({"mixing_init",
                           T::Choice,
                           "random",
                           "initial mixing: concatenate = head blocks of ones, random = normal(0, 0.2)",
                           {"concatenate", "ones", "random"}});
      s.options.push_back({"scale", T::Double, "", "score scale (default 1/sqrt(Dk~/h))", {}});
    }
  }
  s.capabilities = Capabilities::all();
  return s;
}

std::shared_ptr<Attention> CollaborativeAttention::make(const Options& o, int64_t d_model) {
  CollaborativeConfig c;
  c.head = read_head_config(o, d_model, o.get_int("heads"));  // key_size = 0: the schema has none
  const HeadConfig& hc = c.head;
  c.shared_key_size = o.get_optional_int("shared_key_size").value_or(d_model);
  if (c.shared_key_size <= 0) o.reject("shared_key_size", "must be positive");
  c.mixing_init = o.get_choice("mixing_init");
  if (c.mixing_init == "concatenate" && c.shared_key_size % hc.heads != 0)
    o.reject("mixing_init", fmt::format("concatenate needs shared_key_size divisible by heads, got shared_key_size={} "
                                        "and heads={}",
                                        c.shared_key_size, hc.heads));
  if (o.given("scale")) {
    c.scale = o.get_double("scale");
    if (!(std::isfinite(c.scale) && c.scale > 0)) o.reject("scale", "must be a positive finite number");
  } else {
    c.scale = 1.0 / std::sqrt(double(c.shared_key_size) / double(hc.heads));
  }
  return std::make_shared<CollaborativeAttention>(d_model, c);
}

CollaborativeAttention::CollaborativeAttention(int64_t d_model, const CollaborativeConfig& c)
    : config(c), gen(default_generator().next_u64()) {
  register_generator("generator", gen);  // attention dropout: saved in checkpoints
  d_model_ = d_model;
  const int64_t h = c.head.heads, dks = c.shared_key_size, dv = c.head.value_size;
  if (d_model <= 0 || h <= 0 || dks <= 0 || dv <= 0)
    fail<ValueError>("{}: d_model, heads, shared_key_size and value_size must be positive, got {}, {}, {}, {}", kName,
                     d_model, h, dks, dv);
  if (!(std::isfinite(c.scale) && c.scale > 0))
    fail<ValueError>("{}: scale must be a positive finite number, got {}", kName, c.scale);
  Tensor mix;
  if (c.mixing_init == "concatenate") {
    if (dks % h != 0)
      fail<ValueError>(
          "{}: mixing_init=concatenate needs shared_key_size divisible by heads, got shared_key_size={} "
          "and heads={}",
          kName, dks, h);
    mix = concatenate_layout(h, dks);
  } else if (c.mixing_init == "ones") {
    mix = ones({h, dks});
  } else if (c.mixing_init == "random") {
    mix = randn({h, dks}, default_generator(), kFloat32, 0.0, 0.2);  // the reference code's std
  } else {
    fail<ValueError>("{}: mixing_init={}: expected one of concatenate, ones, random", kName, c.mixing_init);
  }
  mixing = register_parameter("mixing", mix);
  q_shared = register_module("q_shared", std::make_shared<Linear>(d_model, dks, false));
  k_shared = register_module("k_shared", std::make_shared<Linear>(d_model, dks, false));
  content_bias = register_module("content_bias", std::make_shared<Linear>(d_model, h, false));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, h * dv, c.head.bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(h * dv, d_model, c.head.bias));
  if (c.head.gate.kind == "hard_concrete")
    gate = register_module("gate", std::make_shared<HardConcreteGate>(h, c.head.gate));
  head_mask = register_buffer("head_mask", ones({h}));
}

AttentionResult CollaborativeAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                                bool need_weights) {
  const bool is_causal = causal || config.head.causal;
  const Tensor& c = check_inputs(kName, d_model_, x, context, is_causal);
  const int64_t h = config.head.heads, N = x.size(1), M = c.size(1);
  // The scale goes on the two small factors instead of the (B, h, N, M) scores.
  Tensor qs = (*q_shared)(x) * config.scale;                     // (B, N, Dk~)
  Tensor ks = (*k_shared)(c);                                    // (B, M, Dk~)
  Tensor scores = einsum("bnr,hr,bmr->bhnm", {qs, mixing, ks});  // (B, h, N, M)
  Tensor content = einsum("bmd,hd->bhm", {c, content_bias->weight}) * config.scale;  // (B, h, M)
  scores = scores + unsqueeze(content, 2);                                     // (B, h, N, M)
  Tensor p = softmax(scores, -1, allowed_mask(mask, N, M, is_causal, kName));  // (B, h, N, M)
  Tensor v = split_heads((*v_proj)(c), h);                                     // (B, h, M, dv)
  Tensor o = matmul(attention_dropout(p, config.head.attn_dropout, is_training(), gen), v);  // (B, h, N, dv)
  o = o * head_scale(gate, head_mask);                                // (B, h, N, dv)
  return {(*out_proj)(merge_heads(o)), need_weights ? p : Tensor()};  // (B, N, D)
}

namespace {

struct CollaborativeCache : AttentionCache {
  Tensor ks;       // (B, max_len, Dk~): k~ = c k_shared^T
  Tensor content;  // (B, h, max_len): scale * content_bias_i . c[m]
  Tensor v;        // (B, h, max_len, dv)
  int64_t numel() const override { return ks.numel() + content.numel() + v.numel(); }
};

}  // namespace

std::unique_ptr<AttentionCache> CollaborativeAttention::make_cache(int64_t batch, int64_t max_len) const {
  auto c = std::make_unique<CollaborativeCache>();
  c->owner = this;
  const DType dt = mixing.dtype();
  c->ks = zeros({batch, max_len, config.shared_key_size}, dt);
  c->content = zeros({batch, config.head.heads, max_len}, dt);
  c->v = zeros({batch, config.head.heads, max_len, config.head.value_size}, dt);
  return c;
}

Tensor CollaborativeAttention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  auto& c = step_cache<CollaborativeCache>(cache, kName);
  check_step(kName, d_model_, x_new, c.v.size(0), c.length, c.v.size(2));
  NoGradGuard no_grad;
  const int64_t h = config.head.heads, T = x_new.size(1), L = c.length + T;
  write_rows(c.ks, 1, c.length, (*k_shared)(x_new));  // rows [length, L)
  write_rows(c.content, 2, c.length, einsum("bmd,hd->bhm", {x_new, content_bias->weight}) * config.scale);
  write_rows(c.v, 2, c.length, split_heads((*v_proj)(x_new), h));
  Tensor qs = (*q_shared)(x_new) * config.scale;                                         // (B, T, Dk~)
  Tensor scores = einsum("bnr,hr,bmr->bhnm", {qs, mixing, narrow(c.ks, 1, 0, L)});      // (B, h, T, L)
  scores = scores + unsqueeze(narrow(c.content, 2, 0, L), 2);                            // (B, h, T, L)
  Tensor p = softmax(scores, -1, step_causal_mask(T, c.length));                         // (B, h, T, L)
  Tensor o = matmul(p, narrow(c.v, 2, 0, L)) * head_scale(gate, head_mask);             // (B, h, T, dv)
  c.length = L;
  return (*out_proj)(merge_heads(o));  // (B, T, D)
}

std::string CollaborativeAttention::spec() const {
  const VariantSchema s = schema();
  OptionValues v;
  set_head_options(v, config.head, s);
  v.set("shared_key_size", config.shared_key_size).set("mixing_init", config.mixing_init).set("scale", config.scale);
  return format_spec(s, v);
}

std::shared_ptr<Attention> CollaborativeAttention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.head.heads, kName);
  CollaborativeConfig c = config;  // value_size and scale are already pinned numbers
  c.head.heads = static_cast<int64_t>(keep.size());
  // The init is overwritten below; concatenate is only kept while it is still constructible.
  if (c.mixing_init == "concatenate" && c.shared_key_size % c.head.heads != 0) c.mixing_init = "random";
  auto out = std::make_shared<CollaborativeAttention>(d_model_, c);
  const int64_t dv = config.head.value_size;
  copy_pruned_state(*this, *out, keep,
                    {{"mixing", 1}, {"content_bias.", 1}, {"v_proj.", dv}, {"out_proj.weight", dv, 1}}, kName);
  return out;
}

std::shared_ptr<CollaborativeAttention> to_collaborative(const MultiHeadAttention& mha, int64_t shared_key_size,
                                                         CPOptions options, CPReport* report) {
  const HeadConfig& mc = mha.config;
  const int64_t h = mc.heads, dk = mc.key_size, D = mha.d_model();
  if (shared_key_size <= 0)
    fail<ValueError>("to_collaborative: shared_key_size must be positive, got {}", shared_key_size);
  const bool exact = shared_key_size == h * dk;
  CollaborativeConfig c;
  c.head = mc;
  c.head.key_size = 0;  // unused by collaborative
  c.shared_key_size = shared_key_size;
  c.mixing_init = exact ? "concatenate" : "random";
  c.scale = 1.0 / std::sqrt(double(dk));  // the mha's scale, so that the scores match
  auto out = std::make_shared<CollaborativeAttention>(D, c);
  const DType dtype = mha.q_proj->weight.dtype();
  out->to(kFloat64);  // the fit and every copy in float64; converted back at the end
  NoGradGuard no_grad;
  Tensor wq = reshape(to(mha.q_proj->weight, kFloat64), {h, dk, D});  // (h, dk, D): Wq_i = wq[i]
  Tensor wk = reshape(to(mha.k_proj->weight, kFloat64), {h, dk, D});  // (h, dk, D)
  CPReport fit;
  if (exact) {
    // q~ = concat_i q_i (without bias): mixing's block i sums exactly head i's dot product.
    kernels::copy_(out->q_shared->weight, reshape(wq, {h * dk, D}));
    kernels::copy_(out->k_shared->weight, reshape(wk, {h * dk, D}));
    kernels::copy_(out->mixing, concatenate_layout(h, shared_key_size));
    fit = {0.0, 0, true};
  } else {
    Tensor t = einsum("ica,icb->aib", {wq, wk});  // (D, h, D)
    CPFactors f = cp_als(t, shared_key_size, options);
    kernels::copy_(out->q_shared->weight, transpose(f.a, 0, 1));  // (Dk~, D)
    kernels::copy_(out->mixing, f.m);                             // (h, Dk~)
    kernels::copy_(out->k_shared->weight, transpose(f.b, 0, 1));  // (Dk~, D)
    fit = f.report;
  }
  // (Wq_i x + bq_i) . (Wk_i c + bk_i) = x^T T_i c + (bq_i^T Wk_i) c + terms constant along m.
  if (mha.q_proj->bias.defined()) {
    Tensor bq = reshape(to(mha.q_proj->bias, kFloat64), {h, dk});               // (h, dk)
    kernels::copy_(out->content_bias->weight, einsum("ic,icb->ib", {bq, wk}));  // (h, D)
  } else {
    kernels::fill_(out->content_bias->weight, 0.0);
  }
  kernels::copy_(out->v_proj->weight, mha.v_proj->weight);
  if (mha.v_proj->bias.defined()) kernels::copy_(out->v_proj->bias, mha.v_proj->bias);
  kernels::copy_(out->out_proj->weight, mha.out_proj->weight);
  if (mha.out_proj->bias.defined()) kernels::copy_(out->out_proj->bias, mha.out_proj->bias);
  kernels::copy_(out->head_mask, mha.head_mask);
  if (mha.gate) kernels::copy_(out->gate->log_alpha, mha.gate->log_alpha);
  out->train(mha.is_training());
  out->to(dtype);
  if (report) *report = fit;
  return out;
}

}  // namespace attnlab::nn
