// `routing` (see routing.hpp): cluster assignment, the grouped products, the centroid update.
//
// Layout. Per (b, head), queries are sorted by (cluster, position) and so are keys; cluster g's
// queries occupy sorted rows [qoff_g, qoff_g + nq_g), its keys [koff_g, koff_g + nk_g). Each
// sorted query row holds L + 1 slots, L = the largest nk_g over every (b, head, cluster):
// slot j < nk_g is the j-th key of its cluster, slots nk_g..L-1 are padding (never allowed), and
// slot L is the query's own position m = n, allowed (subject to the padding mask) when k[n] went
// to another cluster than q[n]; when both went to the same one, key n is already among the
// cluster's slots and the diagonal slot stays off, so no key counts twice.
//
// Cost: the grouped products do sum_g nq_g nk_g (dk + dv) multiply-adds per (b, head): about
// N^2/k for balanced clusters, N^2 when one cluster takes everything. Memory is O(N (L + 1))
// per (b, head) for the scores and probabilities: O(N^2/k) balanced, O(N^2) at worst. An exact
// method cannot do better when the clusters are unbalanced: the allowed set itself is that big.
#include "nn/attention/routing.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/ops.hpp"
#include "nn/attention/lsh.hpp"  // cluster::MaskElements, unit_rows
#include "nn/init.hpp"
#include "tensor/kernels.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::nn {

using cluster::MaskElements;
using cluster::unit_rows;

namespace {

// Where each (b, head, cluster) group's queries and keys sit in the sorted layout.
struct Groups {
  int64_t BH = 0, N = 0, K = 0;
  std::vector<int64_t> qoff, koff;  // (BH * (K + 1)): group g of (b, head) bh is [off[bh*(K+1)+g], off[...+g+1])
  int64_t widest = 0;               // L: the most keys in one group
};

// Calls f(bh, q0, nq, k0, nk) for every group with queries and keys, in parallel; the groups'
// rows are disjoint, so each call writes its own memory.
template <class F>
void for_each_group(const Groups& g, F&& f) {
  parallel_for(g.BH * g.K, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / g.K, at = bh * (g.K + 1) + t % g.K;
      const int64_t q0 = g.qoff[at], nq = g.qoff[at + 1] - q0, k0 = g.koff[at], nk = g.koff[at + 1] - k0;
      if (nq > 0 && nk > 0) f(bh, q0, nq, k0, nk);
    }
  });
}

// Rows [r0, r0 + n) of a contiguous (B, h, N, d) tensor's (b, head) block bh, as an (n, d) view
// (transposed: (d, n)).
Tensor rows_of(const Tensor& t, int64_t bh, int64_t r0, int64_t n, bool transposed = false) {
  const int64_t N = t.size(2), d = t.size(3), off = t.offset() + (bh * N + r0) * d;
  return transposed ? t.as_strided({d, n}, {1, d}, off) : t.as_strided({n, d}, {d, 1}, off);
}
// The first `cols` columns of those rows: (n, cols), or (cols, n) transposed.
Tensor block_of(const Tensor& t, int64_t bh, int64_t r0, int64_t n, int64_t cols, bool transposed = false) {
  const int64_t N = t.size(2), L = t.size(3), off = t.offset() + (bh * N + r0) * L;
  return transposed ? t.as_strided({cols, n}, {1, L}, off) : t.as_strided({n, cols}, {L, 1}, off);
}

// S (B, h, N, L): sorted query row r of group g, column j < nk_g: qs[r] . ks[koff_g + j];
// other columns 0. qs, ks (B, h, N, dk) in sorted order.
Tensor grouped_scores(const Tensor& qs0, const Tensor& ks0, const std::shared_ptr<const Groups>& groups) {
  const Tensor qs = kernels::contiguous(qs0), ks = kernels::contiguous(ks0);
  const Groups& g = *groups;
  Tensor out = zeros({qs.size(0), qs.size(1), g.N, g.widest}, qs.dtype());  // (B, h, N, L)
  for_each_group(g, [&](int64_t bh, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
    kernels::copy_(block_of(out, bh, q0, nq, nk),
                   kernels::matmul(rows_of(qs, bh, q0, nq), rows_of(ks, bh, k0, nk, true)));
  });
  return record(
      "routing_grouped_scores", out, {qs0, ks0},
      [qs = qs.detach(), ks = ks.detach(), groups](const Tensor& grad, const Tensor&, const Node& node) {
        const Tensor G = kernels::contiguous(grad);  // (B, h, N, L)
        Tensor dq, dk;
        if (node.needs_grad(0)) dq = zeros(qs.shape(), qs.dtype());
        if (node.needs_grad(1)) dk = zeros(ks.shape(), ks.dtype());
        for_each_group(*groups, [&](int64_t bh, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
          if (dq.defined())  // dQ_g = dS_g K_g
            kernels::copy_(rows_of(dq, bh, q0, nq),
                           kernels::matmul(block_of(G, bh, q0, nq, nk), rows_of(ks, bh, k0, nk)));
          if (dk.defined())  // dK_g = dS_g^T Q_g
            kernels::copy_(rows_of(dk, bh, k0, nk),
                           kernels::matmul(block_of(G, bh, q0, nq, nk, true), rows_of(qs, bh, q0, nq)));
        });
        return Grads{dq, dk};
      });
}

// O (B, h, N, dv): sorted query row r of group g gets sum_{j < nk_g} P[r, j] vs[koff_g + j].
// P (B, h, N, Lp) with Lp >= L (columns past nk_g are not read); vs (B, h, N, dv) sorted.
Tensor grouped_values(const Tensor& p0, const Tensor& vs0, const std::shared_ptr<const Groups>& groups) {
  const Tensor p = kernels::contiguous(p0), vs = kernels::contiguous(vs0);
  Tensor out = zeros(vs.shape(), vs.dtype());  // (B, h, N, dv)
  for_each_group(*groups, [&](int64_t bh, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
    kernels::copy_(rows_of(out, bh, q0, nq), kernels::matmul(block_of(p, bh, q0, nq, nk), rows_of(vs, bh, k0, nk)));
  });
  return record(
      "routing_grouped_values", out, {p0, vs0},
      [p = p.detach(), vs = vs.detach(), groups](const Tensor& grad, const Tensor&, const Node& node) {
        const Tensor G = kernels::contiguous(grad);  // (B, h, N, dv)
        Tensor dp, dv;
        if (node.needs_grad(0)) dp = zeros(p.shape(), p.dtype());
        if (node.needs_grad(1)) dv = zeros(vs.shape(), vs.dtype());
        for_each_group(*groups, [&](int64_t bh, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
          if (dp.defined())  // dP_g = dO_g V_g^T
            kernels::copy_(block_of(dp, bh, q0, nq, nk),
                           kernels::matmul(rows_of(G, bh, q0, nq), rows_of(vs, bh, k0, nk, true)));
          if (dv.defined())  // dV_g = P_g^T dO_g
            kernels::copy_(rows_of(dv, bh, k0, nk),
                           kernels::matmul(block_of(p, bh, q0, nq, nk, true), rows_of(G, bh, q0, nq)));
        });
        return Grads{dp, dv};
      });
}

struct RoutingTables {
  std::shared_ptr<Groups> groups;
  Tensor q_rows;    // (B*h*N) int64: row of q/v (B*h*N rows) at each sorted query position
  Tensor k_rows;    // (B*h*N) int64: row of k/v at each sorted key position
  Tensor unsort;    // (B*h*N) int64: the sorted row of each original query row
  Tensor allowed;   // (B, h, N, L+1) bool, sorted query rows
  Tensor key_pos;   // (B, h, N, L+1) int64: the slot's original key position (padding: the query's);
                    // need_weights only
};

RoutingTables build_tables(const Tensor& q_cluster, const Tensor& k_cluster, int64_t K, const MaskElements& mask,
                           bool causal, bool with_key_pos) {
  const int64_t B = q_cluster.size(0), h = q_cluster.size(1), N = q_cluster.size(2), BH = B * h;
  const Tensor cq_t = kernels::contiguous(q_cluster), ck_t = kernels::contiguous(k_cluster);
  const int64_t *cq = cq_t.data<int64_t>(), *ck = ck_t.data<int64_t>();
  RoutingTables t;
  auto g = std::make_shared<Groups>();
  g->BH = BH, g->N = N, g->K = K;
  g->qoff.assign(BH * (K + 1), 0);
  g->koff.assign(BH * (K + 1), 0);
  std::vector<int64_t> qperm(BH * N), kperm(BH * N);
  // Counting sorts, stable, so ties keep position order: (cluster, position).
  parallel_for(BH, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t bh = r0; bh < r1; ++bh)
      for (int side = 0; side < 2; ++side) {
        const int64_t* cl = (side == 0 ? cq : ck) + bh * N;
        int64_t* off = (side == 0 ? g->qoff : g->koff).data() + bh * (K + 1);
        int64_t* perm = (side == 0 ? qperm : kperm).data() + bh * N;
        for (int64_t n = 0; n < N; ++n) ++off[cl[n] + 1];
        for (int64_t c = 0; c < K; ++c) off[c + 1] += off[c];
        std::vector<int64_t> next(off, off + K);
        for (int64_t n = 0; n < N; ++n) perm[next[cl[n]]++] = n;
      }
  });
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t c = 0; c < K; ++c)
      g->widest = std::max(g->widest, g->koff[bh * (K + 1) + c + 1] - g->koff[bh * (K + 1) + c]);
  const int64_t L = g->widest, S = L + 1;
  t.q_rows = Tensor::empty({BH * N}, kInt64);
  t.k_rows = Tensor::empty({BH * N}, kInt64);
  t.unsort = Tensor::empty({BH * N}, kInt64);
  t.allowed = Tensor::empty({B, h, N, S}, kBool);
  if (with_key_pos) t.key_pos = Tensor::empty({B, h, N, S}, kInt64);
  int64_t *q_rows = t.q_rows.data<int64_t>(), *k_rows = t.k_rows.data<int64_t>(), *unsort = t.unsort.data<int64_t>();
  int64_t* key_pos = with_key_pos ? t.key_pos.data<int64_t>() : nullptr;
  bool* allowed = t.allowed.data<bool>();
  parallel_for(BH, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t bh = r0; bh < r1; ++bh) {
      const int64_t b = bh / h, i = bh % h, base = bh * N;
      const int64_t *qp = qperm.data() + base, *kp = kperm.data() + base;
      const int64_t *qoff = g->qoff.data() + bh * (K + 1), *koff = g->koff.data() + bh * (K + 1);
      for (int64_t s = 0; s < N; ++s) {
        q_rows[base + s] = base + qp[s];
        k_rows[base + s] = base + kp[s];
        unsort[base + qp[s]] = base + s;
      }
      for (int64_t c = 0; c < K; ++c)
        for (int64_t s = qoff[c]; s < qoff[c + 1]; ++s) {
          const int64_t n = qp[s], nk = koff[c + 1] - koff[c];
          bool* a = allowed + (base + s) * S;
          for (int64_t j = 0; j < nk; ++j) {
            const int64_t m = kp[koff[c] + j];
            a[j] = mask(b, i, n, m) && (!causal || m <= n);
          }
          std::fill(a + nk, a + L, false);
          a[L] = ck[base + n] != c && mask(b, i, n, n);  // m = n, not already in the cluster's keys
          if (key_pos) {
            int64_t* kpos = key_pos + (base + s) * S;
            for (int64_t j = 0; j < nk; ++j) kpos[j] = kp[koff[c] + j];
            std::fill(kpos + nk, kpos + S, n);
          }
        }
    }
  });
  t.groups = std::move(g);
  return t;
}

}  // namespace

VariantSchema RoutingAttention::schema() {
  VariantSchema s{"routing", "routing attention: k-means clusters of q and k (Roy et al. 2021, Routing Transformer)",
                  multihead_options(),
                  "O(B h (N k dk + sum_g nq_g nk_g (dk + dv))): ~N^2/k balanced, N^2 if one cluster takes all; "
                  "+ projections O(B N D h (dk + dv))",
                  "O(B h N (L + dk + dv)), L = largest cluster's key count (N/k balanced, N at worst)"};
  s.options.insert(s.options.begin(), {{"clusters", OptionType::Int, "4", "number of centroids k per head", {}},
                                       {"decay", OptionType::Double, "0.999", "centroid moving-average decay", {}}});
  s.capabilities = Capabilities::all();
  s.capabilities.cross = Support::no;  // queries and keys are routed to clusters together
  return s;
}

std::shared_ptr<Attention> RoutingAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  const int64_t k = o.get_int("clusters");
  const double decay = o.get_double("decay");
  if (k <= 0) o.reject("clusters", "must be positive");
  if (!(decay >= 0 && decay <= 1)) o.reject("decay", "must be in [0, 1]");
  return std::make_shared<RoutingAttention>(d_model, c, k, decay);
}

RoutingAttention::RoutingAttention(int64_t d_model, const HeadConfig& c, int64_t k, double dc)
    : ProjectedAttention("routing", d_model, c), clusters(k), decay(dc) {
  if (k <= 0) fail<ValueError>("routing: clusters must be positive, got {}", k);
  if (!(dc >= 0 && dc <= 1)) fail<ValueError>("routing: decay must be in [0, 1], got {}", dc);
  // Gaussian directions, normalised: uniform on the sphere, like k-means initial means drawn
  // at random (the reference code initialises from the first batch instead; a buffer keeps
  // the layer a pure function of its state dict).
  Tensor mu = init::normal_(empty({c.heads, k, c.key_size}), 0, 1);
  {
    NoGradGuard no_grad;
    mu = unit_rows(mu);
  }
  centroids = register_buffer("centroids", mu);
}

Tensor RoutingAttention::assign(const Tensor& t) const {
  NoGradGuard no_grad;
  if (t.dim() != 4 || t.size(1) != config.heads || t.size(3) != config.key_size)
    fail<ShapeError>("routing: assign expects (B, {}, N, {}), got {}", config.heads, config.key_size,
                     to_string(t.shape()));
  Tensor dots = matmul(unit_rows(t), unsqueeze(transpose(centroids, 1, 2), 0));  // (B, h, N, k)
  return argmax(dots, -1);                                                        // (B, h, N)
}

std::pair<Tensor, Tensor> RoutingAttention::clusters_of(const Tensor& x) {
  check_inputs("routing", d_model_, x, {}, false, false);
  NoGradGuard no_grad;
  Heads heads = project(x, x);
  return {assign(heads.q), assign(heads.k)};
}

void RoutingAttention::update_centroids(const Tensor& q_unit, const Tensor& k_unit, const Tensor& q_cluster,
                                        const Tensor& k_cluster) {
  NoGradGuard no_grad;
  const int64_t B = q_unit.size(0), h = q_unit.size(1), N = q_unit.size(2), dk = q_unit.size(3), K = clusters;
  const Tensor qu = kernels::contiguous(kernels::to_dtype(q_unit, kFloat64));
  const Tensor ku = kernels::contiguous(kernels::to_dtype(k_unit, kFloat64));
  const Tensor cq_t = kernels::contiguous(q_cluster), ck_t = kernels::contiguous(k_cluster);
  const double *pq = qu.data<double>(), *pk = ku.data<double>();
  const int64_t *cq = cq_t.data<int64_t>(), *ck = ck_t.data<int64_t>();
  // Updated in place when the buffer is float64 (each centroid reads only its own old value).
  Tensor mu = kernels::contiguous(kernels::to_dtype(centroids, kFloat64));  // (h, k, dk)
  double* pm = mu.data<double>();
  // One head per task: each writes its own centroids.
  parallel_for(h, 1, [&](int64_t i0, int64_t i1) {
    std::vector<double> total(K * dk);
    std::vector<int64_t> count(K);
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(total.begin(), total.end(), 0.0);
      std::fill(count.begin(), count.end(), 0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; ++n) {
          const int64_t row = (b * h + i) * N + n;
          for (int side = 0; side < 2; ++side) {
            const int64_t c = (side == 0 ? cq : ck)[row];
            const double* v = (side == 0 ? pq : pk) + row * dk;
            for (int64_t d = 0; d < dk; ++d) total[c * dk + d] += v[d];
            ++count[c];
          }
        }
      for (int64_t c = 0; c < K; ++c) {
        if (count[c] == 0) continue;  // nothing assigned: keep the centroid
        double* m = pm + (i * K + c) * dk;
        double norm = 0;
        for (int64_t d = 0; d < dk; ++d) {
          m[d] = decay * m[d] + (1 - decay) * total[c * dk + d] / double(count[c]);
          norm += m[d] * m[d];
        }
        norm = std::max(std::sqrt(norm), 1e-12);
        for (int64_t d = 0; d < dk; ++d) m[d] /= norm;
      }
    }
  });
  if (!mu.same(centroids)) kernels::copy_(centroids, mu);
}

AttentionResult RoutingAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                          bool need_weights) {
  const bool is_causal = causal || config.causal;
  check_inputs("routing", d_model_, x, context, is_causal, /*allows_context=*/false);
  const int64_t B = x.size(0), N = x.size(1), h = config.heads, dk = config.key_size, dv = config.value_size;
  const int64_t rows = B * h * N;
  MaskElements allowed_at(mask, B, h, N, "routing");
  Heads heads = project(x, x);
  if (N == 0) {
    Tensor o = zeros({B, h, 0, dv}, heads.v.dtype());
    return {finish(o), need_weights ? zeros({B, h, 0, 0}, o.dtype()) : Tensor()};
  }
  Tensor q_unit, k_unit, q_cluster, k_cluster;
  {
    NoGradGuard no_grad;
    q_unit = unit_rows(heads.q.detach());  // (B, h, N, dk)
    k_unit = unit_rows(heads.k.detach());
    q_cluster = assign(q_unit);  // (B, h, N)
    k_cluster = assign(k_unit);
  }
  RoutingTables t = build_tables(q_cluster, k_cluster, clusters, allowed_at, is_causal, need_weights);
  const int64_t L = t.groups->widest;

  const double scale = 1.0 / std::sqrt(double(dk));
  Tensor q = reshape(heads.q * scale, {rows, dk});  // (B*h*N, dk), scaled once
  Tensor k = reshape(heads.k, {rows, dk});
  Tensor v = reshape(heads.v, {rows, dv});
  Tensor qs = reshape(index_select(q, 0, t.q_rows), {B, h, N, dk});         // sorted by query cluster
  Tensor ks = reshape(index_select(k, 0, t.k_rows), {B, h, N, dk});         // sorted by key cluster
  Tensor vs = reshape(index_select(v, 0, t.k_rows), {B, h, N, dv});
  Tensor v_self = reshape(index_select(v, 0, t.q_rows), {B, h, N, dv});     // each sorted query's own v
  Tensor diag = sum(q * k, {-1}, true);                                      // (B*h*N, 1): q[n].k[n]/sqrt(dk)
  diag = reshape(index_select(diag, 0, t.q_rows), {B, h, N, 1});             // sorted query rows
  Tensor s = cat({grouped_scores(qs, ks, t.groups), diag}, -1);              // (B, h, N, L+1)
  Tensor p = softmax(s, -1, t.allowed);                                      // (B, h, N, L+1)
  Tensor pd = attention_dropout(p, config.attn_dropout, is_training(), gen);
  Tensor os = grouped_values(pd, vs, t.groups);                              // (B, h, N, dv)
  os = os + narrow(pd, 3, L, 1) * v_self;                                    // + P[n, slot L] v[n]
  Tensor o = reshape(index_select(reshape(os, {rows, dv}), 0, t.unsort), {B, h, N, dv});  // original order

  Tensor attention;
  if (need_weights) {
    Tensor a = scatter_add(zeros({B, h, N, N}, p.dtype()), 3, t.key_pos, p);  // sorted query rows
    attention = reshape(index_select(reshape(a, {rows, N}), 0, t.unsort), {B, h, N, N});
  }
  if (is_training()) update_centroids(q_unit, k_unit, q_cluster, k_cluster);
  return {finish(o), attention};
}

void RoutingAttention::own_options(OptionValues& v) const {
  v.set("clusters", clusters).set("decay", decay);
}

Tensor RoutingAttention::prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                                      const std::vector<int64_t>& keep) const {
  // Per head even when every head is kept: keep may reorder them.
  if (name == "centroids") return take_heads(from, keep, 1, 0);
  return ProjectedAttention::prune_tensor(name, from, to, keep);
}

}  // namespace attnlab::nn
