// `lsh` (see lsh.hpp): hashing, the sorted-chunk layout and the multi-round softmax.
//
// Layouts. "Sorted" rows are (b, i, t, s): round t's s-th position in (bucket, position) order,
// cut into N/c chunks of c. "Query" rows are (b, i, n, t): query n in round t. Each row holds W
// key slots: the keys of the query's chunk, then those of the previous chunk (W = 2c), or only
// its own chunk when there is one chunk (W = c), since the previous chunk would then be the
// same keys twice and docs/attention.md counts a key once per round.
//
// The rounds combine by softmax over their log-sum-exp normalisers:
//   o = sum_t exp(lse_t - LSE) o_t,  LSE = log sum_t exp(lse_t),
// and exp(lse_t - LSE) p_t[j] = exp(s_t[j] - LSE): one softmax over all R*W slots of a query,
// done in the query layout. A round with nothing allowed has lse_t = -inf and weight 0 by
// itself; a query with nothing allowed in any round gets a zero row from the masked softmax.
// Scores and probabilities move between the two layouts by index_select, whose backward is an
// index_add, so backward costs what forward does.
#include "nn/attention/lsh.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "nn/attention/registry.hpp"
#include "nn/init.hpp"
#include "tensor/kernels.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::nn {

namespace cluster {

MaskElements::MaskElements(const Tensor& mask, int64_t B, int64_t h, int64_t N, const char* variant) {
  check_mask(mask, N, N, variant);
  if (!mask.defined()) return;
  const Dims target{B, h, N, N};
  Dims shape = Dims::filled(4, 1), strides = Dims::filled(4, 0);
  for (int d = 0; d < mask.dim(); ++d) {
    const int at = 4 - mask.dim() + d;
    shape[at] = mask.size(d);
    strides[at] = mask.stride(d);
    if (shape[at] != 1 && shape[at] != target[at])
      fail<ShapeError>("{}: mask of shape {} does not broadcast to (B, h, N, N) = {}", variant, to_string(mask.shape()),
                       to_string(target));
  }
  const Dims st = broadcast_strides(shape, strides, target);
  data_ = mask.data<bool>();
  sb_ = st[0], sh_ = st[1], sn_ = st[2], sm_ = st[3];
}

Tensor unit_rows(const Tensor& v) {
  // max(||v||, 1e-12) as in F.normalize, written as rsqrt of a clamped square so that a zero row
  // has a zero (not NaN) gradient.
  return v * rsqrt(clamp_min(sum(square(v), {-1}, true), 1e-24));
}

}  // namespace cluster

using cluster::MaskElements;
using cluster::unit_rows;

namespace {

// The score a query gives its own position (Reformer): it only matters when nothing else is
// allowed, since exp(-1e5 - max) underflows to 0 next to any ordinary score.
constexpr double kSelfScore = -1e5;

struct LshTables {
  Tensor q_rows;     // (B*h*R*N) int64: row of q (B*h*N rows) at each sorted position
  Tensor k_rows;     // (B*h*R*nc*W) int64: row of k^ and v for each chunk's key slots
  Tensor to_query;   // (B*h*N*R) int64: each query row's row in the sorted layout
  Tensor to_sorted;  // (B*h*R*N) int64: each sorted row's row in the query layout
  Tensor allowed;    // (B, h, N, R*W) bool: causal and padding by original positions
  Tensor not_self;   // (B, h, N, R*W) bool: the slot's key is not the query itself
  Tensor key_pos;    // (B, h, N, R*W) int64: the slot's original key position (need_weights only)
};

LshTables build_tables(const Tensor& buckets, int64_t nb, int64_t c, const MaskElements& mask, bool causal,
                       bool with_key_pos) {
  const int64_t B = buckets.size(0), h = buckets.size(1), R = buckets.size(2), N = buckets.size(3);
  const int64_t nc = N / c, W = nc == 1 ? c : 2 * c;
  LshTables t;
  t.q_rows = Tensor::empty({B * h * R * N}, kInt64);
  t.k_rows = Tensor::empty({B * h * R * nc * W}, kInt64);
  t.to_query = Tensor::empty({B * h * N * R}, kInt64);
  t.to_sorted = Tensor::empty({B * h * R * N}, kInt64);
  t.allowed = Tensor::empty({B, h, N, R * W}, kBool);
  t.not_self = Tensor::empty({B, h, N, R * W}, kBool);
  if (with_key_pos) t.key_pos = Tensor::empty({B, h, N, R * W}, kInt64);
  const Tensor bucket_table = kernels::contiguous(buckets);
  const int64_t* bk = bucket_table.data<int64_t>();
  int64_t *q_rows = t.q_rows.data<int64_t>(), *k_rows = t.k_rows.data<int64_t>();
  int64_t *to_query = t.to_query.data<int64_t>(), *to_sorted = t.to_sorted.data<int64_t>();
  int64_t* key_pos = with_key_pos ? t.key_pos.data<int64_t>() : nullptr;
  bool *allowed = t.allowed.data<bool>(), *not_self = t.not_self.data<bool>();
  // One task per (b, i, t): every write below is to that round's own entries.
  parallel_for(B * h * R, 1, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> perm(N), count(nb + 1);
    for (int64_t task = r0; task < r1; ++task) {
      const int64_t bh = task / R, round = task % R, b = bh / h, i = bh % h;
      const int64_t* bucket = bk + task * N;
      // Counting sort by bucket, stable, so ties keep position order: (bucket, position).
      std::fill(count.begin(), count.end(), 0);
      for (int64_t n = 0; n < N; ++n) ++count[bucket[n] + 1];
      for (int64_t u = 0; u < nb; ++u) count[u + 1] += count[u];
      for (int64_t n = 0; n < N; ++n) perm[count[bucket[n]]++] = n;
      // The sorted index of slot w of chunk j.
      auto slot_key = [&](int64_t j, int64_t w) { return w < c ? j * c + w : ((j + nc - 1) % nc) * c + (w - c); };
      for (int64_t s = 0; s < N; ++s) {
        const int64_t n = perm[s], sorted_row = task * N + s, query_row = (bh * N + n) * R + round;
        q_rows[sorted_row] = bh * N + n;
        to_sorted[sorted_row] = query_row;
        to_query[query_row] = sorted_row;
        const int64_t j = s / c;
        for (int64_t w = 0; w < W; ++w) {
          const int64_t m = perm[slot_key(j, w)], e = query_row * W + w;
          allowed[e] = mask(b, i, n, m) && (!causal || m <= n);
          not_self[e] = m != n;
          if (key_pos) key_pos[e] = m;
        }
      }
      for (int64_t j = 0; j < nc; ++j)
        for (int64_t w = 0; w < W; ++w) k_rows[(task * nc + j) * W + w] = bh * N + perm[slot_key(j, w)];
    }
  });
  return t;
}

}  // namespace

VariantSchema LshAttention::schema() {
  VariantSchema s{"lsh", "LSH attention: shared QK, hashed sorted chunks, multi-round (Kitaev et al. 2020, Reformer)",
                  multihead_options(),
                  "O(B h R N (nb dk / 2 + W (dk + dv))) + projections O(B N D h (dk + dv)); W = 2c (c when N = c)",
                  "O(B h R N (W + dk + dv)): sorted q, key/value windows, chunk scores and probabilities"};
  s.options.insert(s.options.begin(), {{"buckets", OptionType::Int, "8", "hash buckets nb (even)", {}},
                                       {"hashes", OptionType::Int, "2", "hashing rounds R", {}},
                                       {"chunk", OptionType::Int, "32", "chunk length c (N a multiple of c)", {}}});
  s.capabilities = Capabilities::all();
  s.capabilities.cross = Support::no;     // queries and keys share one projection and one hash
  s.capabilities.decoding = Support::no;  // a new position changes every chunk
  s.capabilities.isolates_masked = false;  // buckets and chunks are drawn from every position
  return s;
}

std::shared_ptr<Attention> LshAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  const int64_t nb = o.get_int("buckets"), R = o.get_int("hashes"), chunk = o.get_int("chunk");
  if (nb < 2 || nb % 2 != 0)
    o.reject("buckets", "must be even and >= 2 (bucket = argmax([y, -y]) over nb/2 rotations)");
  if (R <= 0) o.reject("hashes", "must be positive");
  if (chunk <= 0) o.reject("chunk", "must be positive");
  return std::make_shared<LshAttention>(d_model, c, nb, R, chunk);
}

LshAttention::LshAttention(int64_t d_model, const HeadConfig& c, int64_t nb, int64_t R, int64_t ch)
    : ProjectedAttention("lsh", d_model, c, /*has_k_proj=*/false), buckets(nb), hashes(R), chunk(ch) {
  if (nb < 2 || nb % 2 != 0) fail<ValueError>("lsh: buckets must be even and >= 2, got {}", nb);
  if (R <= 0) fail<ValueError>("lsh: hashes must be positive, got {}", R);
  if (ch <= 0) fail<ValueError>("lsh: chunk must be positive, got {}", ch);
  // Random rotations as in the Reformer (a Gaussian matrix per round); drawn once, a buffer.
  rotations = register_buffer("rotations", init::normal_(empty({c.heads, c.key_size, R, nb / 2}), 0, 1));
}

Tensor LshAttention::hash_queries(const Tensor& q) const {
  NoGradGuard no_grad;
  const int64_t B = q.size(0), h = q.size(1), N = q.size(2), dk = q.size(3), R = hashes, half = buckets / 2;
  if (h != config.heads || dk != config.key_size)
    fail<ShapeError>("lsh: hash_queries expects (B, {}, N, {}), got {}", config.heads, config.key_size,
                     to_string(q.shape()));
  Tensor y = matmul(unit_rows(q), unsqueeze(reshape(rotations, {h, dk, R * half}), 0));  // (B, h, N, R*nb/2)
  y = reshape(y, {B, h, N, R, half});                                                     // (B, h, N, R, nb/2)
  Tensor bucket = argmax(cat({y, neg(y)}, -1), -1);                                       // (B, h, N, R)
  return contiguous(permute(bucket, {0, 1, 3, 2}));                                       // (B, h, R, N)
}

Tensor LshAttention::hash(const Tensor& x) {
  check_inputs("lsh", d_model_, x, {}, false, false);
  NoGradGuard no_grad;
  return hash_queries(project(x, x).q);
}

AttentionResult LshAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                      bool need_weights) {
  const bool is_causal = causal || config.causal;
  check_inputs("lsh", d_model_, x, context, is_causal, /*allows_context=*/false);
  const int64_t B = x.size(0), N = x.size(1), h = config.heads, dk = config.key_size, dv = config.value_size;
  const int64_t R = hashes, c = chunk;
  if (N % c != 0)
    fail<ShapeError>("lsh: sequence length N={} is not a multiple of chunk={}; pad the sequence or pick a chunk that "
                     "divides N",
                     N, c);
  MaskElements allowed_at(mask, B, h, N, "lsh");
  Heads heads = project(x, x);
  if (N == 0) {
    Tensor o = zeros({B, h, 0, dv}, heads.v.dtype());
    return {finish(o), need_weights ? zeros({B, h, 0, 0}, o.dtype()) : Tensor()};
  }
  const int64_t nc = N / c, W = nc == 1 ? c : 2 * c, rows = B * h * N;
  Tensor k = unit_rows(heads.q);                                          // (B, h, N, dk) k^
  LshTables t = build_tables(hash_queries(heads.q), buckets, c, allowed_at, is_causal, need_weights);

  Tensor q = reshape(heads.q * (1.0 / std::sqrt(double(dk))), {rows, dk});     // (B*h*N, dk), scaled once
  Tensor qs = reshape(index_select(q, 0, t.q_rows), {B, h, R, nc, c, dk});      // sorted queries
  Tensor kw = reshape(index_select(reshape(k, {rows, dk}), 0, t.k_rows), {B, h, R, nc, W, dk});
  Tensor vw = reshape(index_select(reshape(heads.v, {rows, dv}), 0, t.k_rows), {B, h, R, nc, W, dv});
  Tensor dots = matmul(qs, transpose(kw, -2, -1));                              // (B, h, R, nc, c, W)
  Tensor s = reshape(index_select(reshape(dots, {B * h * R * N, W}), 0, t.to_query), {B, h, N, R * W});
  s = where(t.not_self, s, kSelfScore);                                         // (B, h, N, R*W)
  Tensor p = softmax(s, -1, t.allowed);                                         // (B, h, N, R*W), all rounds
  Tensor pd = attention_dropout(p, config.attn_dropout, is_training(), gen);
  Tensor ps = reshape(index_select(reshape(pd, {B * h * N * R, W}), 0, t.to_sorted), {B, h, R, nc, c, W});
  Tensor os = matmul(ps, vw);                                                   // (B, h, R, nc, c, dv)
  Tensor o = reshape(index_select(reshape(os, {B * h * R * N, dv}), 0, t.to_query), {B, h, N, R, dv});
  o = sum(o, {3});                                                              // (B, h, N, dv)

  Tensor attention;
  if (need_weights)  // rounds' probabilities with their weights, summed per key
    attention = scatter_add(zeros({B, h, N, N}, p.dtype()), 3, t.key_pos, p);  // (B, h, N, N)
  return {finish(o), attention};
}

void LshAttention::own_options(OptionValues& v) const {
  v.set("buckets", buckets).set("hashes", hashes).set("chunk", chunk);
}

Tensor LshAttention::prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                                  const std::vector<int64_t>& keep) const {
  // Per head even when every head is kept: keep may reorder them.
  if (name == "rotations") return take_heads(from, keep, 1, 0);
  return ProjectedAttention::prune_tensor(name, from, to, keep);
}

}  // namespace attnlab::nn
