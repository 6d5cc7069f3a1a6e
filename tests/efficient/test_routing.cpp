// routing (docs/attention.md, "routing"; Routing Transformer): the grouped fast path against a
// dense twin written plainly from docs/attention.md (its own cluster assignment with loops), the
// one-cluster identity with mha, masks and empty rows, the diagonal when q[n] and k[n] part
// ways, the centroid update against a plain computation, gradients, pruning, errors and the
// docs example. The golden cases are run by tests/efficient/test_lsh.cpp's runner.
#include <algorithm>

#include "cluster_testing.hpp"
#include "helpers.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "nn/attention/routing.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::cluster;
using nn::make_attention;

namespace {

std::shared_ptr<nn::RoutingAttention> routing64(const std::string& spec) {
  return layer64<nn::RoutingAttention>(spec);
}

struct Twin {
  Tensor output, attention;   // (B, N, D), (B, h, N, N)
  std::vector<int64_t> cq, ck;  // (B, h, N)
  Tensor centroids;           // (h, k, dk) after one train-mode update
  double margin = INFINITY;   // smallest gap between the best and second-best centroid score
};

Twin naive_routing(const nn::RoutingAttention& m, const Tensor& x, const Tensor& mask, bool causal) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2), h = m.config.heads, dk = m.config.key_size,
                dv = m.config.value_size, K = m.clusters;
  const auto q = linear_values(*m.q_proj, x), k = linear_values(*m.k_proj, x), v = linear_values(*m.v_proj, x);
  const auto mu = m.centroids.to_vector<double>(), hm = m.head_mask.to_vector<double>();
  DenseMask allowed(mask, B, h, N);
  Twin tw;
  tw.cq.assign(B * h * N, 0);
  tw.ck.assign(B * h * N, 0);
  std::vector<double> o(B * N * h * dv, 0.0), att(B * h * N * N, 0.0);
  std::vector<double> total(h * K * dk, 0.0), count(h * K, 0.0);
  auto at = [&](const std::vector<double>& t, int64_t b, int64_t n, int64_t i, int64_t d) {
    return t[(b * N + n) * h * dk + i * dk + d];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i) {
      // Normalise, assign to the argmax-dot centroid (first on ties), accumulate for the update.
      for (int side = 0; side < 2; ++side)
        for (int64_t n = 0; n < N; ++n) {
          const auto& t = side == 0 ? q : k;
          std::vector<double> u(dk);
          double norm = 0;
          for (int64_t d = 0; d < dk; ++d) norm += at(t, b, n, i, d) * at(t, b, n, i, d);
          norm = std::max(std::sqrt(norm), 1e-12);
          for (int64_t d = 0; d < dk; ++d) u[d] = at(t, b, n, i, d) / norm;
          std::vector<double> score(K);
          for (int64_t c = 0; c < K; ++c) {
            score[c] = 0;
            for (int64_t d = 0; d < dk; ++d) score[c] += u[d] * mu[(i * K + c) * dk + d];
          }
          int64_t best = 0;
          for (int64_t c = 1; c < K; ++c)
            if (score[c] > score[best]) best = c;
          for (int64_t c = 0; c < K; ++c)
            if (c != best) tw.margin = std::min(tw.margin, score[best] - score[c]);
          (side == 0 ? tw.cq : tw.ck)[(b * h + i) * N + n] = best;
          for (int64_t d = 0; d < dk; ++d) total[(i * K + best) * dk + d] += u[d];
          count[i * K + best] += 1;
        }
      for (int64_t n = 0; n < N; ++n) {
        std::vector<std::pair<int64_t, double>> scores;
        for (int64_t j = 0; j < N; ++j) {
          const bool routed = tw.cq[(b * h + i) * N + n] == tw.ck[(b * h + i) * N + j] || j == n;
          if (!routed || !allowed(b, i, n, j) || (causal && j > n)) continue;
          double s = 0;
          for (int64_t d = 0; d < dk; ++d) s += at(q, b, n, i, d) * at(k, b, j, i, d);
          scores.emplace_back(j, s / std::sqrt(double(dk)));
        }
        if (scores.empty()) continue;
        double mx = -INFINITY, z = 0;
        for (auto& [j, s] : scores) mx = std::max(mx, s);
        for (auto& [j, s] : scores) z += std::exp(s - mx);
        for (auto& [j, s] : scores) {
          const double p = std::exp(s - mx) / z;
          att[((b * h + i) * N + n) * N + j] = p;
          for (int64_t d = 0; d < dv; ++d)
            o[(b * N + n) * h * dv + i * dv + d] += hm[i] * p * v[(b * N + j) * h * dv + i * dv + d];
        }
      }
    }
  std::vector<double> after = mu;
  for (int64_t r = 0; r < h * K; ++r) {
    if (count[r] == 0) continue;
    double norm = 0;
    for (int64_t d = 0; d < dk; ++d) {
      after[r * dk + d] = m.decay * mu[r * dk + d] + (1 - m.decay) * total[r * dk + d] / count[r];
      norm += after[r * dk + d] * after[r * dk + d];
    }
    for (int64_t d = 0; d < dk; ++d) after[r * dk + d] /= std::sqrt(norm);
  }
  tw.output = from_vector(linear_values(*m.out_proj, from_vector(o, {B, N, h * dv})), {B, N, D});
  tw.attention = from_vector(att, {B, h, N, N});
  tw.centroids = from_vector(after, {h, K, dk});
  return tw;
}

Tensor bool_tensor(const std::vector<int>& v, const Dims& shape) {
  Tensor t = empty(shape, kBool);
  bool* p = t.data<bool>();
  for (size_t e = 0; e < v.size(); ++e) p[e] = v[e] != 0;
  return t;
}

// (B, 1, N, N) mask: random, the first key always allowed, and batch 1's query row 1 empty.
Tensor query_mask(int64_t B, int64_t N, uint64_t seed) {
  Generator g(seed);
  auto u = rand({B, 1, N, N}, g, kFloat64).to_vector<double>();
  std::vector<int> v(u.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < N; ++m) {
        const int64_t e = (b * N + n) * N + m;
        v[e] = (u[e] < 0.7 || m == 0) && !(b == 1 && n == 1);
      }
  return bool_tensor(v, {B, 1, N, N});
}

// (2, 1, 1, N) key padding: batch 0 pads its last two keys, batch 1 every key.
Tensor padding_mask(int64_t N) {
  std::vector<int> v(2 * N, 0);
  for (int64_t m = 0; m < N - 2; ++m) v[m] = 1;
  return bool_tensor(v, {2, 1, 1, N});
}

void check_twin(nn::RoutingAttention& a, const Tensor& x, const Tensor& mask, bool causal) {
  Twin tw = naive_routing(a, x, mask, causal);
  auto [cq, ck] = a.clusters_of(x);
  CHECK(cq.to_vector<int64_t>() == tw.cq);
  CHECK(ck.to_vector<int64_t>() == tw.ck);
  auto r = a.forward(x, {}, mask, causal, true);
  CHECK(allclose(r.output, tw.output, 1e-10, 1e-12));
  CHECK(allclose(r.attention, tw.attention, 1e-10, 1e-12));
  for (double e : r.output.to_vector<double>()) CHECK(std::isfinite(e));
}

}  // namespace

TEST_CASE("routing matches the dense twin, including queries whose own key went to another cluster") {
  int parted = 0, together = 0;
  for (std::string spec : {"routing(heads=2, clusters=3)", "routing(heads=1, clusters=4, key_size=3, value_size=5)",
                           "routing(heads=2, clusters=2, bias=false)", "routing(heads=4, clusters=5)"}) {
    CAPTURE(spec);
    auto a = routing64(spec);
    a->eval();
    Generator g(1);
    Tensor x = randn({2, 10, 8}, g, kFloat64);
    check_twin(*a, x, {}, false);
    auto [cq, ck] = a->clusters_of(x);
    auto vq = cq.to_vector<int64_t>(), vk = ck.to_vector<int64_t>();
    for (size_t e = 0; e < vq.size(); ++e) (vq[e] == vk[e] ? together : parted) += 1;
  }
  CHECK(parted > 0);    // the diagonal slot is exercised
  CHECK(together > 0);  // and the in-cluster diagonal too
}

TEST_CASE("routing causal, padding masks, query masks and fully masked rows match the twin") {
  auto a = routing64("routing(heads=2, clusters=3)");
  a->eval();
  Generator g(2);
  Tensor x = randn({2, 9, 8}, g, kFloat64);
  check_twin(*a, x, {}, true);
  check_twin(*a, x, padding_mask(9), false);
  check_twin(*a, x, query_mask(2, 9, 3), false);
  check_twin(*a, x, query_mask(2, 9, 4), true);
  auto r = a->forward(x, {}, padding_mask(9), false, true);
  for (int64_t n = 0; n < 9; ++n) CHECK(allclose(select(select(r.output, 0, 1), 0, n), a->out_proj->bias, 0, 1e-15));
  for (double p : select(r.attention, 0, 1).to_vector<double>()) CHECK(p == 0.0);
  auto rq = a->forward(x, {}, query_mask(2, 9, 3), false, true);
  for (double p : select(select(rq.attention, 0, 1), 1, 1).to_vector<double>()) CHECK(p == 0.0);
}

TEST_CASE("routing with one cluster equals mha with the same projections") {
  auto a = routing64("routing(heads=2, clusters=1)");
  a->eval();
  auto m = make_attention("mha(heads=2)", 8);
  m->to(kFloat64);
  TensorMap w = a->state_dict();
  w.erase("centroids");
  m->load_state_dict(w);
  Generator g(3);
  Tensor x = randn({2, 7, 8}, g, kFloat64);
  for (int variant = 0; variant < 4; ++variant) {
    Tensor mask = variant == 1 ? padding_mask(7) : variant >= 2 ? query_mask(2, 7, 5) : Tensor();
    const bool causal = variant == 3;
    auto want = m->forward(x, {}, mask, causal, true);
    auto got = a->forward(x, {}, mask, causal, true);
    CHECK(allclose(got.output, want.output, 1e-10, 1e-12));
    CHECK(allclose(got.attention, want.attention, 1e-10, 1e-12));
    check_twin(*a, x, mask, causal);
  }
}

TEST_CASE("routing with unbalanced clusters: all in one, and clusters with queries but no keys") {
  auto a = routing64("routing(heads=2, clusters=3)");
  a->eval();
  Generator g(4);
  Tensor x = randn({2, 8, 8}, g, kFloat64);
  {
    // Centroids 1 and 2 copy centroid 0: ties go to the first, so everyone is in cluster 0.
    NoGradGuard ng;
    for (int64_t c = 1; c < 3; ++c) {
      Tensor dst = select(a->centroids, 1, c);
      copy_(dst, select(a->centroids, 1, 0));
    }
  }
  for (int64_t c : a->clusters_of(x).first.to_vector<int64_t>()) CHECK(c == 0);
  check_twin(*a, x, query_mask(2, 8, 6), false);
  // Many clusters on a short sequence: some cluster gets queries and no keys (the diagonal
  // slot is then all those queries have).
  auto b = routing64("routing(heads=2, clusters=6)");
  b->eval();
  Tensor xs = randn({2, 5, 8}, g, kFloat64);
  auto [cq, ck] = b->clusters_of(xs);
  auto vq = cq.to_vector<int64_t>(), vk = ck.to_vector<int64_t>();
  int lonely = 0;
  for (int64_t bh = 0; bh < 4; ++bh)
    for (int64_t n = 0; n < 5; ++n)
      lonely += std::none_of(vk.begin() + bh * 5, vk.begin() + bh * 5 + 5, [&](int64_t c) { return c == vq[bh * 5 + n]; });
  CHECK(lonely > 0);
  check_twin(*b, xs, {}, false);
  check_twin(*b, xs, {}, true);
}

TEST_CASE("routing train mode updates the centroids by the spec's rule, and eval mode leaves them alone") {
  auto a = routing64("routing(heads=2, clusters=4, decay=0.8)");
  {
    NoGradGuard ng;  // cluster 3 duplicates cluster 0, so it receives nothing and must keep its value
    Tensor dst = select(a->centroids, 1, 3);
    copy_(dst, select(a->centroids, 1, 0));
  }
  Generator g(5);
  Tensor x = randn({2, 6, 8}, g, kFloat64);
  const Tensor before = clone(a->centroids);
  a->eval();
  a->forward(x, {}, padding_mask(6));
  CHECK(allclose(a->centroids, before, 0, 0));  // bitwise
  a->train();
  Twin tw = naive_routing(*a, x, padding_mask(6), false);
  auto r = a->forward(x, {}, padding_mask(6), false, true);
  // the forward itself used the old centroids
  CHECK(allclose(r.output, tw.output, 1e-10, 1e-12));
  CHECK(allclose(a->centroids, tw.centroids, 1e-12, 1e-14));
  CHECK(allclose(select(a->centroids, 1, 3), select(before, 1, 3), 0, 0));
  CHECK_FALSE(allclose(a->centroids, before, 1e-6, 1e-8));
  Tensor norms = sqrt(sum(a->centroids * a->centroids, {-1}));  // (h, k)
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t c = 0; c < 3; ++c) CHECK(norms.at({i, c}) == doctest::Approx(1.0).epsilon(1e-14));
  CHECK_FALSE(a->centroids.requires_grad());
  // float32 layers update too (the rule runs in float64)
  manual_seed(7);
  auto f = make_attention("routing(heads=2, clusters=4, decay=0.8)", 8);
  auto& fr = static_cast<nn::RoutingAttention&>(*f);
  Tensor f_before = clone(fr.centroids);
  f->train();
  f->forward(to(x, kFloat32));
  CHECK_FALSE(allclose(fr.centroids, f_before, 1e-4, 1e-6));
  CHECK(fr.centroids.dtype() == kFloat32);
}

TEST_CASE("routing gradcheck at a point where no assignment flips: plain, causal, masked, gated") {
  for (std::string spec : {"routing(heads=2, clusters=3)", "routing(heads=2, clusters=2, causal=true)",
                           "routing(heads=2, clusters=3, bias=false, gate=hard_concrete)"}) {
    CAPTURE(spec);
    auto a = routing64(spec);
    a->eval();
    Generator g(11);
    Tensor x = randn({2, 6, 8}, g, kFloat64).requires_grad_();
    const bool masked = spec.find("gate") != std::string::npos;
    Tensor mask = masked ? query_mask(2, 6, 12) : Tensor();
    Twin tw = naive_routing(*a, x.detach(), mask, false);
    CHECK(tw.margin > 1e-3);
    std::vector<Tensor> inputs = {x};
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    const Tensor centroids = clone(a->centroids);
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, mask).output; }, inputs);
    CHECK_MESSAGE(r.ok, r.message);
    auto [cq, ck] = a->clusters_of(x.detach());
    CHECK(cq.to_vector<int64_t>() == tw.cq);
    CHECK(ck.to_vector<int64_t>() == tw.ck);
    CHECK(allclose(a->centroids, centroids, 0, 0));
  }
}

TEST_CASE("routing parameters: MHA projections, the centroids buffer with unit rows") {
  auto a = make_attention("routing(heads=2, key_size=3, clusters=5)", 8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj.weight(6,8)", "q_proj.bias(6)", "k_proj.weight(6,8)",
                                          "k_proj.bias(6)", "v_proj.weight(8,8)", "v_proj.bias(8)",
                                          "out_proj.weight(8,8)", "out_proj.bias(8)"});
  std::vector<std::string> bufs;
  for (auto& [n, b] : a->named_buffers()) bufs.push_back(n + to_string(b.shape()));
  CHECK(bufs == std::vector<std::string>{"head_mask(2)", "centroids(2,5,3)"});
  for (double norm : sqrt(sum(square(a->get_buffer("centroids")), {-1})).to_vector<double>())
    CHECK(norm == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(a->spec() == "routing(clusters=5, decay=0.999, heads=2, key_size=3, value_size=4, bias=true, causal=false, "
                     "attn_dropout=0)");
  CHECK(make_attention(a->spec(), 8)->spec() == a->spec());
}

TEST_CASE("routing errors: a context, bad clusters or decay, bad masks") {
  auto a = make_attention("routing(heads=2)", 8);
  CHECK(error_of([&] { a->forward(zeros({1, 4, 8}), zeros({1, 4, 8})); }).find("routing: self-attention only") !=
        std::string::npos);
  CHECK(error_of([] { make_attention("routing(clusters=0)", 8); }).find("routing: option clusters=0: must be positive") !=
        std::string::npos);
  CHECK(error_of([] { make_attention("routing(decay=1.5)", 8); }).find("decay=1.5: must be in [0, 1]") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 4, 8}), {}, zeros({1, 1, 4, 4})); }).find("mask must be bool") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 4, 8}), {}, ones({1, 1, 3, 4}, kBool)); }).find("does not broadcast") !=
        std::string::npos);
}

TEST_CASE("routing float32, dropout, head_mask gradient, N = 0") {
  manual_seed(3);
  auto f = make_attention("routing(heads=2, clusters=2)", 8);
  f->eval();
  Generator g(9);
  Tensor x = randn({2, 5, 8}, g);
  CHECK(f->forward(x).output.dtype() == kFloat32);
  auto a = routing64("routing(heads=2, clusters=2, attn_dropout=0.5, decay=1)");
  Tensor x64 = to(x, kFloat64);
  a->train();
  CHECK_FALSE(allclose(a->forward(x64).output, a->forward(x64).output));
  a->eval();
  a->head_mask.requires_grad_();
  sum(a->forward(x64).output).backward();
  REQUIRE(a->head_mask.grad().defined());
  a->head_mask.requires_grad_(false);
  CHECK(a->forward(zeros({2, 0, 8}, kFloat64)).output.shape() == Dims{2, 0, 8});
}

TEST_CASE("docs/attention.md: the routing example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("routing(heads=4, clusters=4)", 32);
  auto& routing = static_cast<nn::RoutingAttention&>(*attn);
  Generator gen(1);
  Tensor x = randn({2, 20, 32}, gen);  // (B, N, D)
  Tensor before = clone(routing.centroids);                                  // (4, 4, 8)
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);  // train mode: updates centroids
  Tensor y = r.output;                                                         // (2, 20, 32)
  auto [q_cluster, k_cluster] = routing.clusters_of(x);                        // (2, 4, 20) each
  sum(y).backward();
  attn->eval();  // centroids stay fixed from here on
  CHECK(y.shape() == Dims{2, 20, 32});
  CHECK(r.attention.shape() == Dims{2, 4, 20, 20});
  CHECK(q_cluster.shape() == Dims{2, 4, 20});
  CHECK_FALSE(allclose(routing.centroids, before, 1e-7, 1e-9));
}
