#include "nn/attention/mla.hpp"

#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/attention/mha.hpp"
#include "nn/rotary.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

namespace {

// A size that defaults to d_model / divisor; a divisor that does not divide d_model asks for it.
int64_t size_option(const Options& o, const char* name, int64_t d_model, int64_t divisor, const char* default_text) {
  if (auto v = o.get_optional_int(name)) {
    if (*v <= 0) o.reject(name, "must be a positive integer");
    return *v;
  }
  if (d_model % divisor != 0)
    fail<ValueError>("{}: {} defaults to {}, but {} does not divide d_model={}; give {} explicitly", o.variant(), name,
                     default_text, divisor, d_model, name);
  return d_model / divisor;
}

}  // namespace

VariantSchema LatentAttention::schema() {
  using T = OptionType;
  std::vector<OptionSchema> options;
  for (OptionSchema& o : multihead_options()) {
    if (o.name == "bias") continue;  // mla has no biases
    if (o.name == "key_size") o.doc = "no-RoPE key/query size per head dk (default D/h)";
    options.push_back(o);
    if (o.name == "heads") {
      options.push_back({"kv_rank", T::Int, "", "latent size r of keys and values (default D/4)", {}});
      options.push_back({"q_rank", T::Int, "0", "latent size rq of the queries (0: queries not compressed)", {}});
    }
    if (o.name == "key_size")
      options.push_back({"rope_size", T::Int, "", "RoPE key/query size per head dr, even (default dk/2)", {}});
    if (o.name == "attn_dropout")
      options.push_back({"absorb", T::Bool, "true", "decoding folds kv_up into the query and the output", {}});
  }
  return {"mla", "multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2)", options,
          "O(B h N M (dk + dr + dv)) + projections O(B N D (rq + h (dk + dr)) + B N rq h (dk + dr) + B M D (r + dr) "
          "+ B M r h (dk + dv) + B N h dv D); absorbed decoding, per new token over L cached positions, "
          "O(B h L (r + dr) + B h r (dk + dv))",
          "O(B h N M) for the probabilities with need_weights, else O(B h (N + M) (dk + dr + dv)); decoding cache "
          "O(B L (r + dr))",
          Capabilities::all()};
}

std::shared_ptr<Attention> LatentAttention::make(const Options& o, int64_t d_model) {
  LatentConfig c;
  c.head = read_head_config(o, d_model, o.get_int("heads"));
  c.kv_rank = size_option(o, "kv_rank", d_model, 4, "d_model/4");
  c.q_rank = o.get_int("q_rank");
  if (c.q_rank < 0) o.reject("q_rank", "must be 0 (queries not compressed) or a positive integer");
  if (auto dr = o.get_optional_int("rope_size")) {
    if (*dr <= 0 || *dr % 2) o.reject("rope_size", "must be a positive even integer");
    c.rope_size = *dr;
  } else {
    const int64_t dk = c.head.key_size;
    if (dk % 4)
      fail<ValueError>(
          "mla: rope_size defaults to key_size/2, but key_size={} gives {}, not a positive even integer; "
          "give rope_size explicitly (a positive even integer)",
          dk, dk % 2 ? fmt::format("{}/2", dk) : std::to_string(dk / 2));
    c.rope_size = dk / 2;
  }
  c.absorb = o.get_bool("absorb");
  return std::make_shared<LatentAttention>(d_model, c);
}

LatentAttention::LatentAttention(int64_t d_model, const LatentConfig& c)
    : config(c), gen(default_generator().next_u64()) {
  register_generator("generator", gen);  // attention dropout: saved in checkpoints
  d_model_ = d_model;
  const int64_t h = c.head.heads, dk = c.head.key_size, dv = c.head.value_size, dr = c.rope_size;
  const int64_t r = c.kv_rank, rq = c.q_rank;
  if (rq == 0) {
    q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, h * (dk + dr), false));
  } else {
    q_down = register_module("q_down", std::make_shared<Linear>(d_model, rq, false));
    q_norm = register_module("q_norm", std::make_shared<RMSNorm>(rq, 1e-6));
    q_up = register_module("q_up", std::make_shared<Linear>(rq, h * (dk + dr), false));
  }
  kv_down = register_module("kv_down", std::make_shared<Linear>(d_model, r + dr, false));
  kv_norm = register_module("kv_norm", std::make_shared<RMSNorm>(r, 1e-6));
  kv_up = register_module("kv_up", std::make_shared<Linear>(r, h * (dk + dv), false));
  out_proj = register_module("out_proj", std::make_shared<Linear>(h * dv, d_model, false));
  if (c.head.gate.kind == "hard_concrete")
    gate = register_module("gate", std::make_shared<HardConcreteGate>(h, c.head.gate));
  head_mask = register_buffer("head_mask", ones({h}));
}

double LatentAttention::scale() const { return 1.0 / std::sqrt(double(config.head.key_size + config.rope_size)); }

Tensor LatentAttention::queries(const Tensor& x, int64_t offset) const {
  const int64_t dk = config.head.key_size, dr = config.rope_size;
  Tensor q = q_proj ? (*q_proj)(x) : (*q_up)((*q_norm)((*q_down)(x)));  // (B, N, h*(dk+dr))
  q = split_heads(q, config.head.heads);                                // (B, h, N, dk+dr)
  return cat({narrow(q, -1, 0, dk), rope_rotate(narrow(q, -1, dk, dr), offset)}, -1);
}

LatentAttention::Latent LatentAttention::latent(const Tensor& src, int64_t offset) const {
  const int64_t r = config.kv_rank;
  Tensor ckr = (*kv_down)(src);  // (B, M, r + dr)
  return {(*kv_norm)(narrow(ckr, -1, 0, r)), rope_rotate(narrow(ckr, -1, r, config.rope_size), offset)};
}

std::pair<Tensor, Tensor> LatentAttention::keys_values(const Latent& lat) const {
  const int64_t h = config.head.heads, dk = config.head.key_size, dv = config.head.value_size;
  Tensor kv = split_heads((*kv_up)(lat.c), h);                // (B, h, M, dk+dv)
  Tensor kr = expand(unsqueeze(lat.kr, 1), {-1, h, -1, -1});  // (B, h, M, dr), one key shared by the heads
  return {cat({narrow(kv, -1, 0, dk), kr}, -1), narrow(kv, -1, dk, dv)};
}

std::pair<Tensor, Tensor> LatentAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& allowed) {
  Tensor scores = matmul(q * scale(), transpose(k, -2, -1));                                 // (B, h, N, M)
  Tensor p = softmax(scores, -1, allowed);                                                   // (B, h, N, M)
  Tensor o = matmul(attention_dropout(p, config.head.attn_dropout, is_training(), gen), v);  // (B, h, N, dv)
  return {o, p};
}

AttentionResult LatentAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                         bool need_weights) {
  return forward_with(x, context, mask, causal, need_weights, {});
}

AttentionResult LatentAttention::forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                         bool need_weights) {
  if (need_weights) return Attention::forward_segments(x, segment_ids, mask, causal, true);  // the composed path
  return forward_with(x, {}, mask, causal, false, segment_ids);
}

AttentionResult LatentAttention::forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                         bool need_weights, const Tensor& segment_ids) {
  const bool is_causal = causal || config.head.causal;
  const Tensor& src = check_inputs("mla", d_model_, x, context, is_causal);
  const int64_t N = x.size(1), M = src.size(1);
  Tensor q = queries(x, 0);                   // (B, h, N, dk+dr)
  auto [k, v] = keys_values(latent(src, 0));  // (B, h, M, dk+dr), (B, h, M, dv)
  Tensor o, p;
  if (!need_weights) {
    // The fused tiled kernel: no (N, M) matrix in memory. attend() is its composed twin.
    check_mask(mask, N, M, "mla");
    TileOptions options;
    options.scale = scale();
    if (is_training() && config.head.attn_dropout > 0)
      options.dropout = config.head.attn_dropout, options.seed = gen.next_u64();
    o = tile_attention(q, k, v, dense_tile_pattern(N, M, is_causal, mask, segment_ids), options).out;  // (B, h, N, dv)
  } else {
    std::tie(o, p) = attend(q, k, v, allowed_mask(mask, N, M, is_causal, "mla"));
  }
  o = o * head_scale(gate, head_mask);      // (B, h, N, dv)
  return {(*out_proj)(merge_heads(o)), p};  // (B, N, D)
}

std::unique_ptr<AttentionCache> LatentAttention::make_cache(int64_t batch, int64_t max_len) const {
  auto c = std::make_unique<LatentCache>();
  c->owner = this;
  const DType dtype = kv_down->weight.dtype();
  c->c = zeros({batch, max_len, config.kv_rank}, dtype);     // (B, max_len, r)
  c->kr = zeros({batch, max_len, config.rope_size}, dtype);  // (B, max_len, dr)
  return c;
}

Tensor LatentAttention::absorbed_step(const Tensor& q, const Latent& lat, const Tensor& allowed) const {
  const int64_t h = config.head.heads, dk = config.head.key_size, dv = config.head.value_size;
  const int64_t dr = config.rope_size, r = config.kv_rank;
  Tensor w = view(kv_up->weight, {h, dk + dv, r});                 // (h, dk+dv, r)
  Tensor w_uk = narrow(w, 1, 0, dk), w_uv = narrow(w, 1, dk, dv);  // (h, dk, r), (h, dv, r)
  Tensor q_lat = matmul(narrow(q, -1, 0, dk), w_uk);               // (B, h, T, r): q_nope_i W_uk_i
  Tensor c = unsqueeze(lat.c, 1), kr = unsqueeze(lat.kr, 1);       // (B, 1, L, r), (B, 1, L, dr)
  Tensor scores = matmul(q_lat, transpose(c, -2, -1)) + matmul(narrow(q, -1, dk, dr), transpose(kr, -2, -1));
  Tensor p = softmax(scores * scale(), -1, allowed);     // (B, h, T, L)
  return matmul(matmul(p, c), transpose(w_uv, -2, -1));  // (B, h, T, r) -> (B, h, T, dv)
}

Tensor LatentAttention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  LatentCache& c = step_cache<LatentCache>(cache, "mla");
  check_step("mla", d_model_, x_new, c.c.size(0), c.length, c.c.size(1));
  NoGradGuard no_grad;
  const int64_t T = x_new.size(1), L = c.length + T;
  Tensor q = queries(x_new, c.length);  // (B, h, T, dk+dr)
  Latent fresh = latent(x_new, c.length);
  write_rows(c.c, 1, c.length, fresh.c);  // rows [length, L)
  write_rows(c.kr, 1, c.length, fresh.kr);
  const Latent all{narrow(c.c, 1, 0, L), narrow(c.kr, 1, 0, L)};  // (B, L, r), (B, L, dr)
  const Tensor allowed = step_causal_mask(T, c.length);           // (T, L) or undefined
  Tensor o;                                                       // (B, h, T, dv)
  if (config.absorb) {
    o = absorbed_step(q, all, allowed);
  } else {
    auto [k, v] = keys_values(all);
    o = attend(q, k, v, allowed).first;
  }
  c.length = L;
  return (*out_proj)(merge_heads(o * head_scale(gate, head_mask)));  // (B, T, D)
}

std::string LatentAttention::spec() const {
  const LatentConfig& c = config;
  const VariantSchema s = schema();
  OptionValues v;
  set_head_options(v, c.head, s);
  v.set("kv_rank", c.kv_rank).set("q_rank", c.q_rank).set("rope_size", c.rope_size).set("absorb", c.absorb);
  return format_spec(s, v);
}

std::shared_ptr<Attention> LatentAttention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.head.heads, "mla");
  LatentConfig c = config;
  c.head.heads = static_cast<int64_t>(keep.size());
  auto out = std::make_shared<LatentAttention>(d_model_, c);
  const int64_t dq = config.head.key_size + config.rope_size, dkv = config.head.key_size + config.head.value_size;
  copy_pruned_state(*this, *out, keep,
                    {{"q_proj.", dq}, {"q_up.", dq}, {"kv_up.", dkv}, {"out_proj.weight", config.head.value_size, 1}},
                    "mla");
  return out;
}

}  // namespace attnlab::nn
