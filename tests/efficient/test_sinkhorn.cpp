// sinkhorn (docs/attention.md, "sinkhorn"): a dense twin of the documented formulas (output and the
// effective attention over the original keys), the one-block identity with mha, the sort
// matrix's normalisation, gradients for every option, key masks (a fully masked key set gives
// zero head outputs), pruning, errors, parameter names and init, and the docs example.
#include "helpers.hpp"
#include "lowrank_helpers.hpp"
#include "nn/attention/sinkhorn.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::lowrank;

namespace {

// P (nb, nb) for batch element b: s_i the mean of x over the positions of block i that some head
// allows (`present`; 0 when there is none), R = (s W^T + bias)[:, :nb] / temperature, then
// `iters` times rows and columns normalised in log space; P = exp(R).
Vec sort_matrix(const nn::SinkhornAttention& l, const Tensor& x, int64_t b, const std::vector<bool>& present) {
  const int64_t N = x.size(1), D = x.size(2), bs = l.settings.block, nb = N / bs;
  Vec xb = batch(x, b), w = l.sort_net->weight.to_vector<double>();
  Vec bias = l.sort_net->bias.defined() ? l.sort_net->bias.to_vector<double>() : Vec(w.size() / D, 0.0);
  Vec r(nb * nb);
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t j = 0; j < nb; ++j) {
      double acc = bias[j];
      for (int64_t c = 0; c < D; ++c) {
        double s = 0, count = 0;
        for (int64_t t = 0; t < bs; ++t)
          if (present[i * bs + t]) s += xb[(i * bs + t) * D + c], count += 1;
        acc += (count > 0 ? s / count : 0.0) * w[j * D + c];
      }
      r[i * nb + j] = acc / l.settings.temperature;
    }
  auto lse = [](const std::vector<double>& v) {
    double mx = *std::max_element(v.begin(), v.end()), z = 0;
    for (double e : v) z += std::exp(e - mx);
    return mx + std::log(z);
  };
  for (int64_t it = 0; it < l.settings.iters; ++it) {
    for (int64_t i = 0; i < nb; ++i) {
      double z = lse(Vec(r.begin() + i * nb, r.begin() + (i + 1) * nb));
      for (int64_t j = 0; j < nb; ++j) r[i * nb + j] -= z;
    }
    for (int64_t j = 0; j < nb; ++j) {
      Vec col(nb);
      for (int64_t i = 0; i < nb; ++i) col[i] = r[i * nb + j];
      double z = lse(col);
      for (int64_t i = 0; i < nb; ++i) r[i * nb + j] -= z;
    }
  }
  for (double& e : r) e = std::exp(e);
  return r;
}

struct Twin {
  Tensor output;     // (B, N, D)
  Tensor attention;  // (B, h, N, N): the effective attention over the original keys
};

Twin naive_sinkhorn(const nn::SinkhornAttention& l, const Tensor& x, const Tensor& mask) {
  const int64_t B = x.size(0), N = x.size(1), h = l.config.heads, dk = l.config.key_size, dv = l.config.value_size;
  const int64_t bs = l.settings.block, nb = N / bs;
  auto allowed = key_allowed(mask, B, h, N);
  std::vector<std::vector<Vec>> o(B, std::vector<Vec>(h));
  Vec att_all;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<bool> present(N, false);  // allowed in some head
    for (int64_t i = 0; i < h; ++i)
      for (int64_t m = 0; m < N; ++m) present[m] = present[m] || allowed[b][i][m];
    Vec P = sort_matrix(l, x, b, present);
    Vec q = linear(*l.q_proj, batch(x, b), N), k = linear(*l.k_proj, batch(x, b), N);
    Vec v = linear(*l.v_proj, batch(x, b), N);
    for (int64_t i = 0; i < h; ++i) {
      Vec qi = head(q, N, h * dk, i, dk), ki = head(k, N, h * dk, i, dk), vi = head(v, N, h * dv, i, dv);
      for (int64_t m = 0; m < N; ++m)
        if (!allowed[b][i][m]) {
          for (int64_t c = 0; c < dk; ++c) ki[m * dk + c] = 0;
          for (int64_t c = 0; c < dv; ++c) vi[m * dv + c] = 0;
        }
      std::vector<bool> slot(bs, false);  // sorted slot r: some key j*b + r allowed
      for (int64_t j = 0; j < nb; ++j)
        for (int64_t r = 0; r < bs; ++r) slot[r] = slot[r] || allowed[b][i][j * bs + r];
      Vec oi(N * dv, 0.0), att(N * N, 0.0);
      for (int64_t blk = 0; blk < nb; ++blk) {
        // the 2b keys and values of query block blk: its own block, then the sorted block
        Vec kj(2 * bs * dk, 0.0), vj(2 * bs * dv, 0.0);
        std::vector<bool> ok(2 * bs);
        for (int64_t r = 0; r < bs; ++r) {
          for (int64_t c = 0; c < dk; ++c) kj[r * dk + c] = ki[(blk * bs + r) * dk + c];
          for (int64_t c = 0; c < dv; ++c) vj[r * dv + c] = vi[(blk * bs + r) * dv + c];
          for (int64_t j = 0; j < nb; ++j) {
            for (int64_t c = 0; c < dk; ++c) kj[(bs + r) * dk + c] += P[blk * nb + j] * ki[(j * bs + r) * dk + c];
            for (int64_t c = 0; c < dv; ++c) vj[(bs + r) * dv + c] += P[blk * nb + j] * vi[(j * bs + r) * dv + c];
          }
          ok[r] = allowed[b][i][blk * bs + r];
          ok[bs + r] = slot[r];
        }
        Vec qb(qi.begin() + blk * bs * dk, qi.begin() + (blk + 1) * bs * dk);
        Vec p = softmax_rows(scores(qb, kj, bs, 2 * bs, dk, 1.0 / std::sqrt(double(dk))), bs, 2 * bs, ok);
        Vec ob = mm(p, vj, bs, 2 * bs, dv);
        std::copy(ob.begin(), ob.end(), oi.begin() + blk * bs * dv);
        for (int64_t n = 0; n < bs; ++n)
          for (int64_t j = 0; j < nb; ++j)
            for (int64_t r = 0; r < bs; ++r) {
              const int64_t key = j * bs + r;
              double e = (j == blk ? p[n * 2 * bs + r] : 0.0) + P[blk * nb + j] * p[n * 2 * bs + bs + r];
              att[(blk * bs + n) * N + key] = allowed[b][i][key] ? e : 0.0;
            }
      }
      o[b][i] = oi;
      att_all.insert(att_all.end(), att.begin(), att.end());
    }
  }
  return {finish(l, o, N), from_vector(att_all, {B, h, N, N})};
}

}  // namespace

TEST_CASE("sinkhorn matches its dense twin: output and effective attention, key masks, options") {
  Generator g(1);
  Tensor x = randn({2, 6, 8}, g, kFloat64);
  // batch 1 masks every key: its head outputs and attention rows are 0
  Tensor pad = from_vector<bool>({true, false, true, true, false, true, false, false, false, false, false, false},
                                 {2, 1, 1, 6});
  Tensor per_head = from_vector<bool>({true, false, false, true, true, true, false, true, true, false, false, true},
                                      {1, 2, 1, 6});
  for (std::string spec : {"sinkhorn(heads=2, block=2, max_len=8)", "sinkhorn(heads=2, block=3, max_len=6, iters=2)",
                           "sinkhorn(heads=2, block=1, max_len=6, temperature=0.3, key_size=3, value_size=5)",
                           "sinkhorn(heads=2, block=2, max_len=10, iters=0, bias=false)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    auto& l = static_cast<nn::SinkhornAttention&>(*a);
    {
      NoGradGuard ng;  // a sort net large enough to make P far from uniform
      mul_(l.sort_net->weight, 5.0);
      if (l.sort_net->bias.defined()) copy_(l.sort_net->bias, randn(l.sort_net->bias.shape(), g, kFloat64));
    }
    for (const Tensor& mask : {Tensor(), pad, per_head}) {
      auto r = a->forward(x, {}, mask, false, true);
      Twin t = naive_sinkhorn(l, x, mask);
      CHECK(allclose(r.output, t.output, 1e-10, 1e-12));
      CHECK(allclose(r.attention, t.attention, 1e-10, 1e-12));
    }
    auto r = a->forward(x, {}, pad, false, true);
    Tensor bias = l.out_proj->bias.defined() ? l.out_proj->bias : zeros({8}, kFloat64);
    for (int64_t n = 0; n < 6; ++n) CHECK(max_diff(select(select(r.output, 0, 1), 0, n), bias) == 0.0);
    for (double e : narrow(r.attention, 0, 1, 1).to_vector<double>()) CHECK(e == 0.0);
  }
}

TEST_CASE("sinkhorn: no masked input moves an unmasked output, at every block size") {
  // Block summaries average the positions some head allows; a position masked in every head is
  // padding. Here batch 0 pads its last 3 positions (a whole block at b = 2 and 3, part of one at
  // b = 4), batch 1 masks position 1 in head 0 only (not padding) and positions 6, 7 in both.
  Tensor mask = from_vector<bool>({1, 1, 1, 1, 1, 0, 0, 0,   // batch 0, head 0
                                   1, 1, 1, 1, 1, 0, 0, 0,   // batch 0, head 1
                                   1, 0, 1, 1, 1, 1, 0, 0,   // batch 1, head 0
                                   1, 1, 1, 1, 1, 1, 0, 0},  // batch 1, head 1
                                  {2, 2, 1, 8});
  const std::vector<bool> padding = {false, false, false, false, false, true, true, true,
                                     false, false, false, false, false, false, true, true};
  for (std::string spec : {"sinkhorn(heads=2, block=2, max_len=16)", "sinkhorn(heads=2, block=4, max_len=16)",
                           "sinkhorn(heads=2, block=1, max_len=8, iters=2)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    {
      NoGradGuard ng;  // a sharp sort so that a moved summary would show
      mul_(static_cast<nn::SinkhornAttention&>(*a).sort_net->weight, 5.0);
    }
    Generator g(5);
    Tensor x = randn({2, 8, 8}, g, kFloat64);
    std::vector<double> moved = x.to_vector<double>();
    for (int64_t row = 0; row < 16; ++row)
      if (padding[row])
        for (int64_t c = 0; c < 8; ++c) moved[row * 8 + c] += 3.0 + c;
    Tensor y = a->forward(x, {}, mask).output, z = a->forward(from_vector(moved, {2, 8, 8}), {}, mask).output;
    for (int64_t row = 0; row < 16; ++row) {
      if (padding[row]) continue;
      CAPTURE(row);
      CHECK(max_diff(select(select(y, 0, row / 8), 0, row % 8), select(select(z, 0, row / 8), 0, row % 8)) < 1e-13);
    }
    // the sort matrix ignores the padding, and reads position 1 of batch 1 (allowed in head 1)
    auto& l = static_cast<nn::SinkhornAttention&>(*a);
    CHECK(max_diff(l.sort_matrix(x, mask), l.sort_matrix(from_vector(moved, {2, 8, 8}), mask)) < 1e-13);
    std::vector<double> moved1 = x.to_vector<double>();
    for (int64_t c = 0; c < 8; ++c) moved1[(8 + 1) * 8 + c] += 3.0;
    CHECK(max_diff(l.sort_matrix(x, mask), l.sort_matrix(from_vector(moved1, {2, 8, 8}), mask)) > 1e-6);
  }
}

TEST_CASE("sinkhorn with a single block is mha (the sorted block is the block itself)") {
  // nb = 1: P = exp(R - lse - lse) = 1, K~ = K, and a joint softmax over [K; K] puts half of
  // each key's weight on each copy: the same output and effective attention as mha.
  auto a = layer64("sinkhorn(heads=2, block=5, max_len=10)", 8);
  auto m = layer64("mha(heads=2)", 8);
  m->load_state_dict(a->state_dict(), false);
  Generator g(2);
  Tensor x = randn({2, 5, 8}, g, kFloat64);
  Tensor pad = from_vector<bool>({true, false, true, true, true, false, false, true, true, false}, {2, 1, 1, 5});
  auto r = a->forward(x, {}, pad, false, true), e = m->forward(x, {}, pad, false, true);
  CHECK(allclose(r.output, e.output, 1e-12, 1e-12));
  CHECK(allclose(r.attention, e.attention, 1e-12, 1e-12));
}

TEST_CASE("sinkhorn's sort matrix: columns sum to 1, rows too after enough iterations") {
  auto a = layer64("sinkhorn(heads=2, block=2, max_len=16, iters=50)", 8);
  auto& l = static_cast<nn::SinkhornAttention&>(*a);
  Generator g(3);
  Tensor x = randn({2, 12, 8}, g, kFloat64);
  Tensor p = l.sort_matrix(x);  // (2, 6, 6)
  CHECK(p.shape() == Dims{2, 6, 6});
  CHECK(allclose(sum(p, {1}), ones({2, 6}, kFloat64), 1e-12, 1e-12));
  CHECK(allclose(sum(p, {2}), ones({2, 6}, kFloat64), 1e-8, 1e-8));
}

TEST_CASE("sinkhorn gradcheck: plain, padding mask, per-head mask, bias=false, gated") {
  Tensor pad = from_vector<bool>({true, true, false, true, false, false, false, false}, {2, 1, 1, 4});
  Tensor per_head = from_vector<bool>({false, true, true, false, true, true, false, true}, {1, 2, 1, 4});
  for (std::string spec : {"sinkhorn(heads=2, block=2, max_len=4, iters=3)",
                           "sinkhorn(heads=2, block=2, max_len=6, bias=false, key_size=3, temperature=0.5)",
                           "sinkhorn(heads=2, block=1, max_len=4, iters=2, gate=hard_concrete)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    Generator g(4);
    Tensor x = randn({2, 4, 8}, g, kFloat64).requires_grad_();
    std::vector<Tensor> inputs = {x};
    for (auto& p : params(*a)) inputs.push_back(p);
    for (const Tensor& mask : {Tensor(), pad, per_head}) {
      auto r = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, mask).output; }, inputs);
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
}

TEST_CASE("sinkhorn errors: causal, context, N not a multiple of block, N > max_len, non-key masks") {
  CHECK(error_of([] { nn::make_attention("sinkhorn(causal=true)", 8); }).find("sinkhorn: option causal=true") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("sinkhorn(block=3, max_len=10)", 8); }).find("multiple of block=3") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("sinkhorn(temperature=0)", 8); }).find("temperature") != std::string::npos);
  auto a = layer64("sinkhorn(heads=2, block=2, max_len=6)", 8);
  Tensor x = zeros({1, 4, 8}, kFloat64);
  CHECK(error_of([&] { a->forward(x, {}, {}, true); }).find("sinkhorn: causal") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, x); }).find("self-attention only") != std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 5, 8}, kFloat64)); }).find("not a multiple of block=2") != std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 8, 8}, kFloat64)); }).find("exceeds max_len=6") != std::string::npos);
  Tensor per_query = from_vector<bool>(std::vector<bool>(16, true), {1, 1, 4, 4});
  CHECK(error_of([&] { a->forward(x, {}, per_query); }).find("only key masks") != std::string::npos);
}

TEST_CASE("sinkhorn parameter names, shapes and init follow the spec and the LRA code") {
  manual_seed(6);
  auto a = nn::make_attention("sinkhorn(heads=2, block=4, max_len=2048)", 8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj.weight(8,8)", "q_proj.bias(8)", "k_proj.weight(8,8)",
                                          "k_proj.bias(8)", "v_proj.weight(8,8)", "v_proj.bias(8)",
                                          "out_proj.weight(8,8)", "out_proj.bias(8)", "sort_net.weight(512,8)",
                                          "sort_net.bias(512)"});
  // lecun_normal: truncated to +-2 sd, sd = 1/sqrt(D)/0.8796..., so the variance is 1/D
  auto& l = static_cast<nn::SinkhornAttention&>(*a);
  const double sd = 1.0 / std::sqrt(8.0) / 0.87962566103423978;
  double mx = 0, var = 0;
  auto w = l.sort_net->weight.to_vector<double>();
  for (double e : w) mx = std::max(mx, std::abs(e)), var += e * e / double(w.size());
  CHECK(mx <= 2 * sd);
  CHECK(var == doctest::Approx(1.0 / 8.0).epsilon(0.1));
  for (double e : l.sort_net->bias.to_vector<double>()) CHECK(e == 0.0);
  auto nb = nn::make_attention("sinkhorn(heads=2, bias=false)", 8);
  for (auto& [n, p] : nb->named_parameters()) CHECK(n.find("bias") == std::string::npos);
  CHECK(nn::make_attention(a->spec(), 8)->spec() == a->spec());
}

TEST_CASE("docs/attention.md: the sinkhorn example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("sinkhorn(heads=4, block=16, max_len=256)", 32);
  Generator gen(1);
  Tensor x = randn({2, 128, 32}, gen);                     // (B, N, D), N a multiple of block
  Tensor pad = ones({2, 1, 1, 128}, kBool);                // key padding mask (B, 1, 1, N)
  auto r = attn->forward(x, {}, pad, false, /*need_weights=*/true);
  Tensor y = r.output;                                     // (2, 128, 32); 8 blocks of 16 x 32 scores
  Tensor p = r.attention;                                  // (2, 4, 128, 128) over the original keys
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 128, 32});
  CHECK(p.shape() == Dims{2, 4, 128, 128});
}

TEST_CASE("sinkhorn: attn_dropout drops probabilities in train mode only") {
  auto a = layer64("sinkhorn(heads=2, block=2, max_len=8, attn_dropout=0.5)", 8);
  auto plain = layer64("sinkhorn(heads=2, block=2, max_len=8)", 8);
  Generator g(9);
  Tensor x = randn({2, 8, 8}, g, kFloat64);
  CHECK(allclose(a->forward(x).output, plain->forward(x).output, 1e-12, 1e-12));  // eval: no dropout
  a->train();
  Tensor y = a->forward(x).output;
  CHECK_FALSE(allclose(y, plain->forward(x).output, 1e-6, 1e-6));
  for (double e : y.to_vector<double>()) CHECK(std::isfinite(e));
}
