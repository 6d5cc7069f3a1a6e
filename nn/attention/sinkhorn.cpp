// `sinkhorn` (see sinkhorn.hpp).
//
// Initialisation: sort_net as the sort net of the LRA reference code (Tay et al.,
// google-research/long-range-arena, sinkhorn_attention.py: nn.DenseGeneral with flax's
// default_kernel_init = lecun_normal and bias_init = zeros). lecun_normal is JAX's
// variance_scaling(1, fan_in, truncated_normal): a normal truncated to +-2 std with
// std = sqrt(1/fan_in) / 0.87962566103423978 (the correction for the truncation), fan_in = D.
// The bias starts at zero. The MHA projections keep ProjectedAttention's PyTorch Linear
// defaults.
#include "nn/attention/sinkhorn.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "nn/init.hpp"

namespace attnlab::nn {
VariantSchema SinkhornAttention::schema() {
  VariantSchema s{"sinkhorn",
                  "block attention to the own block and a Sinkhorn-sorted block (Tay et al. 2020, Sparse Sinkhorn)",
                  multihead_options(),
                  "O(B h N 2b (dk + dv) + B h N nb (dk + dv) + B N D nb + B nb^2 iters), nb = N/b; projections O(B N "
                  "D h (dk + dv)); need_weights adds O(B h N^2)",
                  "O(B h N 2b) for the scores and probabilities, O(B h N (dk + dv)) sorted keys/values; need_weights "
                  "adds O(B h N^2)"};
  using T = OptionType;
  s.options.push_back({"block", T::Int, "32", "block size b (N must be a multiple of b)", {}});
  s.options.push_back({"iters", T::Int, "5", "Sinkhorn normalisation rounds", {}});
  s.options.push_back({"temperature", T::Double, "0.75", "the sort logits are divided by it", {}});
  s.options.push_back({"max_len", T::Int, "512", "longest sequence (sort_net has max_len/b rows)", {}});
  s.capabilities = Capabilities::key_summary();
  s.capabilities.cross = Support::no;  // the blocks sorted are the queries' own
  return s;
}

std::shared_ptr<Attention> SinkhornAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  if (c.causal) o.reject("causal", "sinkhorn cannot be causal: sorted blocks mix keys from the whole sequence");
  SinkhornConfig s;
  s.block = o.get_int("block");
  s.iters = o.get_int("iters");
  s.temperature = o.get_double("temperature");
  s.max_len = o.get_int("max_len");
  if (s.block <= 0) o.reject("block", "must be positive");
  if (s.iters < 0) o.reject("iters", "must be >= 0");
  if (!(s.temperature > 0)) o.reject("temperature", "must be positive");
  if (s.max_len <= 0 || s.max_len % s.block != 0)
    o.reject("max_len", fmt::format("must be a positive multiple of block={} (sort_net has max_len/block rows)", s.block));
  return std::make_shared<SinkhornAttention>(d_model, c, s);
}

SinkhornAttention::SinkhornAttention(int64_t d_model, const HeadConfig& head, const SinkhornConfig& s)
    : ProjectedAttention("sinkhorn", d_model, head), settings(s) {
  const int64_t nb_max = s.max_len / s.block;
  sort_net = register_module("sort_net", std::make_shared<Linear>(d_model, nb_max, head.bias));
  const double sd = 1.0 / std::sqrt(double(d_model)) / 0.87962566103423978;
  init::trunc_normal_(sort_net->weight, 0, sd, -2 * sd, 2 * sd);  // (nb_max, D)
  if (sort_net->bias.defined()) init::zeros_(sort_net->bias);       // (nb_max)
}

Tensor SinkhornAttention::sort_matrix(const Tensor& x, const Tensor& keys) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2), b = settings.block, nb = N / b;
  Tensor blocks = reshape(x, {B, nb, b, D});                                        // (B, nb, b, D)
  Tensor s;                                                                         // (B, nb, D)
  if (!keys.defined()) {
    s = mean(blocks, {2});
  } else {
    // A position masked in every head is padding: it must not move the sort, so that no masked
    // input moves an unmasked output. The summary averages the allowed positions only.
    const int64_t Bk = keys.size(0);
    Tensor heads = to(expand(keys, {Bk, keys.size(1), 1, N}), x.dtype());          // (B|1, h|1, 1, N)
    Tensor present = reshape(gt(sum(heads, {1, 2}), 0.0), {Bk, nb, b, 1});         // (B|1, nb, b, 1)
    Tensor count = sum(to(present, x.dtype()), {2});                               // (B|1, nb, 1)
    s = sum(where(present, blocks, 0.0), {2}) / clamp(count, 1.0, double(b));       // (B, nb, D); 0 if none
  }
  Tensor r = matmul(s, transpose(narrow(sort_net->weight, 0, 0, nb), 0, 1));        // (B, nb, nb)
  if (sort_net->bias.defined()) r = r + narrow(sort_net->bias, 0, 0, nb);           // (B, nb, nb)
  r = r * (1.0 / settings.temperature);
  for (int64_t t = 0; t < settings.iters; ++t) {
    r = r - logsumexp(r, {2}, true);  // rows sum to 1
    r = r - logsumexp(r, {1}, true);  // columns sum to 1
  }
  return exp(r);  // (B, nb, nb)
}

AttentionResult SinkhornAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                           bool need_weights) {
  if (causal || config.causal)
    fail<ValueError>("sinkhorn: causal attention is not supported (sorted blocks mix keys from the whole sequence)");
  check_inputs("sinkhorn", d_model_, x, context, false, /*allows_context=*/false);
  const int64_t B = x.size(0), N = x.size(1), h = config.heads, dk = config.key_size, dv = config.value_size;
  const int64_t b = settings.block;
  if (N % b != 0)
    fail<ValueError>("sinkhorn: sequence length {} is not a multiple of block={}; pad the sequence or change block", N,
                     b);
  if (N > settings.max_len)
    fail<ValueError>("sinkhorn: sequence length {} exceeds max_len={} (sort_net has {} rows); raise option max_len", N,
                     settings.max_len, settings.max_len / b);
  const int64_t nb = N / b;
  Tensor keys = key_mask(mask, N, N, "sinkhorn");  // (B|1, h|1, 1, N) or undefined
  Heads hd = project(x, x);
  Tensor q = hd.q * (1.0 / std::sqrt(double(dk)));  // (B, h, N, dk)
  Tensor k = hd.k, v = hd.v;                         // (B, h, N, dk), (B, h, N, dv)
  Tensor allowed;                                    // (B|1, h|1, nb, 1, 2b)
  if (keys.defined()) {
    const int64_t Bk = keys.size(0), hk = keys.size(1);
    Tensor full = expand(keys, {Bk, hk, 1, N});                     // (B|1, h|1, 1, N)
    Tensor rows = transpose(full, -2, -1);                           // (B|1, h|1, N, 1)
    k = where(rows, k, 0.0);
    v = where(rows, v, 0.0);
    Tensor own = reshape(full, {Bk, hk, nb, 1, b});                  // (B|1, h|1, nb, 1, b)
    Tensor any_block = gt(sum(to(reshape(full, {Bk, hk, nb, b}), q.dtype()), {2}), 0.0);  // (B|1, h|1, b)
    Tensor sorted = expand(reshape(any_block, {Bk, hk, 1, 1, b}), {Bk, hk, nb, 1, b});    // (B|1, h|1, nb, 1, b)
    allowed = cat({own, sorted}, -1);                                                      // (B|1, h|1, nb, 1, 2b)
  }
  Tensor perm = unsqueeze(sort_matrix(x, keys), 1);                                 // (B, 1, nb, nb)
  Tensor k_sorted = reshape(matmul(perm, reshape(k, {B, h, nb, b * dk})), {B, h, nb, b, dk});  // (B, h, nb, b, dk)
  Tensor v_sorted = reshape(matmul(perm, reshape(v, {B, h, nb, b * dv})), {B, h, nb, b, dv});  // (B, h, nb, b, dv)
  Tensor k_joint = cat({reshape(k, {B, h, nb, b, dk}), k_sorted}, 3);               // (B, h, nb, 2b, dk)
  Tensor v_joint = cat({reshape(v, {B, h, nb, b, dv}), v_sorted}, 3);               // (B, h, nb, 2b, dv)
  Tensor scores = matmul(reshape(q, {B, h, nb, b, dk}), transpose(k_joint, -2, -1));  // (B, h, nb, b, 2b)
  Tensor p = softmax(scores, -1, allowed);                                          // (B, h, nb, b, 2b)
  Tensor o = matmul(attention_dropout(p, config.attn_dropout, is_training(), gen), v_joint);  // (B, h, nb, b, dv)
  o = reshape(o, {B, h, N, dv});                                                    // (B, h, N, dv)

  Tensor attention;
  if (need_weights) {
    // Spread the 2b probabilities of query n (block i) over the original keys j*b + r.
    Tensor p_own = unsqueeze(narrow(p, -1, 0, b), 4);                               // (B, h, nb, b, 1, b)
    Tensor p_sorted = unsqueeze(narrow(p, -1, b, b), 4);                            // (B, h, nb, b, 1, b)
    Tensor diag = reshape(eye(nb, p.dtype()), {1, 1, nb, 1, nb, 1});                // [i == j]
    Tensor mix = reshape(perm, {B, 1, nb, 1, nb, 1});                               // P[i, j]
    attention = reshape(p_own * diag + p_sorted * mix, {B, h, N, N});               // (B, h, N, N)
    if (keys.defined()) attention = where(keys, attention, 0.0);
  }
  return {finish(o), attention};
}

void SinkhornAttention::own_options(OptionValues& v) const {
  v.set("block", settings.block).set("iters", settings.iters).set("temperature", settings.temperature);
  v.set("max_len", settings.max_len);
}

}  // namespace attnlab::nn
