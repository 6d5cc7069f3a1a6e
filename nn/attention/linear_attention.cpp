// `linear` (see linear_attention.hpp) and the kernelized core shared with `performer`.
//
// Choices the papers leave open (docs/attention.md, `linear`):
// - A mask that varies along N cannot be folded into per-key sums: it falls back to the masked
//   quadratic form (correct, O(N M)); key masks and causality keep the linear-cost path.
// - "No allowed key" is decided from the mask, not from a zero denominator, so such a query
//   gets exactly zero (and zero gradients) whatever eps is.
// - attn_dropout must be 0: the linear-cost path never forms the probabilities it would drop.
#include "nn/attention/linear_attention.hpp"

#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/kernels/linear_scan.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {
namespace {

// num / (den + eps), with 1 instead of the denominator where `has` (an allowed key exists) is
// false; there num is an empty sum, so the output is 0.
Tensor normalise(const Tensor& num, const Tensor& den, const Tensor& eps, const Tensor& has) {
  Tensor d = den + eps;  // (B, h, N, 1)
  if (has.defined()) d = where(has, d, 1.0);
  return num / d;
}

// The masked quadratic form: A = allowed * (fq fk^T), P = A / (rowsum A + eps), O = P V.
KernelizedResult dense_form(const Tensor& fq, const Tensor& fk, const Tensor& v, const Tensor& eps, const Tensor& mask,
                            bool causal, const char* variant) {
  const int64_t N = fq.size(2), M = fk.size(2);
  Tensor allowed = allowed_mask(mask, N, M, causal, variant);  // undefined when all is allowed
  Tensor a = matmul(fq, transpose(fk, -1, -2));                // (B, h, N, M)
  Tensor has;
  if (allowed.defined()) {
    a = where(allowed, a, 0.0);
    has = gt(sum(to(allowed, fq.dtype()), {-1}, true), 0.0);  // (B|1, h|1, N|1, 1)
  }
  Tensor p = normalise(a, sum(a, {-1}, true), eps, has);  // (B, h, N, M)
  return {matmul(p, v), p};                              // (B, h, N, dv)
}

}  // namespace

KernelizedResult kernelized_attention(const Tensor& fq, const Tensor& fk, const Tensor& v, const Tensor& eps,
                                      const Tensor& mask, bool causal, bool need_weights, const char* variant) {
  const int64_t N = fq.size(2), M = fk.size(2), dv = v.size(3);
  check_mask(mask, N, M, variant);
  if (causal && N != M)
    fail<ShapeError>("{}: causal attention needs as many keys as queries, got N={} and M={}", variant, N, M);
  KernelizedResult r;
  if (!is_key_mask(mask)) {
    r = dense_form(fq, fk, v, eps, mask, causal, variant);
    if (!need_weights) r.attention = Tensor();
    return r;
  }
  Tensor km = key_mask(mask, N, M, variant);  // (B|1, h|1, 1, M|1) or undefined
  Tensor fkm = fk, has;                       // fkm (B, h, M, F): masked keys contribute nothing
  if (km.defined()) {
    km = expand(km, {km.size(0), km.size(1), 1, M});  // (B|1, h|1, 1, M)
    fkm = where(transpose(km, -1, -2), fk, 0.0);
    Tensor kf = to(km, fq.dtype());
    has = causal ? transpose(gt(cumsum(kf, -1), 0.0), -1, -2)  // (B|1, h|1, N, 1): an allowed m <= n
                 : gt(sum(kf, {-1}, true), 0.0);              // (B|1, h|1, 1, 1)
  }
  if (!causal) {
    Tensor kv = matmul(transpose(fkm, -1, -2), v);  // (B, h, F, dv)
    Tensor z = sum(fkm, {2}, true);                 // (B, h, 1, F)
    r.output = normalise(matmul(fq, kv), matmul(fq, transpose(z, -1, -2)), eps, has);  // (B, h, N, dv)
  } else {
    // One scan gives numerator and denominator: the ones column of [v, 1] accumulates z.
    Tensor v1 = cat({v, ones({v.size(0), v.size(1), M, 1}, v.dtype())}, -1);  // (B, h, N, dv+1)
    Tensor nd = scan::causal_product(fq, fkm, v1);                            // (B, h, N, dv+1)
    r.output = normalise(narrow(nd, -1, 0, dv), narrow(nd, -1, dv, 1), eps, has);
  }
  if (need_weights) r.attention = dense_form(fq, fk, v, eps, mask, causal, variant).attention;
  return r;
}

Tensor kernelized_step(KernelizedCache& c, const Tensor& fq, const Tensor& fk, const Tensor& v, const Tensor& eps) {
  const int64_t B = v.size(0), h = v.size(1), T = v.size(2), dv = v.size(3);
  Tensor v1 = cat({v, ones({B, h, T, 1}, v.dtype())}, -1);  // (B, h, T, dv+1): [v, 1]
  Tensor within = matmul(fq, transpose(fk, -1, -2));        // (B, h, T, T): phi(q_t) . phi(k_j)
  if (T > 1) within = where(tril(ones({T, T}, kBool)), within, 0.0);  // j <= t
  Tensor nd = matmul(fq, c.state) + matmul(within, v1);     // (B, h, T, dv+1)
  c.state = c.state + matmul(transpose(fk, -1, -2), v1);    // (B, h, F, dv+1)
  // Causal without a mask: every query sees at least itself, so no "no allowed key" case.
  return narrow(nd, -1, 0, dv) / (narrow(nd, -1, dv, 1) + eps);  // (B, h, T, dv)
}

std::unique_ptr<AttentionCache> LinearAttention::make_cache(int64_t batch, int64_t) const {
  auto c = std::make_unique<KernelizedCache>();
  c->owner = this;
  c->batch = batch;
  c->state = zeros({batch, config.heads, config.key_size, config.value_size + 1}, q_proj->weight.dtype());
  return c;
}

Tensor LinearAttention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  auto& c = step_cache<KernelizedCache>(cache, "linear");
  check_step("linear", d_model_, x_new, c.batch, c.length, -1);
  NoGradGuard no_grad;
  Heads hd = project(x_new, x_new);  // q (B, h, T, dk), k (B, h, T, dk), v (B, h, T, dv)
  Tensor o = kernelized_step(c, feature_map(hd.q), feature_map(hd.k), hd.v, scalar_tensor(eps, hd.q.dtype()));
  c.length += x_new.size(1);
  return finish(o);  // (B, T, D)
}

VariantSchema LinearAttention::schema() {
  using T = OptionType;
  VariantSchema s{"linear", "linear attention with phi = elu + 1 (Katharopoulos et al. 2020)", multihead_options(),
                  "non-causal O(B h (N + M) dk dv); causal O(B h N (dk + dv) (C + dk)), chunk C = 64; "
                  "+ projections O(B (N + M) D h (dk + dv)); a mask varying along N: O(B h N M (dk + dv))",
                  "O(B h (N + M) (dk + dv)): no N x M term (a mask varying along N, or need_weights: O(B h N M))"};
  for (OptionSchema& o : s.options)
    if (o.name == "attn_dropout") o.doc = "must be 0: linear attention forms no probabilities to drop";
  s.options.insert(s.options.begin(), {{"feature", T::Choice, "elu", "feature map phi (elu: elu(z) + 1)", {"elu"}},
                                       {"eps", T::Double, "1e-6", "added to the denominator", {}}});
  s.capabilities = Capabilities::all();
  return s;
}

std::shared_ptr<Attention> LinearAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  if (c.attn_dropout != 0)
    o.reject("attn_dropout", "must be 0: linear attention never forms the attention probabilities it would drop");
  const double eps = o.get_double("eps");
  if (!(eps >= 0) || !std::isfinite(eps)) o.reject("eps", "must be a finite number >= 0");
  return std::make_shared<LinearAttention>(d_model, c, eps);
}

LinearAttention::LinearAttention(int64_t d_model, const HeadConfig& c, double eps)
    : ProjectedAttention("linear", d_model, c), eps(eps) {}

Tensor LinearAttention::feature_map(const Tensor& z) { return elu(z) + 1.0; }

AttentionResult LinearAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                         bool need_weights) {
  const bool is_causal = causal || config.causal;
  const Tensor& c = check_inputs("linear", d_model_, x, context, is_causal);
  Heads hd = project(x, c);                                   // q (B, h, N, dk), k (B, h, M, dk), v (B, h, M, dv)
  Tensor fq = feature_map(hd.q), fk = feature_map(hd.k);      // no 1/sqrt(dk): the scale is learnt
  KernelizedResult r = kernelized_attention(fq, fk, hd.v, scalar_tensor(eps, fq.dtype()), mask, is_causal,
                                            need_weights, "linear");
  return {finish(r.output), r.attention};  // (B, N, D)
}

void LinearAttention::own_options(OptionValues& v) const {
  v.set("feature", "elu").set("eps", eps);
}

}  // namespace attnlab::nn
