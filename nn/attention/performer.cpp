// `performer` (see performer.hpp): the FAVOR+ feature map, the orthogonal random projection and
// its redraws. The attention itself is linear attention's kernelized core.
//
// Choices the papers leave open (docs/attention.md, `performer`):
// - The redraw happens after the T-th train-mode forward call (the graph of that call keeps the
//   projection it used); eval-mode calls neither count nor redraw.
// - The key shift c is the largest exponent over the keys that some query may attend; keys no
//   query may attend get exp(-inf) = 0 features, so they can never overflow.
// - attn_dropout must be 0, as for `linear`.
#include "nn/attention/performer.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "nn/attention/linear_attention.hpp"
#include "tensor/kernels.hpp"
#include "tensor/lapack.hpp"

namespace attnlab::nn {
namespace {

// Keys that at least one query may attend, as a (B|1, h|1, M|1, 1) bool column, or undefined
// when every key is.
Tensor keys_in_use(const Tensor& mask, int64_t n, int64_t m, const char* variant) {
  if (!mask.defined()) return {};
  if (is_key_mask(mask)) return transpose(key_mask(mask, n, m, variant), -1, -2);
  Tensor m4 = mask;
  while (m4.dim() < 4) m4 = unsqueeze(m4, 0);               // (B|1, h|1, N|1, M|1)
  Tensor any = gt(sum(to(m4, kFloat32), {-2}, true), 0.0);  // (B|1, h|1, 1, M|1)
  return transpose(any, -1, -2);
}

}  // namespace

VariantSchema Performer::schema() {
  using T = OptionType;
  VariantSchema s{"performer", "FAVOR+ positive orthogonal random features (Choromanski et al. 2021)",
                  multihead_options(),
                  "O(B h (N + M) m (dk + dv)); causal O(B h N (m + dv) (C + m)), chunk C = 64; "
                  "+ projections O(B (N + M) D h (dk + dv)); a mask varying along N: O(B h N M (m + dv))",
                  "O(B h (N + M) (m + dv)) + the (m, dk) projection: no N x M term (a mask varying along N, or "
                  "need_weights: O(B h N M))"};
  for (OptionSchema& o : s.options)
    if (o.name == "attn_dropout") o.doc = "must be 0: performer forms no probabilities to drop";
  s.options.insert(s.options.begin(),
                   {{"features", T::Int, "256", "number of random features m", {}},
                    {"ortho", T::Bool, "true", "orthogonal blocks of random features", {}},
                    {"redraw", T::Int, "0", "redraw the projection every T train-mode forward calls (0: never)", {}},
                    {"eps", T::Double, "1e-6", "added to the (unshifted) denominator", {}}});
  s.capabilities = Capabilities::all();
  return s;
}

std::shared_ptr<Attention> Performer::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  if (c.attn_dropout != 0)
    o.reject("attn_dropout", "must be 0: performer never forms the attention probabilities it would drop");
  PerformerConfig p;
  p.features = o.get_int("features");
  if (p.features <= 0) o.reject("features", "must be positive");
  p.ortho = o.get_bool("ortho");
  p.redraw = o.get_int("redraw");
  if (p.redraw < 0) o.reject("redraw", "must be >= 0 (0: never redraw)");
  p.eps = o.get_double("eps");
  if (!(p.eps >= 0) || !std::isfinite(p.eps)) o.reject("eps", "must be a finite number >= 0");
  return std::make_shared<Performer>(d_model, c, p);
}

Performer::Performer(int64_t d_model, const HeadConfig& c, const PerformerConfig& p)
    : ProjectedAttention("performer", d_model, c), performer(p) {
  if (p.features <= 0) fail<ValueError>("performer: features must be positive, got {}", p.features);
  projection = register_buffer("projection", to(draw_projection(p.features, c.key_size, p.ortho, gen), kFloat32));
}

Tensor Performer::draw_projection(int64_t m, int64_t dk, bool ortho, Generator& gen) {
  if (!ortho) return randn({m, dk}, gen, kFloat64);  // (m, dk)
  std::vector<double> w(m * dk);
  const int64_t blocks = (m + dk - 1) / dk;
  for (int64_t b = 0; b < blocks; ++b) {
    const std::vector<double> g = randn({dk, dk}, gen, kFloat64).to_vector<double>();  // (dk, dk)
    // QR by LAPACK, signs fixed so that R has a positive diagonal: Q * diag(sign(diag R)).
    const std::vector<double> q = lapack::orthogonal_q(g, dk);  // (dk, dk) row-major
    // The block's rows are Q's columns (the reference code stacks Q^T); the last block keeps
    // only the rows still needed.
    for (int64_t r = 0; r < std::min(dk, m - b * dk); ++r)
      for (int64_t i = 0; i < dk; ++i) w[(b * dk + r) * dk + i] = q[i * dk + r];
  }
  // Unit rows rescaled to the norms of Gaussian vectors, so that each row alone is distributed
  // like an unstructured Gaussian row.
  const std::vector<double> s = randn({m, dk}, gen, kFloat64).to_vector<double>();  // (m, dk)
  for (int64_t r = 0; r < m; ++r) {
    double norm = 0;
    for (int64_t i = 0; i < dk; ++i) norm += s[r * dk + i] * s[r * dk + i];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < dk; ++i) w[r * dk + i] *= norm;
  }
  return from_vector(w, {m, dk});
}

void Performer::redraw_projection() {
  NoGradGuard no_grad;
  Tensor fresh = to(draw_projection(performer.features, config.key_size, performer.ortho, gen), projection.dtype());
  projection.set_data(fresh);  // new storage: snapshots taken by earlier forward calls keep theirs
}

Tensor Performer::exponent(const Tensor& z, const Tensor& w) const {
  Tensor zs = z * std::pow(double(config.key_size), -0.25);                    // (B, h, N, dk)
  return matmul(zs, transpose(w, 0, 1)) - sum(square(zs), {-1}, true) * 0.5;  // (B, h, N, m)
}

AttentionResult Performer::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                   bool need_weights) {
  const bool is_causal = causal || config.causal;
  const Tensor& c = check_inputs("performer", d_model_, x, context, is_causal);
  const int64_t N = x.size(1), M = c.size(1);
  check_mask(mask, N, M, "performer");
  Heads hd = project(x, c);  // q (B, h, N, dk), k (B, h, M, dk), v (B, h, M, dv)
  const double inv_sqrt_m = 1.0 / std::sqrt(double(performer.features));
  const Tensor w = projection.detach();  // (m, dk): this call's snapshot (see redraw_projection)
  Tensor eq = exponent(hd.q, w);         // (B, h, N, m)
  Tensor ek = exponent(hd.k, w);         // (B, h, M, m)
  Tensor used = keys_in_use(mask, N, M, "performer");  // (B|1, h|1, M|1, 1) or undefined
  Tensor a, ck, eps;  // shifts and the rescaled eps: constants (the result does not depend on them)
  {
    NoGradGuard no_grad;
    a = amax(eq.detach(), {-1}, true);  // (B, h, N, 1)
    Tensor ekd = used.defined() ? where(used, ek.detach(), -INFINITY) : ek.detach();
    ck = amax(ekd, {2, 3}, true);                              // (B, h, 1, 1)
    ck = masked_fill(ck, attnlab::eq(ck, -INFINITY), 0.0);     // no key in use: any shift will do
    eps = performer.eps == 0 ? scalar_tensor(0.0, eq.dtype())  // (B, h, N, 1)
                             : exp(add(neg(a + ck), std::log(performer.eps)));
  }
  Tensor sk = ek - ck;  // (B, h, M, m)
  if (used.defined()) sk = where(used, sk, -INFINITY);  // unused keys: exactly 0, never inf
  Tensor fq = exp(eq - a) * inv_sqrt_m;  // (B, h, N, m), largest entry 1/sqrt(m)
  Tensor fk = exp(sk) * inv_sqrt_m;      // (B, h, M, m)
  KernelizedResult r = kernelized_attention(fq, fk, hd.v, eps, mask, is_causal, need_weights, "performer");
  Tensor out = finish(r.output);  // (B, N, D)
  if (is_training() && performer.redraw > 0 && ++train_calls >= performer.redraw) {
    redraw_projection();
    train_calls = 0;
  }
  return {out, r.attention};
}

std::unique_ptr<AttentionCache> Performer::make_cache(int64_t batch, int64_t) const {
  auto c = std::make_unique<KernelizedCache>();
  c->owner = this;
  const DType dt = q_proj->weight.dtype();
  c->batch = batch;
  c->state = zeros({batch, config.heads, performer.features, config.value_size + 1}, dt);
  c->shift = full({batch, config.heads, 1, 1}, -INFINITY, dt);
  return c;
}

// forward's shifts, step-wise: the query shift a_n is per row, as in forward; the key shift is
// the running maximum c of the key exponents, and the state is rescaled when c grows. eps is
// rescaled by exp(-(a_n + c)) with the current c, which keeps it on the unshifted denominator.
Tensor Performer::forward_step(const Tensor& x_new, AttentionCache& cache) {
  auto& c = step_cache<KernelizedCache>(cache, "performer");
  check_step("performer", d_model_, x_new, c.batch, c.length, -1);
  NoGradGuard no_grad;
  Heads hd = project(x_new, x_new);  // q (B, h, T, dk), k (B, h, T, dk), v (B, h, T, dv)
  const double inv_sqrt_m = 1.0 / std::sqrt(double(performer.features));
  Tensor eq = exponent(hd.q, projection);                  // (B, h, T, m)
  Tensor ek = exponent(hd.k, projection);                  // (B, h, T, m)
  Tensor a = amax(eq, {-1}, true);                         // (B, h, T, 1)
  Tensor shift = maximum(c.shift, amax(ek, {2, 3}, true));  // (B, h, 1, 1): finite from the first key on
  c.state = c.state * exp(c.shift - shift);                // exp(-inf) = 0 on the first step, 1 when unchanged
  c.shift = shift;
  Tensor eps = performer.eps == 0 ? scalar_tensor(0.0, eq.dtype())
                                  : exp(add(neg(a + shift), std::log(performer.eps)));  // (B, h, T, 1)
  Tensor fq = exp(eq - a) * inv_sqrt_m;      // (B, h, T, m)
  Tensor fk = exp(ek - shift) * inv_sqrt_m;  // (B, h, T, m)
  Tensor o = kernelized_step(c, fq, fk, hd.v, eps);
  c.length += x_new.size(1);
  return finish(o);  // (B, T, D)
}

void Performer::own_options(OptionValues& v) const {
  v.set("features", performer.features).set("ortho", performer.ortho).set("redraw", performer.redraw);
  v.set("eps", performer.eps);
}

}  // namespace attnlab::nn
