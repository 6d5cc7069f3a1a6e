#include "nn/attention/mha.hpp"

#include <cmath>
#include <utility>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/rotary.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

VariantSchema MultiHeadAttention::schema() {
  using T = OptionType;
  VariantSchema s{"mha", "scaled dot-product multi-head attention (Vaswani et al. 2017; Bhojanapalli et al. 2020)",
                  multihead_options(),
                  "O(B h N M (dk + dv)) + projections O(B D (N h (dk + dv) + M g (dk + dv))), g = kv_heads",
                  "O(B h N M) for the scores and probabilities (need_weights); O(B h N dv) on the fused path"};
  s.options.insert(s.options.begin() + 4,
                   {"key_bias", T::Bool, "", "k_proj.bias exists (default = bias); it cannot change the output", {}});
  const std::vector<OptionSchema> current = {
      {"kv_heads", T::Int, "", "key/value heads g, dividing heads (default heads; 1 = multi-query)", {}},
      {"kv_index", T::IntList, "", "each query head's key/value head (set by prune_heads; default i / (heads/g))", {}},
      {"alibi", T::Bool, "false", "ALiBi: add -slope_i |n - m| to the scores (Press et al. 2022)", {}},
      {"alibi_slopes", T::List, "", "the h ALiBi slopes (set by prune_heads; default from heads)", {}},
      {"qk_norm", T::Bool, "false", "RMSNorm over dk on q and k (q_norm.weight, k_norm.weight)", {}},
      {"softcap", T::Double, "0", "c: scores -> c tanh(scores / c); 0 = off", {}},
      {"score", T::Choice, "softmax", "score function", {"softmax", "sigmoid", "softpick"}},
      {"sigmoid_bias", T::Double, "", "b of score=sigmoid (default -log M)", {}},
      {"softpick_eps", T::Double, "1e-06", "eps of score=softpick", {}},
      {"sinks", T::Bool, "false", "a learned sink logit per head in the softmax denominator", {}},
      {"rope", T::Bool, "false", "rotary position embedding on q and k (dk even)", {}},
      {"rope_base", T::Double, "10000", "RoPE base", {}},
  };
  s.options.insert(s.options.end(), current.begin(), current.end());
  s.capabilities = Capabilities::all();
  return s;
}

namespace {
constexpr std::pair<ScoreFunction, const char*> kScoreNames[] = {
    {ScoreFunction::Softmax, "softmax"}, {ScoreFunction::Sigmoid, "sigmoid"}, {ScoreFunction::Softpick, "softpick"}};
}  // namespace

const char* score_name(ScoreFunction f) {
  for (const auto& [value, name] : kScoreNames)
    if (value == f) return name;
  return "?";
}

ScoreFunction parse_score(const std::string& name) {
  for (const auto& [value, n] : kScoreNames)
    if (name == n) return value;
  fail<ValueError>("mha: score {} is not a score function (allowed: softmax, sigmoid, softpick)", name);
}

namespace {

// The options of current models from a parsed spec, checked against each other.
MhaOptions read_mha_options(const Options& o, const HeadConfig& c) {
  MhaOptions m;
  const int64_t h = c.heads;
  m.kv_heads = o.get_optional_int("kv_heads").value_or(h);
  if (o.given("kv_index")) {
    m.kv_index = o.get_int_list("kv_index");
    if (int64_t(m.kv_index.size()) != h) o.reject("kv_index", fmt::format("needs one entry per head ({})", h));
    for (int64_t j : m.kv_index)
      if (j < 0 || j >= m.kv_heads)
        o.reject("kv_index", fmt::format("entries must be in [0, kv_heads={}), got {}", m.kv_heads, j));
  } else if (m.kv_heads <= 0 || h % m.kv_heads != 0) {
    std::vector<int64_t> divisors;
    for (int64_t g = 1; g <= h; ++g)
      if (h % g == 0) divisors.push_back(g);
    o.reject("kv_heads", fmt::format("must divide heads={}; allowed: {}", h, fmt::join(divisors, ", ")));
  }
  m.alibi = o.get_bool("alibi");
  if (o.given("alibi_slopes")) {
    if (!m.alibi) o.reject("alibi_slopes", "needs alibi=true");
    for (const std::string& item : o.get_list("alibi_slopes")) {
      const std::optional<double> v = parse_number(item);
      if (!v || !std::isfinite(*v)) o.reject("alibi_slopes", fmt::format("\"{}\" is not a number", item));
      m.alibi_slopes.push_back(*v);
    }
    if (int64_t(m.alibi_slopes.size()) != h) o.reject("alibi_slopes", fmt::format("needs one slope per head ({})", h));
  }
  m.qk_norm = o.get_bool("qk_norm");
  m.softcap = o.get_double("softcap");
  if (!(m.softcap >= 0) || std::isinf(m.softcap)) o.reject("softcap", "must be a finite c >= 0 (0 = off)");
  m.score = parse_score(o.get_choice("score"));
  const char* score = score_name(m.score);
  if (o.given("sigmoid_bias")) {
    if (m.score != ScoreFunction::Sigmoid)
      o.reject("sigmoid_bias", fmt::format("applies to score=sigmoid only, got score={}", score));
    m.sigmoid_bias = o.get_double("sigmoid_bias");
  }
  m.softpick_eps = o.get_double("softpick_eps");
  if (o.given("softpick_eps") && m.score != ScoreFunction::Softpick)
    o.reject("softpick_eps", fmt::format("applies to score=softpick only, got score={}", score));
  // eps > 0: a fully masked row is 0 / (0 + eps) = 0; with eps = 0 it would be 0 / 0.
  if (!(m.softpick_eps > 0) || std::isinf(m.softpick_eps))
    o.reject("softpick_eps", "must be a finite eps > 0 (a fully masked row divides 0 by eps)");
  m.sinks = o.get_bool("sinks");
  if (m.sinks && m.score != ScoreFunction::Softmax)
    o.reject("sinks", fmt::format("needs score=softmax (allowed with sinks: softmax), got score={}", score));
  m.rope = o.get_bool("rope");
  if (m.rope && c.key_size % 2 != 0) o.reject("rope", fmt::format("needs an even key_size, got key_size={}", c.key_size));
  m.rope_base = o.get_double("rope_base");
  if (o.given("rope_base") && !m.rope) o.reject("rope_base", "needs rope=true");
  if (!(m.rope_base > 0) || std::isinf(m.rope_base)) o.reject("rope_base", "must be a finite base > 0");
  return m;
}

}  // namespace

std::shared_ptr<Attention> MultiHeadAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  const bool key_bias = o.given("key_bias") ? o.get_bool("key_bias") : c.bias;
  return std::make_shared<MultiHeadAttention>(d_model, c, key_bias, read_mha_options(o, c));
}

std::vector<double> alibi_slopes(int64_t heads) {
  auto power_of_two = [](int64_t n) {  // 2^(-8(i+1)/n), i < n
    std::vector<double> s(n);
    for (int64_t i = 0; i < n; ++i) s[i] = std::exp2(-8.0 * double(i + 1) / double(n));
    return s;
  };
  int64_t p = 1;
  while (p * 2 <= heads) p *= 2;
  std::vector<double> s = power_of_two(p);
  if (p == heads) return s;
  const std::vector<double> twice = power_of_two(2 * p);
  for (int64_t j = 0; j < heads - p; ++j) s.push_back(twice[2 * j]);
  return s;
}

MultiHeadAttention::MultiHeadAttention(int64_t d_model, const HeadConfig& c, bool kb, const MhaOptions& opts)
    : config(c), key_bias(kb), options(opts), gen(default_generator().next_u64()) {
  register_generator("generator", gen);  // attention dropout: saved in checkpoints
  d_model_ = d_model;
  const int64_t h = c.heads;
  if (options.kv_heads == 0) options.kv_heads = h;
  const int64_t g = options.kv_heads;
  const bool grouped_ok = !options.kv_index.empty() ? int64_t(options.kv_index.size()) == h : g > 0 && h % g == 0;
  if (!grouped_ok) fail<ValueError>("mha: kv_heads={} must divide heads={} (or kv_index name every head)", g, h);
  if (options.rope && c.key_size % 2) fail<ValueError>("mha: rope needs an even key_size, got {}", c.key_size);
  if (options.sinks && options.score != ScoreFunction::Softmax)
    fail<ValueError>("mha: sinks needs score=softmax, got score={}", score_name(options.score));
  if (!options.alibi_slopes.empty() && int64_t(options.alibi_slopes.size()) != h)
    fail<ValueError>("mha: alibi_slopes has {} entries, expected heads={}", options.alibi_slopes.size(), h);
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, h * c.key_size, c.bias));
  k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, g * c.key_size, c.bias && kb));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, g * c.value_size, c.bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(h * c.value_size, d_model, c.bias));
  if (options.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<RMSNorm>(c.key_size, 1e-6));
    k_norm = register_module("k_norm", std::make_shared<RMSNorm>(c.key_size, 1e-6));
  }
  if (options.sinks) sinks = register_parameter("sinks", zeros({h}));  // (h)
  if (c.gate.kind == "hard_concrete") gate = register_module("gate", std::make_shared<HardConcreteGate>(h, c.gate));
  if (!options.kv_index.empty()) kv_index = register_buffer("kv_index", from_vector(options.kv_index));  // (h) int64
  head_mask = register_buffer("head_mask", ones({h}));
}

std::vector<int64_t> MultiHeadAttention::kv_map() const {
  if (!options.kv_index.empty()) return options.kv_index;
  const int64_t h = config.heads, group = h / options.kv_heads;
  std::vector<int64_t> m(h);
  for (int64_t i = 0; i < h; ++i) m[i] = i / group;
  return m;
}

std::vector<double> MultiHeadAttention::slopes() const {
  return options.alibi_slopes.empty() ? alibi_slopes(config.heads) : options.alibi_slopes;
}

Tensor head_scale(const std::shared_ptr<HardConcreteGate>& gate, const Tensor& head_mask) {
  Tensor s = gate ? gate->forward() * head_mask : head_mask;  // (h)
  return reshape(s, {1, -1, 1, 1});                          // (1, h, 1, 1)
}

Tensor MultiHeadAttention::queries(const Tensor& x, int64_t offset) {
  Tensor q = split_heads((*q_proj)(x), config.heads);  // (B, h, N, dk)
  if (q_norm) q = (*q_norm)(q);
  return options.rope ? rope_rotate(q, offset, options.rope_base) : q;
}

Tensor MultiHeadAttention::keys(const Tensor& c, int64_t offset) {
  Tensor k = split_heads((*k_proj)(c), options.kv_heads);  // (B, g, M, dk)
  if (k_norm) k = (*k_norm)(k);
  return options.rope ? rope_rotate(k, offset, options.rope_base) : k;
}

Tensor MultiHeadAttention::expand_kv(const Tensor& t) const {
  if (options.kv_heads == config.heads && options.kv_index.empty()) return t;
  return index_select(t, 1, from_vector(kv_map()));  // (B, h, M, d)
}

Tensor MultiHeadAttention::score_function(const Tensor& s, const Tensor& allowed) const {
  const int64_t B = s.size(0), h = s.size(1), N = s.size(2), M = s.size(3);
  if (options.score == ScoreFunction::Sigmoid) {
    const double b = options.sigmoid_bias.value_or(-std::log(double(M)));
    Tensor p = sigmoid(s + b);                              // (B, h, N, M), no normalisation
    return allowed.defined() ? where(allowed, p, 0.0) : p;
  }
  if (options.score == ScoreFunction::Softpick) {
    // e = exp(s - c) - exp(-c), c = max(row max over allowed, 0); a disallowed entry has
    // e = -exp(-c) < 0, so relu drops it from the numerator and the where from the denominator.
    Tensor sm = allowed.defined() ? where(allowed, s, -INFINITY) : s;  // (B, h, N, M)
    Tensor c = clamp_min(amax(sm, {-1}, true), 0.0);                    // (B, h, N, 1)
    Tensor e = exp(sm - c) - exp(-c);                                   // (B, h, N, M)
    Tensor a = allowed.defined() ? where(allowed, abs(e), 0.0) : abs(e);
    return relu(e) / (sum(a, {-1}, true) + options.softpick_eps);      // (B, h, N, M)
  }
  if (!sinks.defined()) return softmax(s, -1, allowed);
  // The sink as one more logit column that every row allows and that carries no value.
  Tensor sink = expand(reshape(sinks, {1, h, 1, 1}), {B, h, N, 1});  // (B, h, N, 1)
  Tensor ext_allowed;
  if (allowed.defined())
    ext_allowed = cat({broadcast_to(allowed, {B, h, N, M}), ones({B, h, N, 1}, kBool)}, -1);  // (B, h, N, M + 1)
  Tensor p = softmax(cat({s, sink}, -1), -1, ext_allowed);  // (B, h, N, M + 1)
  return narrow(p, -1, 0, M);                                // (B, h, N, M)
}

Tensor MultiHeadAttention::probabilities(const Tensor& q, const Tensor& k, const Tensor& allowed,
                                         int64_t q_offset) const {
  const int64_t B = q.size(0), h = q.size(1), N = q.size(2), M = k.size(2), g = k.size(1);
  const double scale = 1.0 / std::sqrt(double(config.key_size));
  // Query head i scores against key head i / (h/g): the h/g heads of a group are consecutive, so
  // they are one (h/g) N-row operand against their key head, with no copy of k (g = h: plain).
  Tensor qg = reshape(q * scale, {B, g, (h / g) * N, q.size(3)});                // (B, g, (h/g) N, dk)
  Tensor s = reshape(matmul(qg, transpose(k, -2, -1)), {B, h, N, M});             // (B, h, N, M)
  if (options.alibi) {
    // -slope_i |n - m| at raw positions; with causal the allowed entries have m <= n.
    const std::vector<double> sl = slopes();
    std::vector<double> bias(h * N * M);
    for (int64_t i = 0; i < h; ++i)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) bias[(i * N + n) * M + m] = -sl[i] * std::abs(double(q_offset + n - m));
    s = s + to(from_vector(bias, {1, h, N, M}), s.dtype());  // (B, h, N, M)
  }
  if (options.softcap > 0) s = tanh(s / options.softcap) * options.softcap;
  return score_function(s, allowed);  // (B, h, N, M)
}

TileOptions MultiHeadAttention::tile_options(int64_t M) {
  TileOptions t;
  t.scale = 1.0 / std::sqrt(double(config.key_size));
  if (is_training() && config.attn_dropout > 0) t.dropout = config.attn_dropout, t.seed = gen.next_u64();
  if (options.alibi) t.alibi = slopes();
  t.softcap = options.softcap;
  // The kernel's own score type, converted here at its boundary.
  if (options.score == ScoreFunction::Sigmoid)
    t.score = TileScore::Sigmoid, t.sigmoid_bias = options.sigmoid_bias.value_or(-std::log(double(M)));
  if (options.score == ScoreFunction::Softpick) t.score = TileScore::Softpick, t.softpick_eps = options.softpick_eps;
  t.sinks = sinks;
  return t;
}

AttentionResult MultiHeadAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                            bool need_weights) {
  return forward_with(x, context, mask, causal, need_weights, {});
}

AttentionResult MultiHeadAttention::forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask,
                                                     bool causal, bool need_weights) {
  if (need_weights) return Attention::forward_segments(x, segment_ids, mask, causal, true);  // the composed path
  return forward_with(x, {}, mask, causal, false, segment_ids);
}

AttentionResult MultiHeadAttention::forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                           bool need_weights, const Tensor& segment_ids) {
  const bool is_causal = causal || config.causal;
  const Tensor& c = check_inputs("mha", d_model_, x, context, is_causal);
  const int64_t N = x.size(1), M = c.size(1);
  Tensor q = queries(x, 0);                   // (B, h, N, dk)
  Tensor k = keys(c, 0);                      // (B, g, M, dk)
  Tensor v = split_heads((*v_proj)(c), options.kv_heads);  // (B, g, M, dv)
  if (!need_weights) {
    // The fused path: tiled online-softmax (or sigmoid, or softpick) attention, no (N, M)
    // matrix in memory; backward recomputes the probabilities from saved row statistics. qk_norm and RoPE
    // are already applied to q and k (O(N dk)); grouped k and v are read in place, except when
    // pruning left unequal groups (kv_index), where they are gathered to the h heads. The
    // composed path below (the readable twin, and the one that can return the probabilities)
    // is what tests check it against.
    check_mask(mask, N, M, "mha");
    TilePattern pattern = dense_tile_pattern(N, M, is_causal, mask, segment_ids);
    if (!options.kv_index.empty()) k = expand_kv(k), v = expand_kv(v);  // (B, h, M, dk|dv)
    Tensor o = tile_attention(q, k, v, pattern, tile_options(M)).out * head_scale(gate, head_mask);  // (B, h, N, dv)
    return {(*out_proj)(merge_heads(o)), Tensor()};
  }
  Tensor p = probabilities(q, expand_kv(k), allowed_mask(mask, N, M, is_causal, "mha"), 0);  // (B, h, N, M)
  Tensor o = matmul(attention_dropout(p, config.attn_dropout, is_training(), gen), expand_kv(v));  // (B, h, N, dv)
  o = o * head_scale(gate, head_mask);  // (B, h, N, dv)
  return {(*out_proj)(merge_heads(o)), need_weights ? p : Tensor()};  // (B, N, D)
}

std::unique_ptr<AttentionCache> MultiHeadAttention::make_cache(int64_t batch, int64_t max_len) const {
  const int64_t g = options.kv_heads;
  return make_kv_cache(this, batch, max_len, g, config.key_size, g, config.value_size, q_proj->weight.dtype());
}

Tensor MultiHeadAttention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  KVCache& c = step_cache<KVCache>(cache, "mha");
  check_step("mha", d_model_, x_new, c.v.size(0), c.length, c.v.size(2));
  NoGradGuard no_grad;
  const int64_t T = x_new.size(1), L = c.length + T;
  Tensor q = queries(x_new, c.length);                                 // (B, h, T, dk)
  write_rows(c.k, 2, c.length, keys(x_new, c.length));                 // rows [length, L)
  write_rows(c.v, 2, c.length, split_heads((*v_proj)(x_new), options.kv_heads));
  Tensor k = narrow(c.k, 2, 0, L), v = narrow(c.v, 2, 0, L);           // (B, g, L, dk|dv), views of the cache
  if (!options.kv_index.empty()) k = expand_kv(k), v = expand_kv(v);  // unequal groups: (B, h, L, dk|dv)
  // Grouped heads are read in place: each group's queries are one operand against its cached key
  // and value head (no copy of the cache to h heads per step).
  const int64_t B = q.size(0), h = config.heads, g = k.size(1);
  Tensor p = probabilities(q, k, step_causal_mask(T, c.length), c.length);         // (B, h, T, L)
  Tensor o = reshape(matmul(reshape(p, {B, g, (h / g) * T, L}), v), {B, h, T, -1});  // (B, h, T, dv)
  o = o * head_scale(gate, head_mask);
  c.length = L;
  return (*out_proj)(merge_heads(o));  // (B, T, D)
}

std::string MultiHeadAttention::spec() const {
  const MhaOptions& o = options;
  const VariantSchema s = schema();
  OptionValues v;
  set_head_options(v, config, s);
  v.set("key_bias", key_bias).set("kv_index", o.kv_index);  // kv_index: empty unless pruned
  // The options of current models only when on.
  if (o.kv_heads != config.heads) v.set("kv_heads", o.kv_heads);
  if (o.alibi) v.set("alibi", true).set("alibi_slopes", o.alibi_slopes);
  if (o.qk_norm) v.set("qk_norm", true);
  if (o.softcap > 0) v.set("softcap", o.softcap);
  if (o.score != ScoreFunction::Softmax) v.set("score", score_name(o.score));
  if (o.sigmoid_bias) v.set("sigmoid_bias", *o.sigmoid_bias);
  if (o.score == ScoreFunction::Softpick) v.set("softpick_eps", o.softpick_eps);
  if (o.sinks) v.set("sinks", true);
  if (o.rope) v.set("rope", true).set("rope_base", o.rope_base);
  return format_spec(s, v);
}

std::shared_ptr<Attention> MultiHeadAttention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.heads, "mha");
  HeadConfig c = config;
  c.heads = static_cast<int64_t>(keep.size());
  // The kv heads that kept query heads use, in order of first use, and each kept head's index
  // among them; a kv_index buffer only where that is not i / (h' / g').
  const std::vector<int64_t> old_kv = kv_map();
  std::vector<int64_t> kv_keep, renamed(options.kv_heads, -1), index;
  for (int64_t i : keep) {
    if (renamed[old_kv[i]] < 0) renamed[old_kv[i]] = int64_t(kv_keep.size()), kv_keep.push_back(old_kv[i]);
    index.push_back(renamed[old_kv[i]]);
  }
  MhaOptions o = options;
  o.kv_heads = int64_t(kv_keep.size());
  const int64_t h2 = c.heads, g2 = o.kv_heads;
  bool equal_groups = h2 % g2 == 0;
  for (int64_t i = 0; i < h2 && equal_groups; ++i) equal_groups = index[i] == i / (h2 / g2);
  o.kv_index = equal_groups ? std::vector<int64_t>{} : index;
  if (o.alibi) {
    const std::vector<double> all = slopes();
    std::vector<double> kept;
    for (int64_t i : keep) kept.push_back(all[i]);
    o.alibi_slopes = kept == alibi_slopes(h2) ? std::vector<double>{} : kept;
  }
  auto out = std::make_shared<MultiHeadAttention>(d_model_, c, key_bias, o);
  const int64_t dk = config.key_size, dv = config.value_size;
  copy_pruned_state(*this, *out, keep,
                    {{"q_proj.", dk}, {"k_proj.", dk, 0, kv_keep}, {"v_proj.", dv, 0, kv_keep}, {"out_proj.weight", dv, 1},
                     {"sinks", 1}},
                    "mha", [](const std::string& name, const Tensor& from, const Tensor& to) {
                      return name == "kv_index" ? to : from;  // kv_index: built from the pruned options
                    });
  return out;
}

}  // namespace attnlab::nn
