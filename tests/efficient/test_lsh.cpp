// lsh (docs/attention.md, "lsh"; Reformer): the sorted-chunk fast path against a dense twin
// written plainly from the documented bullets (its own hashing, sorting and chunking with loops),
// the one-chunk identity, masks and empty rows, gradients, pruning, errors, and the docs
// example. The golden cases of both clustering variants (lsh and routing, written by
// tests/reference/cluster_reference.py) are checked here too, by one runner.
#include <algorithm>
#include <numeric>
#include <set>

#include "golden.hpp"
#include "cluster_testing.hpp"
#include "helpers.hpp"
#include "nn/attention/lsh.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::cluster;
using nn::make_attention;

namespace {

std::shared_ptr<nn::LshAttention> lsh64(const std::string& spec) {
  return layer64<nn::LshAttention>(spec);
}

struct Twin {
  Tensor output;                 // (B, N, D)
  Tensor attention;              // (B, h, N, N)
  std::vector<int64_t> buckets;  // (B, h, R, N)
  double margin = INFINITY;      // smallest gap between the best and second-best hash score
  int empty_rounds = 0;          // (query, round) pairs with nothing allowed while another round has keys
};

// The documented formulas with loops: per round, hash, sort by (bucket, position), chunk, attend
// own + previous chunk (each key once), self -1e5, masks by position, lse; combine rounds.
Twin naive_lsh(const nn::LshAttention& m, const Tensor& x, const Tensor& mask, bool causal) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2), h = m.config.heads, dk = m.config.key_size,
                dv = m.config.value_size, R = m.hashes, nb = m.buckets, c = m.chunk, nc = N / c;
  const auto q = linear_values(*m.q_proj, x), v = linear_values(*m.v_proj, x), rot = m.rotations.to_vector<double>();
  const auto hm = m.head_mask.to_vector<double>();
  DenseMask allowed(mask, B, h, N);
  Twin tw;
  tw.buckets.assign(B * h * R * N, 0);
  std::vector<double> o(B * N * h * dv, 0.0), att(B * h * N * N, 0.0);
  auto qv = [&](int64_t b, int64_t n, int64_t i, int64_t d) { return q[(b * N + n) * h * dk + i * dk + d]; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i) {
      std::vector<std::vector<double>> kh(N, std::vector<double>(dk));
      for (int64_t n = 0; n < N; ++n) {
        double norm = 0;
        for (int64_t d = 0; d < dk; ++d) norm += qv(b, n, i, d) * qv(b, n, i, d);
        norm = std::max(std::sqrt(norm), 1e-12);
        for (int64_t d = 0; d < dk; ++d) kh[n][d] = qv(b, n, i, d) / norm;
      }
      // lse[t][n], p[t][n][m]
      std::vector<std::vector<double>> lse(R, std::vector<double>(N, -INFINITY));
      std::vector<std::vector<std::vector<double>>> p(R, std::vector<std::vector<double>>(N, std::vector<double>(N, 0)));
      for (int64_t t = 0; t < R; ++t) {
        std::vector<int64_t> bucket(N);
        for (int64_t n = 0; n < N; ++n) {
          std::vector<double> y(nb);
          for (int64_t j = 0; j < nb / 2; ++j) {
            double acc = 0;
            for (int64_t d = 0; d < dk; ++d) acc += kh[n][d] * rot[((i * dk + d) * R + t) * (nb / 2) + j];
            y[j] = acc;
            y[j + nb / 2] = -acc;
          }
          int64_t best = 0;
          for (int64_t j = 1; j < nb; ++j)
            if (y[j] > y[best]) best = j;
          double second = -INFINITY;
          for (int64_t j = 0; j < nb; ++j)
            if (j != best) second = std::max(second, y[j]);
          tw.margin = std::min(tw.margin, y[best] - second);
          bucket[n] = best;
          tw.buckets[((b * h + i) * R + t) * N + n] = best;
        }
        std::vector<int64_t> order(N);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int64_t a1, int64_t a2) {
          return bucket[a1] != bucket[a2] ? bucket[a1] < bucket[a2] : a1 < a2;
        });
        for (int64_t s = 0; s < N; ++s) {
          const int64_t n = order[s], j = s / c, prev = (j + nc - 1) % nc;
          std::set<int64_t> keys;
          for (int64_t r = 0; r < c; ++r) keys.insert(order[j * c + r]), keys.insert(order[prev * c + r]);
          std::vector<std::pair<int64_t, double>> scores;
          for (int64_t key : keys) {
            if (!allowed(b, i, n, key) || (causal && key > n)) continue;
            double sc = -1e5;
            if (key != n) {
              sc = 0;
              for (int64_t d = 0; d < dk; ++d) sc += qv(b, n, i, d) * kh[key][d];
              sc /= std::sqrt(double(dk));
            }
            scores.emplace_back(key, sc);
          }
          if (scores.empty()) continue;
          double mx = -INFINITY, z = 0;
          for (auto& [key, sc] : scores) mx = std::max(mx, sc);
          for (auto& [key, sc] : scores) z += std::exp(sc - mx);
          lse[t][n] = mx + std::log(z);
          for (auto& [key, sc] : scores) p[t][n][key] = std::exp(sc - lse[t][n]);
        }
      }
      for (int64_t n = 0; n < N; ++n) {
        double mx = -INFINITY, z = 0;
        for (int64_t t = 0; t < R; ++t) mx = std::max(mx, lse[t][n]);
        if (mx == -INFINITY) continue;  // nothing allowed in any round: zero output
        for (int64_t t = 0; t < R; ++t) tw.empty_rounds += lse[t][n] == -INFINITY;
        for (int64_t t = 0; t < R; ++t) z += std::exp(lse[t][n] - mx);
        for (int64_t t = 0; t < R; ++t) {
          const double w = std::exp(lse[t][n] - mx) / z;
          for (int64_t key = 0; key < N; ++key) {
            const double pw = w * p[t][n][key];
            att[((b * h + i) * N + n) * N + key] += pw;
            for (int64_t d = 0; d < dv; ++d)
              o[(b * N + n) * h * dv + i * dv + d] += hm[i] * pw * v[(b * N + key) * h * dv + i * dv + d];
          }
        }
      }
    }
  auto y = linear_values(*m.out_proj, from_vector(o, {B, N, h * dv}));
  tw.output = from_vector(y, {B, N, D});
  tw.attention = from_vector(att, {B, h, N, N});
  return tw;
}

// (B, 1, N, N) mask: random, the first key always allowed, and batch 1's query row 1 empty.
Tensor query_mask(int64_t B, int64_t N, uint64_t seed) {
  Generator g(seed);
  auto u = rand({B, 1, N, N}, g, kFloat64).to_vector<double>();
  std::vector<bool> v(u.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < N; ++m) {
        const int64_t e = (b * N + n) * N + m;
        v[e] = (u[e] < 0.7 || m == 0) && !(b == 1 && n == 1);
      }
  Tensor t = empty({B, 1, N, N}, kBool);
  bool* p = t.data<bool>();
  for (size_t e = 0; e < v.size(); ++e) p[e] = v[e];
  return t;
}

// (B, 1, 1, N) key padding: batch 0 pads its last two keys, batch 1 every key.
Tensor padding_mask(int64_t N) {
  Tensor t = empty({2, 1, 1, N}, kBool);
  bool* p = t.data<bool>();
  for (int64_t m = 0; m < N; ++m) p[m] = m < N - 2, p[N + m] = false;
  return t;
}

// Returns how many (query, round) pairs had nothing allowed while another round had keys.
int check_twin(nn::LshAttention& a, const Tensor& x, const Tensor& mask, bool causal) {
  Twin tw = naive_lsh(a, x, mask, causal);
  CHECK(a.hash(x).to_vector<int64_t>() == tw.buckets);
  auto r = a.forward(x, {}, mask, causal, true);
  CHECK(allclose(r.output, tw.output, 1e-10, 1e-12));
  CHECK(allclose(r.attention, tw.attention, 1e-10, 1e-12));
  for (double e : r.output.to_vector<double>()) CHECK(std::isfinite(e));
  return tw.empty_rounds;
}

}  // namespace

TEST_CASE("lsh matches the dense twin: several chunks, rounds and bucket counts") {
  for (std::string spec : {"lsh(heads=2, buckets=4, hashes=2, chunk=4)", "lsh(heads=2, buckets=2, hashes=3, chunk=3)",
                           "lsh(heads=1, buckets=6, hashes=1, chunk=2, key_size=3, value_size=5)",
                           "lsh(heads=2, buckets=4, hashes=2, chunk=6)"}) {
    CAPTURE(spec);
    auto a = lsh64(spec);
    Generator g(1);
    Tensor x = randn({2, 12, 8}, g, kFloat64);
    check_twin(*a, x, {}, false);
  }
}

TEST_CASE("lsh causal, padding masks, query masks and fully masked rows match the twin, and empty rows are zero") {
  auto a = lsh64("lsh(heads=2, buckets=4, hashes=2, chunk=3)");
  Generator g(2);
  Tensor x = randn({2, 9, 8}, g, kFloat64);
  check_twin(*a, x, {}, true);
  check_twin(*a, x, padding_mask(9), false);
  // Query masks can disallow a query's own position: then a round may have no allowed key
  // while another has some, and must weigh 0.
  int empty_rounds = check_twin(*a, x, query_mask(2, 9, 3), false);
  empty_rounds += check_twin(*a, x, query_mask(2, 9, 4), true);
  CHECK(empty_rounds > 0);
  // Batch 1 allows nothing: every head outputs zero, so the layer gives out_proj.bias; no NaN.
  auto r = a->forward(x, {}, padding_mask(9), false, true);
  for (int64_t n = 0; n < 9; ++n) CHECK(allclose(select(select(r.output, 0, 1), 0, n), a->out_proj->bias, 0, 1e-15));
  for (double p : select(r.attention, 0, 1).to_vector<double>()) CHECK(p == 0.0);
  // The query-mask row (b=1, n=1) is empty too.
  auto rq = a->forward(x, {}, query_mask(2, 9, 3), false, true);
  for (double p : select(select(rq.attention, 0, 1), 1, 1).to_vector<double>()) CHECK(p == 0.0);
  // Rows of the attention sum to 1 where anything is allowed.
  Tensor rows = sum(r.attention, {-1});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t n = 0; n < 9; ++n) CHECK(rows.at({0, i, n}) == doctest::Approx(1.0).epsilon(1e-12));
}

TEST_CASE("lsh with one chunk and one bucket is shared-QK full attention with the self score -1e5") {
  // One bucket: zero rotations make every y = 0, and argmax([0, -0]) = 0 for everyone.
  auto a = lsh64("lsh(heads=2, buckets=2, hashes=2, chunk=7)");
  {
    NoGradGuard ng;
    fill_(a->rotations, 0.0);
  }
  Generator g(5);
  Tensor x = randn({2, 7, 8}, g, kFloat64);
  CHECK(a->hash(x).to_vector<int64_t>() == std::vector<int64_t>(2 * 2 * 2 * 7, 0));
  // The dense formula: S = q k^T / sqrt(dk), k = q/||q||, diagonal -1e5, masked softmax, P V.
  auto dense = [&](const Tensor& mask, bool causal) {
    const int64_t h = 2, dk = 4, N = 7;
    Tensor q = transpose(reshape((*a->q_proj)(x), {2, N, h, dk}), 1, 2);  // (B, h, N, dk)
    Tensor k = q / sqrt(sum(q * q, {-1}, true));
    Tensor s = matmul(q, transpose(k, -2, -1)) / std::sqrt(double(dk));
    s = where(eye(N, kBool), full({N, N}, -1e5, kFloat64), s);
    Tensor allowed = ones({1, 1, N, N}, kBool);
    if (mask.defined()) allowed = logical_and(allowed, mask);
    if (causal) allowed = logical_and(allowed, tril(ones({N, N}, kBool)));
    Tensor p = softmax(s, -1, allowed);
    Tensor v = transpose(reshape((*a->v_proj)(x), {2, N, h, dk}), 1, 2);
    Tensor o = reshape(transpose(matmul(p, v), 1, 2), {2, N, h * dk});
    return std::make_pair((*a->out_proj)(o), p);
  };
  for (int variant = 0; variant < 3; ++variant) {
    Tensor mask = variant == 1 ? query_mask(2, 7, 6) : Tensor();
    const bool causal = variant == 2;
    auto [want, p] = dense(mask, causal);
    auto r = a->forward(x, {}, mask, causal, true);
    CHECK(allclose(r.output, want, 1e-10, 1e-12));
    CHECK(allclose(r.attention, p, 1e-10, 1e-12));
    check_twin(*a, x, mask, causal);
  }
  // With one chunk neither the buckets nor the number of rounds matter: random rotations and
  // three rounds give the same layer.
  auto b = lsh64("lsh(heads=2, buckets=4, hashes=3, chunk=7)");
  TensorMap w = a->state_dict();
  w["rotations"] = clone(b->rotations);
  b->load_state_dict(w);
  CHECK(allclose(b->forward(x).output, dense({}, false).first, 1e-10, 1e-12));
}

TEST_CASE("lsh gradcheck at a point where no bucket flips: plain, causal, masked, gated, empty rows") {
  for (std::string spec : {"lsh(heads=2, buckets=4, hashes=2, chunk=4)",
                           "lsh(heads=2, buckets=4, hashes=2, chunk=2, causal=true)",
                           "lsh(heads=2, buckets=2, hashes=2, chunk=4, bias=false, gate=hard_concrete)"}) {
    CAPTURE(spec);
    auto a = lsh64(spec);
    a->eval();
    Generator g(11);
    Tensor x = randn({2, 8, 8}, g, kFloat64).requires_grad_();
    const bool masked = spec.find("bias=false") != std::string::npos;
    Tensor mask = masked ? query_mask(2, 8, 12) : Tensor();
    // Central differences move any hash score by far less than this margin.
    Twin tw = naive_lsh(*a, x.detach(), mask, false);
    CHECK(tw.margin > 1e-3);
    std::vector<Tensor> inputs = {x};
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    auto before = a->hash(x.detach()).to_vector<int64_t>();
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, mask).output; }, inputs);
    CHECK_MESSAGE(r.ok, r.message);
    CHECK(a->hash(x.detach()).to_vector<int64_t>() == before);
  }
}

TEST_CASE("lsh head_mask gradient, float32, dropout in train mode, N = 0") {
  auto a = lsh64("lsh(heads=2, buckets=4, hashes=2, chunk=4)");
  a->head_mask.requires_grad_();
  Generator g(13);
  Tensor x = randn({1, 8, 8}, g, kFloat64);
  sum(a->forward(x).output).backward();
  REQUIRE(a->head_mask.grad().defined());
  CHECK(a->head_mask.grad().shape() == Dims{2});
  a->head_mask.requires_grad_(false);

  manual_seed(7);
  auto f = make_attention("lsh(heads=2, buckets=4, hashes=2, chunk=4)", 8);
  Tensor y32 = f->forward(to(x, kFloat32)).output;
  CHECK(y32.dtype() == kFloat32);
  CHECK(allclose(to(y32, kFloat64), a->forward(x).output, 1e-4, 1e-5));

  auto d = lsh64("lsh(heads=2, buckets=4, hashes=2, chunk=4, attn_dropout=0.5)");
  d->train();
  CHECK_FALSE(allclose(d->forward(x).output, d->forward(x).output));
  d->eval();
  CHECK(allclose(d->forward(x).output, d->forward(x).output, 0, 0));

  CHECK(a->forward(zeros({2, 0, 8}, kFloat64)).output.shape() == Dims{2, 0, 8});
}

TEST_CASE("lsh parameters: shared QK (no k_proj) and the rotations buffer") {
  auto a = make_attention("lsh(heads=2, key_size=3, buckets=6, hashes=3)", 8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj.weight(6,8)", "q_proj.bias(6)", "v_proj.weight(8,8)",
                                          "v_proj.bias(8)", "out_proj.weight(8,8)", "out_proj.bias(8)"});
  std::vector<std::string> bufs;
  for (auto& [n, b] : a->named_buffers()) bufs.push_back(n + to_string(b.shape()));
  CHECK(bufs == std::vector<std::string>{"head_mask(2)", "rotations(2,3,3,3)"});
  CHECK(a->spec() == "lsh(buckets=6, hashes=3, chunk=32, heads=2, key_size=3, value_size=4, bias=true, causal=false, "
                     "attn_dropout=0)");
  // The spec string round-trips.
  CHECK(make_attention(a->spec(), 8)->spec() == a->spec());
}

TEST_CASE("lsh errors: N not a multiple of chunk, odd buckets, a context, bad options") {
  auto a = make_attention("lsh(heads=2, chunk=4)", 8);
  auto e = error_of([&] { a->forward(zeros({1, 6, 8})); });
  CHECK(e.find("lsh: sequence length N=6 is not a multiple of chunk=4") != std::string::npos);
  e = error_of([&] { a->forward(zeros({1, 4, 8}), zeros({1, 4, 8})); });
  CHECK(e.find("lsh: self-attention only") != std::string::npos);
  e = error_of([] { make_attention("lsh(buckets=5)", 8); });
  CHECK(e.find("lsh: option buckets=5") != std::string::npos);
  CHECK(e.find("even") != std::string::npos);
  CHECK(error_of([] { make_attention("lsh(buckets=0)", 8); }).find("buckets=0") != std::string::npos);
  CHECK(error_of([] { make_attention("lsh(hashes=0)", 8); }).find("hashes=0: must be positive") != std::string::npos);
  CHECK(error_of([] { make_attention("lsh(chunk=-1)", 8); }).find("chunk=-1: must be positive") != std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 4, 8}), {}, zeros({1, 1, 4, 4})); }).find("mask must be bool") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({2, 4, 8}), {}, ones({3, 1, 1, 4}, kBool)); }).find("does not broadcast") !=
        std::string::npos);
}

// ---- golden file (tests/reference/cluster_reference.py) ----

namespace {

// Each case's "mode" metadata puts routing_train in train mode, where the forward updates the
// centroids; the file's buffer.centroids pins the update.
const GoldenFile& golden() { return reference_file("cluster_golden.safetensors"); }
void run_golden(const std::string& name) { run_golden_case(golden(), name); }

}  // namespace

TEST_CASE("lsh golden: padding and query masks with an empty row, two rounds, three chunks") { run_golden("lsh_masked"); }
TEST_CASE("lsh golden: causal, three rounds, hard_concrete gate and head_mask") { run_golden("lsh_causal_gate"); }
TEST_CASE("lsh golden: one chunk, key_size != value_size") { run_golden("lsh_one_chunk"); }
TEST_CASE("routing golden: train mode, padding mask, updated centroids") { run_golden("routing_train"); }
TEST_CASE("routing golden: causal, query mask with an empty row, gate, key_size != value_size") {
  run_golden("routing_causal_gate");
}
TEST_CASE("cluster golden: the file and these tests name the same cases") {
  check_golden_cases(golden(),
                     {"lsh_masked", "lsh_causal_gate", "lsh_one_chunk", "routing_train", "routing_causal_gate"});
}

TEST_CASE("docs/attention.md: the lsh example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("lsh(heads=4, buckets=4, hashes=2, chunk=8)", 32);
  Generator gen(1);
  Tensor x = randn({2, 32, 32}, gen);  // (B, N, D), N a multiple of chunk
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);
  Tensor y = r.output;     // (2, 32, 32)
  Tensor p = r.attention;  // (2, 4, 32, 32), densified: small inputs only
  auto& lsh = static_cast<nn::LshAttention&>(*attn);
  Tensor buckets = lsh.hash(x);  // (2, 4, 2, 32): bucket of each position per round
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 32, 32});
  CHECK(p.shape() == Dims{2, 4, 32, 32});
  CHECK(buckets.shape() == Dims{2, 4, 2, 32});
  CHECK(p.at({0, 0, 0, 1}) == 0.0);  // causal
}
