// `synthesizer` (see synthesizer.hpp): the six logit parts, their mixture, and head pruning.
//
// Initialisation (docs/attention.md fixes only random/fixed_random): Linear layers (w1, the vanilla
// q/k projections, v_proj, out_proj) as PyTorch's Linear; the per-head layers w2, wa, wb as h
// stacked Linear(dh, out), i.e. U(-1/sqrt(dh), 1/sqrt(dh)) for weight and bias; r1 and r2 from
// N(0, 1) like the paper's Mesh TensorFlow code (random_normal_initializer); random.logits and
// fixed_random.logits from N(0, 1); mix_logits zeros (docs/attention.md, "synthesizer").
#include "nn/attention/synthesizer.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/mha.hpp"
#include "nn/init.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {
namespace {

const std::vector<std::string> kPartNames = {"dense",           "random",           "fixed_random",
                                             "factorized_dense", "factorized_random", "vanilla"};

std::string join_parts(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : "+") + p;
  return s;
}

class DenseLogits : public SynthesizerPart {
 public:
  DenseLogits(int64_t d_model, const SynthesizerConfig& c) : heads(c.head.heads) {
    w1 = register_module("w1", std::make_shared<Linear>(d_model, heads * c.hidden, c.head.bias));
    w2 = register_module("w2", std::make_shared<HeadwiseLinear>(heads, c.max_len, c.hidden, c.head.bias));
  }
  Tensor logits(const Tensor& x) override {
    Tensor hid = split_heads(relu((*w1)(x)), heads);  // (B, h, N, dh)
    return w2->forward(hid, x.size(1));               // (B, h, N, N)
  }
  Tensor logits_rows(const Tensor& x_new, int64_t start, const Tensor&) override {
    Tensor hid = split_heads(relu((*w1)(x_new)), heads);  // (B, h, T, dh)
    return w2->forward(hid, start + x_new.size(1));       // (B, h, T, L)
  }
  std::string type_name() const override { return "DenseSynthesizer"; }
  int64_t heads;
  std::shared_ptr<Linear> w1;
  std::shared_ptr<HeadwiseLinear> w2;
};

class FactorizedDenseLogits : public SynthesizerPart {
 public:
  FactorizedDenseLogits(int64_t d_model, const SynthesizerConfig& c) : heads(c.head.heads), a(c.a), b(c.b) {
    w1 = register_module("w1", std::make_shared<Linear>(d_model, heads * c.hidden, c.head.bias));
    wa = register_module("wa", std::make_shared<HeadwiseLinear>(heads, a, c.hidden, c.head.bias));
    wb = register_module("wb", std::make_shared<HeadwiseLinear>(heads, b, c.hidden, c.head.bias));
  }
  Tensor logits(const Tensor& x) override { return columns(x, x.size(1)); }
  Tensor logits_rows(const Tensor& x_new, int64_t start, const Tensor&) override {
    return columns(x_new, start + x_new.size(1));  // a row depends on its own input only
  }
  // The rows of x's positions over the columns [0, M): x (B, N, D) -> (B, h, N, M).
  Tensor columns(const Tensor& x, int64_t M) {
    Tensor hid = split_heads(relu((*w1)(x)), heads);  // (B, h, N, dh)
    Tensor fa = wa->forward(hid, a);                  // (B, h, N, a)
    Tensor fb = wb->forward(hid, b);                  // (B, h, N, b)
    // Column m of S reads A at m mod a and Bf at m div a: A tiled b times times Bf repeated a times.
    std::vector<int64_t> ia(M), ib(M);
    for (int64_t m = 0; m < M; ++m) ia[m] = m % a, ib[m] = m / a;
    return index_select(fa, 3, from_vector(ia)) * index_select(fb, 3, from_vector(ib));  // (B, h, N, M)
  }
  std::string type_name() const override { return "FactorizedDenseSynthesizer"; }
  int64_t heads, a, b;
  std::shared_ptr<Linear> w1;
  std::shared_ptr<HeadwiseLinear> wa, wb;
};

// `random` (a trained parameter) and `fixed_random` (a buffer the optimizer never sees).
class RandomLogits : public SynthesizerPart {
 public:
  RandomLogits(const SynthesizerConfig& c, bool trained) : trained(trained) {
    Tensor t = init::normal_(empty({c.head.heads, c.max_len, c.max_len}), 0, 1);  // (h, L, L)
    table = trained ? register_parameter("logits", t) : register_buffer("logits", t);
  }
  Tensor logits(const Tensor& x) override {
    const int64_t N = x.size(1);
    return unsqueeze(narrow(narrow(table, 1, 0, N), 2, 0, N), 0);  // (1, h, N, N)
  }
  Tensor logits_rows(const Tensor& x_new, int64_t start, const Tensor&) override {
    const int64_t T = x_new.size(1);
    return unsqueeze(narrow(narrow(table, 1, start, T), 2, 0, start + T), 0);  // (1, h, T, L)
  }
  std::string type_name() const override { return trained ? "RandomSynthesizer" : "FixedRandomSynthesizer"; }
  bool trained;
  Tensor table;  // (h, L, L)
};

class FactorizedRandomLogits : public SynthesizerPart {
 public:
  explicit FactorizedRandomLogits(const SynthesizerConfig& c) {
    r1 = register_parameter("r1", init::normal_(empty({c.head.heads, c.max_len, c.factor}), 0, 1));  // (h, L, k)
    r2 = register_parameter("r2", init::normal_(empty({c.head.heads, c.max_len, c.factor}), 0, 1));  // (h, L, k)
  }
  Tensor logits(const Tensor& x) override {
    const int64_t N = x.size(1);
    Tensor s = matmul(narrow(r1, 1, 0, N), transpose(narrow(r2, 1, 0, N), 1, 2));  // (h, N, N)
    return unsqueeze(s, 0);                                                          // (1, h, N, N)
  }
  Tensor logits_rows(const Tensor& x_new, int64_t start, const Tensor&) override {
    const int64_t T = x_new.size(1);
    Tensor s = matmul(narrow(r1, 1, start, T), transpose(narrow(r2, 1, 0, start + T), 1, 2));  // (h, T, L)
    return unsqueeze(s, 0);                                                                    // (1, h, T, L)
  }
  std::string type_name() const override { return "FactorizedRandomSynthesizer"; }
  Tensor r1, r2;
};

class VanillaLogits : public SynthesizerPart {
 public:
  VanillaLogits(int64_t d_model, const SynthesizerConfig& c) : heads(c.head.heads), key_size(c.head.key_size) {
    q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, heads * key_size, c.head.bias));
    k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, heads * key_size, c.head.bias));
  }
  Tensor logits(const Tensor& x) override {
    Tensor q = split_heads((*q_proj)(x), heads) * (1.0 / std::sqrt(double(key_size)));  // (B, h, N, dk)
    Tensor k = split_heads((*k_proj)(x), heads);                                        // (B, h, N, dk)
    return matmul(q, transpose(k, -2, -1));                                             // (B, h, N, N)
  }
  Tensor logits_rows(const Tensor& x_new, int64_t start, const Tensor& keys) override {
    const int64_t T = x_new.size(1);
    Tensor q = split_heads((*q_proj)(x_new), heads) * (1.0 / std::sqrt(double(key_size)));  // (B, h, T, dk)
    write_rows(keys, 2, start, split_heads((*k_proj)(x_new), heads));                       // rows [start, L)
    return matmul(q, transpose(narrow(keys, 2, 0, start + T), -2, -1));                     // (B, h, T, L)
  }
  std::string type_name() const override { return "VanillaScores"; }
  int64_t heads, key_size;
  std::shared_ptr<Linear> q_proj, k_proj;
};

std::shared_ptr<SynthesizerPart> make_part(const std::string& name, int64_t d_model, const SynthesizerConfig& c) {
  if (name == "dense") return std::make_shared<DenseLogits>(d_model, c);
  if (name == "random") return std::make_shared<RandomLogits>(c, true);
  if (name == "fixed_random") return std::make_shared<RandomLogits>(c, false);
  if (name == "factorized_dense") return std::make_shared<FactorizedDenseLogits>(d_model, c);
  if (name == "factorized_random") return std::make_shared<FactorizedRandomLogits>(c);
  if (name == "vanilla") return std::make_shared<VanillaLogits>(d_model, c);
  fail<ValueError>("synthesizer: unknown part {} (allowed: {})", name, join_parts(kPartNames));
}

// Checks what the constructor relies on, so that a config built in code fails as clearly as a
// spec string.
void validate(const SynthesizerConfig& c) {
  if (c.parts.empty()) fail<ValueError>("synthesizer: parts is empty; name one or more of {}", join_parts(kPartNames));
  for (size_t i = 0; i < c.parts.size(); ++i) {
    bool known = false;
    for (const std::string& n : kPartNames) known |= n == c.parts[i];
    if (!known) fail<ValueError>("synthesizer: unknown part {} (allowed: {})", c.parts[i], join_parts(kPartNames));
    for (size_t j = 0; j < i; ++j)
      if (c.parts[j] == c.parts[i])
        fail<ValueError>("synthesizer: part {} is named twice in parts={}", c.parts[i], join_parts(c.parts));
  }
  auto positive = [](const char* name, int64_t v) {
    if (v <= 0) fail<ValueError>("synthesizer: {} must be positive, got {}", name, v);
  };
  positive("heads", c.head.heads);
  positive("value_size", c.head.value_size);
  positive("max_len", c.max_len);
  if (c.has("dense") || c.has("factorized_dense")) positive("hidden", c.hidden);
  if (c.has("factorized_random")) positive("factor", c.factor);
  if (c.has("vanilla")) positive("key_size", c.head.key_size);
  if (c.has("factorized_dense")) {
    positive("a", c.a);
    positive("b", c.b);
    if (c.a * c.b < c.max_len)
      fail<ValueError>("synthesizer: factorized_dense needs a*b >= max_len, got a={}, b={} (a*b={}) with max_len={}",
                       c.a, c.b, c.a * c.b, c.max_len);
  }
}

}  // namespace

bool SynthesizerConfig::has(const std::string& part) const {
  for (const std::string& p : parts)
    if (p == part) return true;
  return false;
}

HeadwiseLinear::HeadwiseLinear(int64_t heads, int64_t out, int64_t in, bool has_bias) {
  // Each head's slice is initialised like a PyTorch Linear(in, out).
  const double bound = 1.0 / std::sqrt(double(in));
  weight = register_parameter("weight", init::uniform_(empty({heads, out, in}), -bound, bound));  // (h, out, in)
  if (has_bias) bias = register_parameter("bias", init::uniform_(empty({heads, out}), -bound, bound));  // (h, out)
}

Tensor HeadwiseLinear::forward(const Tensor& t, int64_t rows) {
  Tensor y = matmul(t, transpose(narrow(weight, 1, 0, rows), 1, 2));  // (B, h, N, in) @ (h, in, rows)
  if (bias.defined()) y = y + unsqueeze(narrow(bias, 1, 0, rows), 1);  // + (h, 1, rows)
  return y;                                                            // (B, h, N, rows)
}

VariantSchema Synthesizer::schema() {
  using T = OptionType;
  VariantSchema s{"synthesizer", "synthetic attention: dense/random/factorized logits (Tay et al. 2020)",
                  multihead_options(),
                  "O(B h N^2 dv) plus the parts: dense O(B h N dh (D + L)), random O(h N^2), vanilla O(B h N^2 dk)",
                  "O(B h N^2) plus the parts' parameters (dense h L dh, random h L^2)"};
  for (OptionSchema& o : s.options)
    if (o.name == "key_size") o.doc = "key size dk of the vanilla part (default D/h)";
  s.options.insert(s.options.begin(),
                   {{"parts", T::List, "dense", "logit sources; several are mixed by softmax(mix_logits)",
                     kPartNames},
                    {"max_len", T::Int, "512", "longest sequence L (N <= L)", {}},
                    {"hidden", T::Int, "", "hidden size per head dh of dense/factorized_dense (default D/h)", {}},
                    {"factor", T::Int, "8", "rank k of factorized_random", {}},
                    {"a", T::Int, "", "factorized_dense width a (default smallest a >= sqrt(L))", {}},
                    {"b", T::Int, "", "factorized_dense width b (default ceil(L/a))", {}}});
  s.capabilities = Capabilities::all();
  s.capabilities.cross = Support::no;  // the logits come from x alone (and from positions)
  return s;
}

std::shared_ptr<Attention> Synthesizer::make(const Options& o, int64_t d_model) {
  SynthesizerConfig c;
  c.parts = o.get_list("parts");  // rejects unknown and repeated parts
  const int64_t heads = o.get_int("heads");
  if (heads <= 0) o.reject("heads", "must be positive");
  // key_size only matters to the vanilla part: without it, an h that does not divide D must not
  // ask for a key_size nobody uses.
  if (!c.has("vanilla") && !o.given("key_size") && d_model % heads != 0) {
    if (!o.given("value_size"))
      fail<ValueError>("synthesizer: value_size defaults to d_model/heads, but heads={} does not divide d_model={}; "
                       "give value_size explicitly",
                       heads, d_model);
    c.head = read_head_config(o, d_model, 1);
  } else {
    c.head = read_head_config(o, d_model, heads);
  }
  if (!c.has("vanilla")) c.head.key_size = 0;
  c.max_len = o.get_int("max_len");
  if (c.max_len <= 0) o.reject("max_len", "must be positive");
  c.factor = o.get_int("factor");
  if (c.factor <= 0) o.reject("factor", "must be positive");
  if (auto v = o.get_optional_int("hidden")) {
    if (*v <= 0) o.reject("hidden", "must be positive");
    c.hidden = *v;
  } else if (c.has("dense") || c.has("factorized_dense")) {
    if (d_model % heads != 0)
      fail<ValueError>("synthesizer: hidden defaults to d_model/heads, but heads={} does not divide d_model={}; "
                       "give hidden explicitly",
                       heads, d_model);
    c.hidden = d_model / heads;
  }
  if (c.has("factorized_dense")) {
    auto a = o.get_optional_int("a"), b = o.get_optional_int("b");
    if (a && *a <= 0) o.reject("a", "must be positive");
    if (b && *b <= 0) o.reject("b", "must be positive");
    const int64_t L = c.max_len;
    if (!a && !b) {
      c.a = 1;
      while (c.a * c.a < L) ++c.a;  // the smallest a >= sqrt(L), in integers
      c.b = (L + c.a - 1) / c.a;
    } else {
      c.a = a ? *a : (L + *b - 1) / *b;
      c.b = b ? *b : (L + c.a - 1) / c.a;
    }
  }
  return std::make_shared<Synthesizer>(d_model, c);
}

Synthesizer::Synthesizer(int64_t d_model, const SynthesizerConfig& c) : config(c), gen(default_generator().next_u64()) {
  register_generator("generator", gen);  // attention dropout: saved in checkpoints
  if (d_model <= 0) fail<ValueError>("synthesizer: d_model must be positive, got {}", d_model);
  validate(c);
  d_model_ = d_model;
  const int64_t h = c.head.heads, dv = c.head.value_size;
  for (const std::string& p : c.parts) parts.push_back(register_module(p, make_part(p, d_model, c)));
  if (parts.size() > 1) mix_logits = register_parameter("mix_logits", zeros({static_cast<int64_t>(parts.size())}));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, h * dv, c.head.bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(h * dv, d_model, c.head.bias));
  if (c.head.gate.kind == "hard_concrete")
    gate = register_module("gate", std::make_shared<HardConcreteGate>(h, c.head.gate));
  head_mask = register_buffer("head_mask", ones({h}));
}

Tensor Synthesizer::mixture_weights() const {
  if (!mix_logits.defined()) return ones({1}, head_mask.dtype());
  return softmax(mix_logits, 0);  // (P)
}

AttentionResult Synthesizer::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                     bool need_weights) {
  const bool is_causal = causal || config.head.causal;
  check_inputs("synthesizer", d_model_, x, context, is_causal, /*allows_context=*/false);
  const int64_t B = x.size(0), N = x.size(1), h = config.head.heads;
  if (N > config.max_len)
    fail<ShapeError>("synthesizer: sequence length N={} exceeds max_len={}; build the layer with max_len >= {}", N,
                     config.max_len, N);
  Tensor s;  // (B|1, h, N, N)
  if (parts.size() == 1) {
    s = parts[0]->logits(x);
  } else {
    Tensor w = mixture_weights();  // (P)
    for (size_t p = 0; p < parts.size(); ++p) {
      Tensor term = parts[p]->logits(x) * select(w, 0, static_cast<int64_t>(p));  // (B|1, h, N, N)
      s = s.defined() ? s + term : term;
    }
  }
  // Input-independent parts give one (1, h, N, N) table; a per-example mask needs the batch dim.
  if (s.size(0) != B) s = expand(s, {B, h, N, N});                                 // (B, h, N, N)
  Tensor p = softmax(s, -1, allowed_mask(mask, N, N, is_causal, "synthesizer"));  // (B, h, N, N)
  Tensor v = split_heads((*v_proj)(x), h);                                         // (B, h, N, dv)
  Tensor o = matmul(attention_dropout(p, config.head.attn_dropout, is_training(), gen), v);  // (B, h, N, dv)
  o = o * head_scale(gate, head_mask);                                                       // (B, h, N, dv)
  return {(*out_proj)(merge_heads(o)), need_weights ? p : Tensor()};                         // (B, N, D)
}

std::unique_ptr<AttentionCache> Synthesizer::make_cache(int64_t batch, int64_t max_len) const {
  const int64_t L = std::min(max_len, config.max_len);  // the layer never takes more positions
  return make_kv_cache(this, batch, L, config.has("vanilla") ? config.head.heads : 0, config.head.key_size,
                       config.head.heads, config.head.value_size, v_proj->weight.dtype());
}

Tensor Synthesizer::forward_step(const Tensor& x_new, AttentionCache& cache) {
  KVCache& c = step_cache<KVCache>(cache, "synthesizer");
  check_step("synthesizer", d_model_, x_new, c.v.size(0), c.length, -1);
  const int64_t B = x_new.size(0), T = x_new.size(1), L = c.length + T, h = config.head.heads;
  if (L > config.max_len)
    fail<ShapeError>("synthesizer: forward_step: {} positions exceed max_len={}; build the layer with max_len >= {}",
                     L, config.max_len, L);
  if (L > c.v.size(2))
    fail<ValueError>("synthesizer: forward_step: {} positions exceed the cache's max_len {}", L, c.v.size(2));
  NoGradGuard no_grad;
  Tensor s;  // (B|1, h, T, L): forward's logits, rows [length, L)
  if (parts.size() == 1) {
    s = parts[0]->logits_rows(x_new, c.length, c.k);
  } else {
    Tensor w = mixture_weights();  // (P)
    for (size_t p = 0; p < parts.size(); ++p) {
      Tensor term = parts[p]->logits_rows(x_new, c.length, c.k) * select(w, 0, static_cast<int64_t>(p));
      s = s.defined() ? s + term : term;  // (B|1, h, T, L)
    }
  }
  if (s.size(0) != B) s = expand(s, {B, h, T, L});                    // (B, h, T, L)
  Tensor p = softmax(s, -1, step_causal_mask(T, c.length));           // (B, h, T, L)
  write_rows(c.v, 2, c.length, split_heads((*v_proj)(x_new), h));      // rows [length, L)
  Tensor o = matmul(p, narrow(c.v, 2, 0, L)) * head_scale(gate, head_mask);  // (B, h, T, dv)
  c.length = L;
  return (*out_proj)(merge_heads(o));  // (B, T, D)
}

std::string Synthesizer::spec() const {
  const SynthesizerConfig& c = config;
  const VariantSchema s = schema();
  OptionValues v;
  v.set("parts", c.parts).set("max_len", c.max_len);
  if (c.has("dense") || c.has("factorized_dense")) v.set("hidden", c.hidden);
  if (c.has("factorized_random")) v.set("factor", c.factor);
  if (c.has("factorized_dense")) v.set("a", c.a).set("b", c.b);
  set_head_options(v, c.head, s);  // key_size only with a vanilla part (0 otherwise)
  return format_spec(s, v);
}

std::shared_ptr<Attention> Synthesizer::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.head.heads, "synthesizer");
  SynthesizerConfig c = config;  // sizes are explicit here, so the smaller layer keeps them
  c.head.heads = static_cast<int64_t>(keep.size());
  auto out = std::make_shared<Synthesizer>(d_model_, c);
  // Every tensor except mix_logits and out_proj.bias is per head: head i owns the block
  // [i*d, (i+1)*d) of dim 0 (out_proj: dim 1), with d the head's width in that tensor; w2, wa,
  // wb, the random/fixed_random logits, r1 and r2 are (h, ...).
  const int64_t dk = c.head.key_size, dv = c.head.value_size;
  copy_pruned_state(*this, *out, keep,
                    {{"out_proj.weight", dv, 1}, {"v_proj.", dv}, {"vanilla.", dk}, {"dense.w1.", c.hidden},
                     {"factorized_dense.w1.", c.hidden}},
                    "synthesizer", [&](const std::string& name, const Tensor& from, const Tensor&) {
                      return name == "mix_logits" || name == "out_proj.bias" ? from : take_heads(from, keep, 1, 0);
                    });
  return out;
}

}  // namespace attnlab::nn
