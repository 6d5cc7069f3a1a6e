#include "nn/attention/diff.hpp"

#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/attention/mha.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

VariantSchema DiffAttention::schema() {
  VariantSchema s{"diff", "differential attention: the difference of two softmax maps per head (Ye et al. 2024)",
                  multihead_options(),
                  "O(B h N M (2 dk + 2 dv)) + projections O(B (N + M) D h (2 dk + dv)); two fused kernel passes",
                  "O(B h N (2 dk + dv)) without need_weights (fused kernel); O(B h N M) for the two maps with it"};
  for (OptionSchema& o : s.options)
    if (o.name == "key_size") o.doc = "size dk of each of a head's two query/key halves (default D/(2h))";
  s.options.insert(s.options.begin() + 3,
                   {"layer", OptionType::Int, "1", "1-based depth l: lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))", {}});
  s.capabilities = Capabilities::all();
  return s;
}

std::shared_ptr<Attention> DiffAttention::make(const Options& o, int64_t d_model) {
  const int64_t h = o.get_int("heads");
  if (h > 0 && d_model > 0 && !o.given("key_size") && d_model % (2 * h) != 0)
    fail<ValueError>(
        "diff: key_size defaults to d_model/(2 heads), but 2*heads={} does not divide d_model={}; give "
        "key_size explicitly",
        2 * h, d_model);
  HeadConfig c = read_head_config(o, d_model, h);
  if (!o.given("key_size")) c.key_size = d_model / (2 * h);
  const int64_t layer = o.get_int("layer");
  if (layer < 1) o.reject("layer", "must be a 1-based depth >= 1");
  return std::make_shared<DiffAttention>(d_model, c, layer);
}

DiffAttention::DiffAttention(int64_t d_model, const HeadConfig& c, int64_t l)
    : config(c), layer(l), gen(default_generator().next_u64()) {
  register_generator("generator", gen);
  d_model_ = d_model;
  const int64_t h = c.heads, dk = c.key_size, dv = c.value_size;
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, h * 2 * dk, c.bias));
  k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, h * 2 * dk, c.bias));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, h * dv, c.bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(h * dv, d_model, c.bias));
  lambda_q1 = register_parameter("lambda_q1", randn({dk}, gen, kFloat32, 0, 0.1));  // (dk) N(0, 0.1^2)
  lambda_k1 = register_parameter("lambda_k1", randn({dk}, gen, kFloat32, 0, 0.1));
  lambda_q2 = register_parameter("lambda_q2", randn({dk}, gen, kFloat32, 0, 0.1));
  lambda_k2 = register_parameter("lambda_k2", randn({dk}, gen, kFloat32, 0, 0.1));
  subln = register_module("subln", std::make_shared<RMSNorm>(dv, 1e-5));
  if (c.gate.kind == "hard_concrete") gate = register_module("gate", std::make_shared<HardConcreteGate>(h, c.gate));
  head_mask = register_buffer("head_mask", ones({h}));
}

double DiffAttention::lambda_init() const { return 0.8 - 0.6 * std::exp(-0.3 * double(layer - 1)); }

Tensor DiffAttention::lambda() const {
  return exp(sum(lambda_q1 * lambda_k1)) - exp(sum(lambda_q2 * lambda_k2)) + lambda_init();  // ()
}

std::pair<Tensor, Tensor> DiffAttention::halves(const Tensor& t) const {
  const int64_t B = t.size(0), T = t.size(1), h = config.heads, dk = config.key_size;
  Tensor r = reshape(t, {B, T, h, 2, dk});                                      // (B, T, h, 2, dk)
  return {transpose(select(r, 3, 0), 1, 2), transpose(select(r, 3, 1), 1, 2)};  // (B, h, T, dk) x 2
}

Tensor DiffAttention::finish(const Tensor& o) const {
  Tensor y = (*subln)(o) * (1 - lambda_init());  // (B, h, T, dv)
  y = y * head_scale(gate, head_mask);           // (B, h, T, dv)
  return (*out_proj)(merge_heads(y));            // (B, T, D)
}

AttentionResult DiffAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                       bool need_weights) {
  return forward_with(x, context, mask, causal, need_weights, {});
}

AttentionResult DiffAttention::forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                         bool need_weights) {
  if (need_weights) return Attention::forward_segments(x, segment_ids, mask, causal, true);  // the composed path
  return forward_with(x, {}, mask, causal, false, segment_ids);
}

AttentionResult DiffAttention::forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                         bool need_weights, const Tensor& segment_ids) {
  const bool is_causal = causal || config.causal;
  const Tensor& c = check_inputs("diff", d_model_, x, context, is_causal);
  const int64_t h = config.heads, N = x.size(1), M = c.size(1);
  const double scale = 1.0 / std::sqrt(double(config.key_size));
  auto [q1, q2] = halves((*q_proj)(x));     // (B, h, N, dk) x 2
  auto [k1, k2] = halves((*k_proj)(c));     // (B, h, M, dk) x 2
  Tensor v = split_heads((*v_proj)(c), h);  // (B, h, M, dv)
  Tensor lam = lambda();                    // ()
  if (!need_weights) {
    // The fused path: O1 - lambda O2 from two tile-kernel passes, no (N, M) map in memory. One
    // dropout seed for both passes drops the same entries of both maps, i.e. dropout on the
    // difference map, as in the composed path below (its readable twin).
    check_mask(mask, N, M, "diff");
    const TilePattern pattern = dense_tile_pattern(N, M, is_causal, mask, segment_ids);
    TileOptions options;
    options.scale = scale;
    if (is_training() && config.attn_dropout > 0) options.dropout = config.attn_dropout, options.seed = gen.next_u64();
    Tensor o1 = tile_attention(q1, k1, v, pattern, options).out;  // (B, h, N, dv)
    Tensor o2 = tile_attention(q2, k2, v, pattern, options).out;  // (B, h, N, dv)
    return {finish(o1 - lam * o2), Tensor()};
  }
  Tensor allowed = allowed_mask(mask, N, M, is_causal, "diff");
  Tensor p1 = softmax(matmul(q1 * scale, transpose(k1, -2, -1)), -1, allowed);          // (B, h, N, M)
  Tensor p2 = softmax(matmul(q2 * scale, transpose(k2, -2, -1)), -1, allowed);          // (B, h, N, M)
  Tensor p = p1 - lam * p2;                                                             // (B, h, N, M)
  Tensor o = matmul(attention_dropout(p, config.attn_dropout, is_training(), gen), v);  // (B, h, N, dv)
  return {finish(o), p};
}

std::unique_ptr<AttentionCache> DiffAttention::make_cache(int64_t batch, int64_t max_len) const {
  return make_kv_cache(this, batch, max_len, 2 * config.heads, config.key_size, config.heads, config.value_size,
                       q_proj->weight.dtype());
}

Tensor DiffAttention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  KVCache& c = step_cache<KVCache>(cache, "diff");
  check_step("diff", d_model_, x_new, c.v.size(0), c.length, c.v.size(2));
  NoGradGuard no_grad;
  const int64_t h = config.heads, T = x_new.size(1), L = c.length + T;
  const double scale = 1.0 / std::sqrt(double(config.key_size));
  // The halves as 2h heads: head 2i is half 1 of head i, head 2i + 1 its half 2.
  Tensor q = split_heads((*q_proj)(x_new), 2 * h) * scale;             // (B, 2h, T, dk)
  write_rows(c.k, 2, c.length, split_heads((*k_proj)(x_new), 2 * h));  // rows [length, L)
  write_rows(c.v, 2, c.length, split_heads((*v_proj)(x_new), h));
  Tensor k = narrow(c.k, 2, 0, L), v = narrow(c.v, 2, 0, L);  // (B, 2h, L, dk), (B, h, L, dv)
  Tensor p = softmax(matmul(q, transpose(k, -2, -1)), -1, step_causal_mask(T, c.length));  // (B, 2h, T, L)
  p = reshape(p, {p.size(0), h, 2, T, L});                                                 // (B, h, 2, T, L)
  Tensor diff = select(p, 2, 0) - lambda() * select(p, 2, 1);                              // (B, h, T, L)
  c.length = L;
  return finish(matmul(diff, v));  // (B, T, D)
}

std::string DiffAttention::spec() const {
  const VariantSchema s = schema();
  OptionValues v;
  set_head_options(v, config, s);
  v.set("layer", layer);
  return format_spec(s, v);
}

std::shared_ptr<Attention> DiffAttention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.heads, "diff");
  HeadConfig c = config;
  c.heads = static_cast<int64_t>(keep.size());
  auto out = std::make_shared<DiffAttention>(d_model_, c, layer);
  // q/k rows hold both halves of each kept head: 2 dk per head.
  const int64_t dk = config.key_size, dv = config.value_size;
  copy_pruned_state(*this, *out, keep,
                    {{"q_proj.", 2 * dk}, {"k_proj.", 2 * dk}, {"v_proj.", dv}, {"out_proj.weight", dv, 1}}, "diff");
  return out;
}

}  // namespace attnlab::nn
