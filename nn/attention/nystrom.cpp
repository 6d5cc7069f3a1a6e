// `nystrom` (see nystrom.hpp).
//
// Initialisation: conv.weight as the authors' code (mlpen/Nystromformer, NystromAttention:
// nn.Conv2d(h, h, (k, 1), groups=h, bias=False) with PyTorch's default init), i.e.
// kaiming_uniform_(a = sqrt(5)) with fan_in = k: U(-1/sqrt(k), 1/sqrt(k)). The MHA projections
// keep ProjectedAttention's PyTorch Linear defaults.
//
// attn_dropout must be 0: the approximation has no probability matrix to drop entries from
// (the authors apply no dropout inside it either).
#include "nn/attention/nystrom.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "nn/init.hpp"

namespace attnlab::nn {
namespace {

// Means of t (B, h, L, d) over m consecutive segments of L/m rows -> (B, h, m, d).
Tensor segment_means(const Tensor& t, int64_t m) {
  const int64_t B = t.size(0), h = t.size(1), L = t.size(2), d = t.size(3);
  return mean(reshape(t, {B, h, m, L / m, d}), {3});
}

}  // namespace

DepthwiseSeqConv::DepthwiseSeqConv(int64_t heads, int64_t kernel) {
  weight = register_parameter(
      "weight", init::kaiming_uniform_(Tensor::empty({heads, 1, kernel, 1}), std::sqrt(5.0)));  // (h, 1, k, 1)
}

Tensor DepthwiseSeqConv::forward(const Tensor& v) {
  const int64_t B = v.size(0), h = v.size(1), N = v.size(2), dv = v.size(3), k = weight.size(2);
  const int64_t left = (k - 1) / 2, right = k / 2;
  std::vector<Tensor> parts;
  if (left > 0) parts.push_back(zeros({B, h, left, dv}, v.dtype()));
  parts.push_back(v);
  if (right > 0) parts.push_back(zeros({B, h, right, dv}, v.dtype()));
  Tensor padded = parts.size() == 1 ? v : cat(parts, 2);  // (B, h, N + k - 1, dv)
  Tensor w = reshape(weight, {h, k});                     // (h, k)
  Tensor out;
  for (int64_t t = 0; t < k; ++t) {
    // out[n] += w[t] * v[n + t - left]: tap t reads the padded rows t .. t + N - 1.
    Tensor term = narrow(padded, 2, t, N) * reshape(narrow(w, 1, t, 1), {1, h, 1, 1});  // (B, h, N, dv)
    out = out.defined() ? out + term : term;
  }
  return out;
}

Tensor newton_schulz_pinv(const Tensor& a, int64_t iters) {
  const int64_t m = a.size(-1);
  Tensor abs_a = abs(a);                                            // (..., m, m)
  Tensor norm_1 = amax(sum(abs_a, {-2}), {-1}, true);               // (..., 1): max column sum
  Tensor norm_inf = amax(sum(abs_a, {-1}), {-1}, true);             // (..., 1): max row sum
  Tensor z = transpose(a, -2, -1) / unsqueeze(norm_1 * norm_inf, -1);  // (..., m, m)
  Tensor eye_m = eye(m, a.dtype());                                 // (m, m)
  for (int64_t i = 0; i < iters; ++i) {
    Tensor az = matmul(a, z);                                       // (..., m, m)
    Tensor inner = matmul(az, eye_m * 7.0 - az);
    inner = matmul(az, eye_m * 15.0 - inner);
    z = matmul(z * 0.25, eye_m * 13.0 - inner);
  }
  return z;
}

VariantSchema NystromAttention::schema() {
  VariantSchema s{"nystrom", "Nystrom approximation of softmax attention with m landmarks (Xiong et al. 2021)",
                  multihead_options(),
                  "O(B h (N + M) m (dk + dv) + B h m^3 pinv_iters + B h N dv conv) + projections O(B (N + M) D h "
                  "(dk + dv)); need_weights adds O(B h N M m)",
                  "O(B h (N + M) m) for F and Bm, O(B h m^2 pinv_iters) for the pinv; need_weights adds O(B h N M)"};
  using T = OptionType;
  s.options.push_back({"landmarks", T::Int, "32", "landmarks m (N and M must be multiples of m)", {}});
  s.options.push_back({"pinv_iters", T::Int, "6", "Newton-Schulz iterations for pinv(A)", {}});
  s.options.push_back({"conv", T::Int, "0", "kernel size of the depthwise value convolution (0 = none)", {}});
  s.capabilities = Capabilities::key_summary();
  s.capabilities.cross = Support::probe;  // a context with conv = 0 only
  return s;
}

std::shared_ptr<Attention> NystromAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  if (c.causal) o.reject("causal", "nystrom cannot be causal: the landmarks average over the whole sequence");
  if (c.attn_dropout != 0)
    o.reject("attn_dropout", "nystrom has no attention probabilities to drop (the Nystrom factors are not); use 0");
  NystromConfig n;
  n.landmarks = o.get_int("landmarks");
  n.pinv_iters = o.get_int("pinv_iters");
  n.conv = o.get_int("conv");
  if (n.landmarks <= 0) o.reject("landmarks", "must be positive");
  if (n.pinv_iters < 0) o.reject("pinv_iters", "must be >= 0");
  if (n.conv < 0) o.reject("conv", "must be >= 0 (0 = no convolution)");
  return std::make_shared<NystromAttention>(d_model, c, n);
}

NystromAttention::NystromAttention(int64_t d_model, const HeadConfig& head, const NystromConfig& n)
    : ProjectedAttention("nystrom", d_model, head), settings(n) {
  if (n.conv > 0) conv = register_module("conv", std::make_shared<DepthwiseSeqConv>(head.heads, n.conv));
}

AttentionResult NystromAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                          bool need_weights) {
  if (causal || config.causal)
    fail<ValueError>("nystrom: causal attention is not supported (the landmarks average over the whole sequence)");
  if (conv && context.defined())
    fail<ValueError>("nystrom: conv={} needs self-attention (the value convolution adds the keys' sequence to the "
                     "queries' rows); got a context",
                     settings.conv);
  const Tensor& c = check_inputs("nystrom", d_model_, x, context, false);
  const int64_t N = x.size(1), M = c.size(1), m = settings.landmarks;
  if (N % m != 0 || M % m != 0)
    fail<ValueError>("nystrom: query length {} and key length {} must be multiples of landmarks={}", N, M, m);
  Tensor keys = key_mask(mask, N, M, "nystrom");  // (B|1, h|1, 1, M) or undefined
  Heads hd = project(x, c);
  Tensor q = hd.q * (1.0 / std::sqrt(double(config.key_size)));  // (B, h, N, dk), scaled once here
  Tensor k = hd.k, v = hd.v;                                      // (B, h, M, dk), (B, h, M, dv)
  if (keys.defined()) {
    Tensor rows = transpose(expand(keys, {-1, -1, 1, M}), -2, -1);  // (B|1, h|1, M, 1)
    k = where(rows, k, 0.0);
    v = where(rows, v, 0.0);
    if (!context.defined()) q = where(rows, q, 0.0);  // self-attention: query n is key n
  }
  Tensor q_l = segment_means(q, m);                                       // (B, h, m, dk)
  Tensor k_l = segment_means(k, m);                                       // (B, h, m, dk)
  Tensor f = softmax(matmul(q, transpose(k_l, -2, -1)), -1);              // (B, h, N, m)
  Tensor a = softmax(matmul(q_l, transpose(k_l, -2, -1)), -1);            // (B, h, m, m)
  Tensor bm = softmax(matmul(q_l, transpose(k, -2, -1)), -1, keys);       // (B, h, m, M)
  Tensor z = newton_schulz_pinv(a, settings.pinv_iters);                  // (B, h, m, m)
  Tensor o = matmul(f, matmul(z, matmul(bm, v)));                         // (B, h, N, dv), right to left
  if (conv) o = o + conv->forward(v);                                     // (B, h, N, dv)
  Tensor attention = need_weights ? matmul(matmul(f, z), bm) : Tensor();  // (B, h, N, M)
  return {finish(o), attention};
}

void NystromAttention::own_options(OptionValues& v) const {
  v.set("landmarks", settings.landmarks).set("pinv_iters", settings.pinv_iters).set("conv", settings.conv);
}

}  // namespace attnlab::nn
