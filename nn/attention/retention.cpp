#include "nn/attention/retention.hpp"

#include <cmath>
#include <cstdlib>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/mha.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

namespace retention {

Tensor decay_powers(const std::vector<double>& gammas, const std::vector<double>& exponents, DType dtype) {
  std::vector<double> p;
  for (double g : gammas)
    for (double e : exponents) p.push_back(std::pow(g, e));
  return to(from_vector(p, {1, int64_t(gammas.size()), int64_t(exponents.size()), 1}), dtype);  // (1, h, E, 1)
}

Tensor decay_matrix(const std::vector<double>& gammas, int64_t length, DType dtype) {
  const int64_t h = static_cast<int64_t>(gammas.size());
  std::vector<double> d(h * length * length, 0.0);
  for (int64_t i = 0; i < h; ++i)
    for (int64_t t = 0; t < length; ++t)
      for (int64_t u = 0; u <= t; ++u) d[(i * length + t) * length + u] = std::pow(gammas[i], double(t - u));
  return to(from_vector(d, {1, h, length, length}), dtype);  // (1, h, L, L)
}

Tensor parallel(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& gammas, Tensor* scores) {
  Tensor a = matmul(q, transpose(k, -2, -1)) * decay_matrix(gammas, q.size(2), q.dtype());  // (B, h, N, N)
  if (scores) *scores = a;
  return matmul(a, v);  // (B, h, N, dv)
}

Tensor chunked(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& gammas, int64_t chunk) {
  const int64_t N = q.size(2);
  const DType dt = q.dtype();
  std::vector<Tensor> outs;
  Tensor state;  // (B, h, dk, dv): sum over the previous blocks' m of gamma^(s - 1 - m) k[m]^T v[m]
  Tensor full_decay = decay_matrix(gammas, std::min(chunk, N), dt);  // (1, h, C, C), every full block's
  for (int64_t s = 0; s < N; s += chunk) {
    const int64_t L = std::min(chunk, N - s);
    Tensor qc = narrow(q, 2, s, L), kc = narrow(k, 2, s, L), vc = narrow(v, 2, s, L);  // (B, h, L, .)
    Tensor d = L == full_decay.size(2) ? full_decay : decay_matrix(gammas, L, dt);     // (1, h, L, L)
    Tensor o = matmul(matmul(qc, transpose(kc, -2, -1)) * d, vc);                      // (B, h, L, dv)
    if (state.defined()) {
      // Row t of the block sees the state decayed t + 1 more times: gamma^(t + 1) q[s + t] S.
      std::vector<double> e(L);
      for (int64_t t = 0; t < L; ++t) e[t] = double(t + 1);
      o = o + matmul(qc * decay_powers(gammas, e, dt), state);  // (B, h, L, dk) (1, h, L, 1) @ (B, h, dk, dv)
    }
    outs.push_back(o);
    if (s + L < N) {
      // Key u of the block reaches the next block's start decayed L - 1 - u times.
      std::vector<double> e(L);
      for (int64_t u = 0; u < L; ++u) e[u] = double(L - 1 - u);
      Tensor add = matmul(transpose(kc * decay_powers(gammas, e, dt), -2, -1), vc);  // (B, h, dk, dv)
      state = state.defined() ? state * decay_powers(gammas, {double(L)}, dt) + add : add;
    }
  }
  return outs.size() == 1 ? outs[0] : cat(outs, 2);  // (B, h, N, dv)
}

Tensor recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& gammas, Tensor& state) {
  Tensor gamma = decay_powers(gammas, {1.0}, q.dtype());  // (1, h, 1, 1)
  std::vector<Tensor> outs;
  for (int64_t t = 0; t < q.size(2); ++t) {
    Tensor kt = narrow(k, 2, t, 1), vt = narrow(v, 2, t, 1);    // (B, h, 1, dk|dv)
    state = state * gamma + matmul(transpose(kt, -2, -1), vt);  // (B, h, dk, dv)
    outs.push_back(matmul(narrow(q, 2, t, 1), state));          // (B, h, 1, dv)
  }
  return cat(outs, 2);  // (B, h, T, dv)
}

}  // namespace retention

VariantSchema Retention::schema() {
  VariantSchema s{"retention", "multi-scale retention, causal only (Sun et al. 2023, RetNet)", multihead_options(),
                  "O(B h N chunk (dk + dv) + B h N dk dv) chunked (need_weights: O(B h N^2 (dk + dv))) + projections "
                  "O(B N D h (2 dk + 3 dv))",
                  "O(B h N (dk + dv + chunk) + B h (N/chunk) dk dv) chunked; O(B h N^2) with need_weights; decoding "
                  "state B h dk dv"};
  for (OptionSchema& o : s.options) {
    if (o.name == "causal") o.default_value = "true", o.doc = "retention is causal by construction (false is an error)";
    if (o.name == "attn_dropout") o.doc = "must be 0: retention has no probabilities to drop";
  }
  s.options.insert(s.options.begin() + 4,
                   {"decay",
                    OptionType::List,
                    "",
                    "decay rate gamma in (0, 1): one number for every head, or one per head joined by + (default "
                    "gamma_i = 1 - 2^(-5-i))",
                    {}});
  s.options.insert(s.options.begin() + 5, {"chunk", OptionType::Int, "64", "block size of the chunked form", {}});
  s.capabilities = Capabilities::all();
  s.capabilities.cross = Support::no;     // the decay runs over the one sequence's positions
  s.capabilities.segments = Support::no;  // the recurrent state would carry across documents
  s.capabilities.query_mask = Support::no;  // the chunked and recurrent forms mask keys only
  s.capabilities.causal_only = true;
  return s;
}

std::vector<double> Retention::default_decays(int64_t heads) {
  std::vector<double> g;
  for (int64_t i = 0; i < heads; ++i) g.push_back(1 - std::pow(2.0, double(-5 - i)));
  return g;
}

std::shared_ptr<Attention> Retention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  if (!c.causal) o.reject("causal", "retention is causal by construction; allowed: true");
  if (c.attn_dropout != 0) o.reject("attn_dropout", "retention has no attention probabilities to drop; allowed: 0");
  std::vector<double> gammas = default_decays(c.heads);
  if (o.given("decay")) {
    std::vector<std::string> items = o.get_list("decay");
    if (items.size() != 1 && int64_t(items.size()) != c.heads)
      o.reject("decay", fmt::format("expected one number or heads={} numbers joined by +", c.heads));
    gammas.clear();
    for (const std::string& item : items) {
      char* end = nullptr;
      const double g = std::strtod(item.c_str(), &end);
      if (item.empty() || end != item.c_str() + item.size() || !(g > 0 && g < 1))
        o.reject("decay", "\"" + item + "\" is not a number in (0, 1) (the open interval)");
      gammas.push_back(g);
    }
    if (gammas.size() == 1) gammas.assign(c.heads, gammas[0]);
  }
  const int64_t chunk = o.get_int("chunk");
  if (chunk < 1) o.reject("chunk", "must be a positive integer (>= 1)");
  return std::make_shared<Retention>(d_model, c, gammas, chunk);
}

Retention::Retention(int64_t d_model, const HeadConfig& c, std::vector<double> g, int64_t ch)
    : config(c), gammas(std::move(g)), chunk(ch) {
  d_model_ = d_model;
  const int64_t h = c.heads;
  if (int64_t(gammas.size()) != h) fail<ValueError>("retention: {} decay rates for heads={}", gammas.size(), h);
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, h * c.key_size, c.bias));
  k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, h * c.key_size, c.bias));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, h * c.value_size, c.bias));
  g_proj = register_module("g_proj", std::make_shared<Linear>(d_model, h * c.value_size, c.bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(h * c.value_size, d_model, c.bias));
  if (c.gate.kind == "hard_concrete") gate = register_module("gate", std::make_shared<HardConcreteGate>(h, c.gate));
  head_mask = register_buffer("head_mask", ones({h}));
}

Tensor Retention::finish(const Tensor& x, const Tensor& o) const {
  Tensor y = layer_norm(o, {}, {}, 1e-5) * head_scale(gate, head_mask);  // (B, h, T, dv), normalised over dv
  Tensor g = (*g_proj)(x);                                               // (B, T, h*dv)
  return (*out_proj)(g * sigmoid(g) * merge_heads(y));                   // swish gate -> (B, T, D)
}

AttentionResult Retention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool,
                                   bool need_weights) {
  check_inputs("retention", d_model_, x, context, true, /*allows_context=*/false);
  const int64_t h = config.heads, N = x.size(1);
  Tensor keys = key_mask(mask, N, N, "retention");  // (B|1, h|1, 1, N) or undefined
  Tensor q = split_heads((*q_proj)(x), h) * (1.0 / std::sqrt(double(config.key_size)));  // (B, h, N, dk)
  Tensor k = split_heads((*k_proj)(x), h);                                               // (B, h, N, dk)
  Tensor v = split_heads((*v_proj)(x), h);                                               // (B, h, N, dv)
  if (keys.defined()) k = where(transpose(keys, -2, -1), k, 0.0);                        // masked keys' rows are zero
  Tensor scores;
  Tensor o = need_weights ? retention::parallel(q, k, v, gammas, &scores)  // (B, h, N, dv)
                          : retention::chunked(q, k, v, gammas, chunk);
  return {finish(x, o), scores};
}

std::unique_ptr<AttentionCache> Retention::make_cache(int64_t batch, int64_t) const {
  auto c = std::make_unique<RetentionCache>();
  c->owner = this;
  c->state =
      zeros({batch, config.heads, config.key_size, config.value_size}, q_proj->weight.dtype());  // (B, h, dk, dv)
  return c;
}

Tensor Retention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  RetentionCache& c = step_cache<RetentionCache>(cache, "retention");
  check_step("retention", d_model_, x_new, c.state.size(0), c.length, -1);
  NoGradGuard no_grad;
  const int64_t h = config.heads;
  Tensor q = split_heads((*q_proj)(x_new), h) * (1.0 / std::sqrt(double(config.key_size)));  // (B, h, T, dk)
  Tensor k = split_heads((*k_proj)(x_new), h), v = split_heads((*v_proj)(x_new), h);         // (B, h, T, dk|dv)
  Tensor o = retention::recurrent(q, k, v, gammas, c.state);                                 // (B, h, T, dv)
  c.length += x_new.size(1);
  return finish(x_new, o);  // (B, T, D)
}

std::string Retention::spec() const {
  const VariantSchema s = schema();
  OptionValues v;
  set_head_options(v, config, s);
  bool same = true;
  for (double g : gammas) same &= g == gammas[0];
  v.set("decay", same ? std::vector<double>{gammas[0]} : gammas).set("chunk", chunk);
  return format_spec(s, v);
}

std::shared_ptr<Attention> Retention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.heads, "retention");
  HeadConfig c = config;
  c.heads = static_cast<int64_t>(keep.size());
  std::vector<double> kept;
  for (int64_t i : keep) kept.push_back(gammas[i]);
  auto out = std::make_shared<Retention>(d_model_, c, kept, chunk);
  const int64_t dk = config.key_size, dv = config.value_size;
  copy_pruned_state(*this, *out, keep,
                    {{"q_proj.", dk}, {"k_proj.", dk}, {"v_proj.", dv}, {"g_proj.", dv}, {"out_proj.weight", dv, 1}},
                    "retention");
  return out;
}

}  // namespace attnlab::nn
