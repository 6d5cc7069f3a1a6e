#include "nn/attention/attention.hpp"

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

Tensor Attention::l0_penalty() const {
  for (auto& [name, child] : named_children())
    if (auto gate = std::dynamic_pointer_cast<HardConcreteGate>(child)) return gate->l0_penalty();
  return zeros({});
}

namespace {

// The default decoding state: every input so far, recomputed over at each step.
struct InputCache : AttentionCache {
  Tensor x;  // (B, length, D)
  int64_t numel() const override { return x.defined() ? x.numel() : 0; }
};

}  // namespace

bool recomputes_per_step(const AttentionCache& cache) { return dynamic_cast<const InputCache*>(&cache) != nullptr; }

std::unique_ptr<AttentionCache> Attention::make_cache(int64_t, int64_t) const {
  auto c = std::make_unique<InputCache>();
  c->owner = this;
  return c;
}

Tensor Attention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  InputCache& c = step_cache<InputCache>(cache, spec());
  NoGradGuard no_grad;
  c.x = c.x.defined() ? cat({c.x, x_new}, 1) : x_new;  // (B, length + T, D)
  c.length = c.x.size(1);
  Tensor y = forward(c.x, {}, {}, /*causal=*/true).output;  // (B, length + T, D)
  return narrow(y, 1, c.length - x_new.size(1), x_new.size(1));
}

int64_t KVCache::numel() const { return (k.defined() ? k.numel() : 0) + (v.defined() ? v.numel() : 0); }

std::unique_ptr<KVCache> make_kv_cache(const Attention* owner, int64_t batch, int64_t max_len, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                       DType dtype) {
  auto c = std::make_unique<KVCache>();
  c->owner = owner;
  if (hk > 0) c->k = zeros({batch, hk, max_len, dk}, dtype);  // (B, hk, max_len, dk)
  c->v = zeros({batch, hv, max_len, dv}, dtype);              // (B, hv, max_len, dv)
  return c;
}

void check_step(const std::string& who, int64_t d_model, const Tensor& x_new, int64_t batch, int64_t length,
                int64_t max_len) {
  check_inputs(who.c_str(), d_model, x_new, {}, true);
  if (x_new.size(1) < 1) fail<ShapeError>("{}: forward_step needs at least one new position, got 0", who);
  if (x_new.size(0) != batch)
    fail<ShapeError>("{}: forward_step: batch {} but the cache was made for {}", who, x_new.size(0), batch);
  if (max_len >= 0 && length + x_new.size(1) > max_len)
    fail<ValueError>("{}: forward_step: {} positions exceed the cache's max_len {}", who, length + x_new.size(1),
                     max_len);
}

void write_rows(const Tensor& buffer, int64_t dim, int64_t at, const Tensor& rows) {
  Tensor dst = narrow(buffer, dim, at, rows.size(dim));
  kernels::copy_(dst, rows);
}

Tensor step_causal_mask(int64_t t, int64_t length) {
  return t > 1 ? tril(ones({t, length + t}, kBool), length) : Tensor();  // (T, L): m <= length + row
}

std::vector<OptionSchema> multihead_options() {
  using T = OptionType;
  return {
      {"heads", T::Int, "8", "number of heads h", {}},
      {"key_size", T::Int, "", "key/query size per head dk (default D/h)", {}},
      {"value_size", T::Int, "", "value size per head dv (default D/h)", {}},
      {"bias", T::Bool, "true", "bias tensors in every projection", {}},
      {"causal", T::Bool, "false", "allow only m <= n", {}},
      {"attn_dropout", T::Double, "0", "dropout on attention probabilities (train mode)", {}},
      {"gate", T::Choice, "none", "head gates", {"none", "hard_concrete"}},
      {"gate_init", T::Double, "2.0", "initial gate.log_alpha", {}},
      {"gate_temperature", T::Double, "0.33", "Hard Concrete temperature beta", {}},
      {"gate_gamma", T::Double, "-0.1", "Hard Concrete stretch lower end", {}},
      {"gate_zeta", T::Double, "1.1", "Hard Concrete stretch upper end", {}},
      {"gate_hard", T::Bool, "false", "eval-mode gates rounded to 0/1", {}},
  };
}

HeadConfig read_head_config(const Options& o, int64_t d_model, int64_t heads_for_defaults) {
  HeadConfig c;
  c.heads = o.get_int("heads");
  if (c.heads <= 0) o.reject("heads", "must be positive");
  if (d_model <= 0) fail<ValueError>("{}: d_model must be positive, got {}", o.variant(), d_model);
  auto size = [&](const char* name) {
    if (auto v = o.get_optional_int(name)) {
      if (*v <= 0) o.reject(name, "must be positive");
      return *v;
    }
    if (d_model % heads_for_defaults != 0)
      fail<ValueError>("{}: {} defaults to d_model/heads, but heads={} does not divide d_model={}; give {} explicitly",
                       o.variant(), name, heads_for_defaults, d_model, name);
    return d_model / heads_for_defaults;
  };
  c.key_size = o.accepts("key_size") ? size("key_size") : 0;
  c.value_size = size("value_size");
  c.bias = o.accepts("bias") && o.get_bool("bias");
  c.causal = o.get_bool("causal");
  c.attn_dropout = o.get_double("attn_dropout");
  if (!(c.attn_dropout >= 0 && c.attn_dropout < 1)) o.reject("attn_dropout", "must be in [0, 1)");
  c.gate.kind = o.get_choice("gate");
  c.gate.init = o.get_double("gate_init");
  c.gate.temperature = o.get_double("gate_temperature");
  c.gate.gamma = o.get_double("gate_gamma");
  c.gate.zeta = o.get_double("gate_zeta");
  c.gate.hard = o.get_bool("gate_hard");
  // Like rope_base without rope: a gate sub-option without a gate would be dropped silently.
  if (c.gate.kind == "none")
    for (const char* sub : {"gate_init", "gate_temperature", "gate_gamma", "gate_zeta", "gate_hard"})
      if (o.given(sub)) o.reject(sub, "needs gate=hard_concrete");
  return c;
}

void set_head_options(OptionValues& values, const HeadConfig& c, const VariantSchema& schema) {
  auto set = [&](const char* name, const auto& value) {
    for (const OptionSchema& o : schema.options)
      if (o.name == name) values.set(name, value);
  };
  set("heads", c.heads);
  if (c.key_size > 0) set("key_size", c.key_size);
  set("value_size", c.value_size);
  set("bias", c.bias);
  set("causal", c.causal);
  set("attn_dropout", c.attn_dropout);
  if (c.gate.kind == "none") return;
  set("gate", c.gate.kind);
  set("gate_init", c.gate.init);
  set("gate_temperature", c.gate.temperature);
  set("gate_gamma", c.gate.gamma);
  set("gate_zeta", c.gate.zeta);
  set("gate_hard", c.gate.hard);
}

const Tensor& check_inputs(const char* variant, int64_t d_model, const Tensor& x, const Tensor& context, bool causal,
                           bool allows_context) {
  if (!x.defined() || x.dim() != 3 || x.size(2) != d_model)
    fail<ShapeError>("{}: input must be (B, N, {}), got {}", variant, d_model,
                     x.defined() ? to_string(x.shape()) : "undefined");
  if (!context.defined()) return x;
  if (!allows_context) fail<ValueError>("{}: self-attention only; a context (cross-attention) is not allowed", variant);
  if (causal) fail<ValueError>("{}: causal attention needs self-attention; got a context", variant);
  if (context.dim() != 3 || context.size(0) != x.size(0) || context.size(2) != d_model)
    fail<ShapeError>("{}: context must be ({}, M, {}), got {}", variant, x.size(0), d_model, to_string(context.shape()));
  return context;
}

Tensor split_heads(const Tensor& t, int64_t heads) {
  const int64_t B = t.size(0), N = t.size(1), d = t.size(2) / heads;
  return transpose(reshape(t, {B, N, heads, d}), 1, 2);  // (B, h, N, d)
}

Tensor merge_heads(const Tensor& t) {
  const int64_t B = t.size(0), h = t.size(1), N = t.size(2), d = t.size(3);
  return reshape(transpose(t, 1, 2), {B, N, h * d});  // (B, N, h*d)
}

void check_mask(const Tensor& mask, int64_t n, int64_t m, const char* variant) {
  if (!mask.defined()) return;
  if (mask.dtype() != kBool)
    fail<DTypeError>("{}: the mask must be bool (true = may attend), got {}", variant, dtype_name(mask.dtype()));
  if (mask.dim() > 4 || (mask.dim() >= 1 && mask.size(-1) != m && mask.size(-1) != 1) ||
      (mask.dim() >= 2 && mask.size(-2) != n && mask.size(-2) != 1))
    fail<ShapeError>("{}: mask of shape {} does not broadcast to (B, h, {}, {})", variant, to_string(mask.shape()), n, m);
}

bool is_key_mask(const Tensor& mask) { return !mask.defined() || mask.dim() < 2 || mask.size(-2) == 1; }

Tensor key_mask(const Tensor& mask, int64_t n, int64_t m, const char* variant) {
  check_mask(mask, n, m, variant);
  if (!mask.defined()) return mask;
  if (!is_key_mask(mask))
    fail<ValueError>("{}: only key masks are supported, constant along the queries and shaped (B|1, h|1, 1, {}); got {}",
                     variant, m, to_string(mask.shape()));
  Tensor k = mask;
  while (k.dim() < 4) k = unsqueeze(k, 0);  // (B|1, h|1, 1, M|1)
  return k;
}

Tensor allowed_mask(const Tensor& mask, int64_t n, int64_t m, bool causal, const char* variant) {
  check_mask(mask, n, m, variant);
  Tensor allowed = mask;
  if (causal) {
    Tensor tri = tril(ones({n, m}, kBool));  // (N, M): m <= n
    allowed = allowed.defined() ? logical_and(allowed, tri) : tri;
  }
  return allowed;
}

std::string Attention::variant_name() const {
  const std::string s = spec();
  return s.substr(0, s.find('('));
}

AttentionResult Attention::forward_packed(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                          bool need_weights) {
  if (!segment_ids.defined()) return forward(x, {}, mask, causal, need_weights);
  const std::string who = variant_name();
  check_inputs(who.c_str(), d_model_, x, {}, causal);
  check_segment_ids(segment_ids, x.size(0), x.size(1), who);
  return forward_segments(x, segment_ids, mask, causal, need_weights);
}

AttentionResult Attention::forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask,
                                            bool causal, bool need_weights) {
  check_mask(mask, x.size(1), x.size(1), variant_name().c_str());
  return forward(x, {}, segment_mask(segment_ids, mask), causal, need_weights);
}

void check_segment_ids(const Tensor& ids, int64_t batch, int64_t n, const std::string& who) {
  if (!ids.defined()) return;
  if (ids.dtype() != kInt64)
    fail<DTypeError>("{}: segment_ids must be int64 (B={}, N={}), got dtype {}", who, batch, n, dtype_name(ids.dtype()));
  if (ids.dim() != 2 || ids.size(0) != batch || ids.size(1) != n)
    fail<ShapeError>("{}: segment_ids must be (B={}, N={}), got shape {}", who, batch, n, to_string(ids.shape()));
}

Tensor segment_mask(const Tensor& ids, const Tensor& mask) {
  Tensor same = unsqueeze(eq(unsqueeze(ids, 2), unsqueeze(ids, 1)), 1);  // (B, 1, N, N)
  return mask.defined() ? logical_and(same, mask) : same;
}

void reject_segment_ids(const std::string& variant, const char* why) {
  fail<ValueError>("{}: segment_ids (packed sequences) are not supported: {}; variants that take them: every variant "
                   "that takes full masks (docs/attention.md, \"Packed sequences\")",
                   variant, why);
}

Tensor attention_dropout(const Tensor& p, double rate, bool training, Generator& gen) {
  if (!training || rate == 0) return p;
  Tensor keep = bernoulli(p.shape(), 1 - rate, gen, p.dtype());
  return p * keep * (1.0 / (1 - rate));
}

Tensor take_heads(const Tensor& w, const std::vector<int64_t>& keep, int64_t d, int64_t dim) {
  std::vector<int64_t> rows;
  for (int64_t i : keep)
    for (int64_t r = 0; r < d; ++r) rows.push_back(i * d + r);
  return kernels::index_select(w, dim, from_vector(rows));
}

std::vector<int64_t> check_keep(const std::vector<int64_t>& keep, int64_t heads, const char* variant) {
  if (keep.empty()) fail<ValueError>("{}: prune_heads needs at least one head to keep", variant);
  std::vector<bool> seen(heads, false);
  for (int64_t i : keep) {
    if (i < 0 || i >= heads) fail<IndexError>("{}: prune_heads: head {} is out of range (heads={})", variant, i, heads);
    if (seen[i]) fail<ValueError>("{}: prune_heads: head {} is listed twice", variant, i);
    seen[i] = true;
  }
  return keep;
}

void copy_pruned_state(const Attention& from, Attention& to, const std::vector<int64_t>& keep,
                       const std::vector<HeadSlice>& slices, const std::string& variant, const PruneRest& rest) {
  const NamedTensors params = from.named_parameters();
  if (!params.empty()) to.to(params.front().second.dtype());
  NoGradGuard no_grad;
  const TensorMap src = from.state_dict();
  for (auto& [name, dst] : to.state_dict()) {
    auto it = src.find(name);
    const Tensor t = it == src.end() ? Tensor() : it->second;
    const HeadSlice* slice = nullptr;
    for (const HeadSlice& s : slices)
      if (!slice && name.rfind(s.prefix, 0) == 0) slice = &s;
    Tensor value;
    if (t.defined() && slice) {
      value = take_heads(t, slice->heads.empty() ? keep : slice->heads, slice->size, slice->dim);
    } else if (t.defined() && (name == "head_mask" || name == "gate.log_alpha")) {
      value = take_heads(t, keep, 1, 0);
    } else if (rest) {
      value = rest(name, t, dst);
    } else {
      if (!t.defined()) fail<ValueError>("{}: prune_heads: the smaller layer has {} which this one lacks", variant, name);
      value = t;
    }
    if (value.shape() != dst.shape())
      fail<ShapeError>("{}: prune_heads: {} pruned to {}, expected {}", variant, name, to_string(value.shape()),
                       to_string(dst.shape()));
    Tensor d = dst;
    kernels::copy_(d, value);
  }
  to.train(from.is_training());
}

}  // namespace attnlab::nn
