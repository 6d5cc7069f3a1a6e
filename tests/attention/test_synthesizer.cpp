// synthesizer (docs/attention.md, "synthesizer"): every part and mixtures against a naive loop over
// the module's own tensors, float64 gradients, the mixture weights, the spec's errors, a short
// training run in which fixed_random stays fixed, pruning, parameter names, the doc example.
#include "helpers.hpp"
#include "nn/attention/registry.hpp"
#include "nn/attention/synthesizer.hpp"
#include "optim/adam.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::make_attention;

namespace {

const std::vector<std::string> kParts = {"dense",           "random",           "fixed_random",
                                         "factorized_dense", "factorized_random", "vanilla"};

std::shared_ptr<nn::Attention> synth64(const std::string& spec, int64_t d_model = 8) {
  manual_seed(11);
  auto a = make_attention(spec, d_model);
  a->to(kFloat64);
  return a;
}

nn::Synthesizer& as_synth(const std::shared_ptr<nn::Attention>& a) { return static_cast<nn::Synthesizer&>(*a); }

// Dense reference written with plain loops over the module's state dict: each part's logits,
// the softmax(mix_logits) mixture, the masked softmax, P V and out_proj (no gates, eval mode).
// `allowed` is (B, N, N); the attention probabilities (B, h, N, N) go to *probs.
Tensor naive_synth(const nn::Synthesizer& m, const Tensor& x, const std::vector<bool>& allowed,
                   std::vector<double>* probs = nullptr) {
  const auto& c = m.config;
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2), h = c.head.heads, dh = c.hidden;
  const int64_t dv = c.head.value_size, dk = c.head.key_size, L = c.max_len, K = c.factor;
  const TensorMap sd = m.state_dict();
  auto get = [&](const std::string& name) { return sd.at(name).to_vector<double>(); };
  const std::vector<double> xv = x.to_vector<double>();
  // rows (B*N) of in (width `in`) through the Linear at `name` -> (B*N, out)
  auto lin = [&](const std::string& name, const std::vector<double>& in, int64_t in_w, int64_t out_w) {
    auto w = get(name + ".weight");
    std::vector<double> b = sd.count(name + ".bias") ? get(name + ".bias") : std::vector<double>(out_w, 0.0);
    std::vector<double> y(in.size() / in_w * out_w);
    for (size_t t = 0; t < in.size() / in_w; ++t)
      for (int64_t o = 0; o < out_w; ++o) {
        double acc = b[o];
        for (int64_t i = 0; i < in_w; ++i) acc += in[t * in_w + i] * w[o * in_w + i];
        y[t * out_w + o] = acc;
      }
    return y;
  };
  auto relu_all = [](std::vector<double> v) {
    for (double& e : v) e = std::max(e, 0.0);
    return v;
  };
  auto headwise = [&](const std::string& name, const std::vector<double>& hid, int64_t b, int64_t i, int64_t n,
                      int64_t j, int64_t out_w) {  // sum_d H[b,n,i,d] w[i,j,d] + bias[i,j]
    auto w = get(name + ".weight");
    double acc = sd.count(name + ".bias") ? get(name + ".bias")[i * out_w + j] : 0.0;
    for (int64_t d = 0; d < dh; ++d) acc += hid[(b * N + n) * h * dh + i * dh + d] * w[(i * out_w + j) * dh + d];
    return acc;
  };
  // mixture weights
  std::vector<double> wmix(c.parts.size(), 1.0);
  if (c.parts.size() > 1) {
    auto ml = get("mix_logits");
    double z = 0;
    for (double v : ml) z += std::exp(v);
    for (size_t p = 0; p < ml.size(); ++p) wmix[p] = std::exp(ml[p]) / z;
  }
  std::vector<double> S(B * h * N * N, 0.0);
  auto at = [&](int64_t b, int64_t i, int64_t n, int64_t j) -> double& { return S[((b * h + i) * N + n) * N + j]; };
  for (size_t p = 0; p < c.parts.size(); ++p) {
    const std::string& part = c.parts[p];
    std::vector<double> hid, q, k, t1, t2;
    if (part == "dense" || part == "factorized_dense") hid = relu_all(lin(part + ".w1", xv, D, h * dh));
    if (part == "vanilla") q = lin("vanilla.q_proj", xv, D, h * dk), k = lin("vanilla.k_proj", xv, D, h * dk);
    if (part == "random" || part == "fixed_random") t1 = get(part + ".logits");
    if (part == "factorized_random") t1 = get("factorized_random.r1"), t2 = get("factorized_random.r2");
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            if (part == "dense") {
              s = headwise("dense.w2", hid, b, i, n, j, L);
            } else if (part == "random" || part == "fixed_random") {
              s = t1[(i * L + n) * L + j];
            } else if (part == "factorized_random") {
              for (int64_t r = 0; r < K; ++r) s += t1[(i * L + n) * K + r] * t2[(i * L + j) * K + r];
            } else if (part == "factorized_dense") {
              s = headwise("factorized_dense.wa", hid, b, i, n, j % c.a, c.a) *
                  headwise("factorized_dense.wb", hid, b, i, n, j / c.a, c.b);
            } else {  // vanilla
              for (int64_t d = 0; d < dk; ++d)
                s += q[(b * N + n) * h * dk + i * dk + d] * k[(b * N + j) * h * dk + i * dk + d];
              s /= std::sqrt(double(dk));
            }
            at(b, i, n, j) += wmix[p] * s;
          }
  }
  auto v = lin("v_proj", xv, D, h * dv);
  std::vector<double> o(B * N * h * dv, 0.0), P(B * h * N * N, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t n = 0; n < N; ++n) {
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < N; ++j)
          if (allowed[(b * N + n) * N + j]) mx = std::max(mx, at(b, i, n, j));
        for (int64_t j = 0; j < N; ++j)
          if (allowed[(b * N + n) * N + j]) z += std::exp(at(b, i, n, j) - mx);
        for (int64_t j = 0; j < N; ++j) {
          double pr = allowed[(b * N + n) * N + j] ? std::exp(at(b, i, n, j) - mx) / z : 0.0;
          P[((b * h + i) * N + n) * N + j] = pr;
          for (int64_t d = 0; d < dv; ++d) o[(b * N + n) * h * dv + i * dv + d] += pr * v[(b * N + j) * h * dv + i * dv + d];
        }
      }
  if (probs) *probs = P;
  return from_vector(lin("out_proj", o, h * dv, D), {B, N, D});
}

std::vector<bool> all_allowed(int64_t B, int64_t N) { return std::vector<bool>(B * N * N, true); }

// causal plus a key padding mask that blocks everything in example 1 (fully masked rows)
std::vector<bool> causal_padded(int64_t B, int64_t N, const std::vector<bool>& key_ok) {
  std::vector<bool> a(B * N * N);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < N; ++j) a[(b * N + n) * N + j] = j <= n && key_ok[b * N + j];
  return a;
}

}  // namespace

TEST_CASE("each synthesizer part alone matches a naive loop, also causal with padding and fully masked rows") {
  const int64_t B = 2, N = 5;
  std::vector<bool> key_ok = {true, false, true, true, false, false, false, false, false, false};
  Tensor pad = from_vector<bool>(key_ok, {B, 1, 1, N});
  for (const std::string& part : kParts) {
    CAPTURE(part);
    auto a = synth64("synthesizer(parts=" + part + ", heads=2, max_len=6, factor=3, a=3, key_size=3, value_size=5)");
    auto& m = as_synth(a);
    a->eval();
    Generator g(1);
    Tensor x = randn({B, N, 8}, g, kFloat64);
    std::vector<double> probs;
    auto r = a->forward(x, {}, {}, false, true);
    CHECK(allclose(r.output, naive_synth(m, x, all_allowed(B, N), &probs), 1e-10, 1e-12));
    CHECK(allclose(r.attention, from_vector(probs, {B, 2, N, N}), 1e-10, 1e-12));
    auto rc = a->forward(x, {}, pad, true, true);
    CHECK(allclose(rc.output, naive_synth(m, x, causal_padded(B, N, key_ok), &probs), 1e-10, 1e-12));
    CHECK(allclose(rc.attention, from_vector(probs, {B, 2, N, N}), 1e-10, 1e-12));
    for (double p : narrow(rc.attention, 0, 1, 1).to_vector<double>()) CHECK(p == 0.0);
  }
}

TEST_CASE("a mixture of all six parts matches a naive loop, mixture weights and attention rows sum to 1") {
  auto a = synth64("synthesizer(parts=vanilla+dense+random+fixed_random+factorized_dense+factorized_random, heads=2, "
                   "max_len=7, factor=2, a=2, b=4, hidden=3)");
  auto& m = as_synth(a);
  a->eval();
  Generator g(2);
  {
    NoGradGuard ng;
    copy_(m.mix_logits, randn({6}, g, kFloat64));
  }
  REQUIRE(m.mix_logits.shape() == Dims{6});
  // w = softmax(mix_logits), sums to 1
  auto ml = m.mix_logits.to_vector<double>();
  auto w = m.mixture_weights().to_vector<double>();
  double z = 0, total = 0;
  for (double v : ml) z += std::exp(v);
  for (size_t p = 0; p < 6; ++p) {
    CHECK(w[p] == doctest::Approx(std::exp(ml[p]) / z).epsilon(1e-12));
    total += w[p];
  }
  CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
  // and at init (zeros) every part weighs 1/P
  auto fresh = synth64("synthesizer(parts=random+vanilla, max_len=7, heads=2)");
  for (double v : as_synth(fresh).mixture_weights().to_vector<double>()) CHECK(v == doctest::Approx(0.5));

  const int64_t B = 2, N = 6;
  Tensor x = randn({B, N, 8}, g, kFloat64);
  std::vector<double> probs;
  auto r = a->forward(x, {}, {}, false, true);
  CHECK(allclose(r.output, naive_synth(m, x, all_allowed(B, N), &probs), 1e-10, 1e-12));
  CHECK(allclose(r.attention, from_vector(probs, {B, 2, N, N}), 1e-10, 1e-12));
  // every row of the returned attention sums to 1; a fully masked row is all zeros, no NaN
  std::vector<bool> allowed(B * N * N, true);
  std::vector<bool> mask_v(B * N * N, true);
  for (int64_t j = 0; j < N; ++j) mask_v[(0 * N + 2) * N + j] = allowed[(0 * N + 2) * N + j] = false;
  Tensor mask = from_vector<bool>(mask_v, {B, 1, N, N});
  auto rm = a->forward(x, {}, mask, false, true);
  CHECK(allclose(rm.output, naive_synth(m, x, allowed), 1e-10, 1e-12));
  auto p = rm.attention.to_vector<double>();
  for (int64_t row = 0; row < B * 2 * N; ++row) {
    double s = 0;
    for (int64_t j = 0; j < N; ++j) s += p[row * N + j];
    const int64_t b = row / (2 * N), n = row % N;
    CHECK(s == doctest::Approx(b == 0 && n == 2 ? 0.0 : 1.0).epsilon(1e-12));
  }
  for (double v : rm.output.to_vector<double>()) CHECK(std::isfinite(v));
}

TEST_CASE("synthesizer gradcheck: every part, mixtures, causal, a fully masked row, gates") {
  const std::vector<std::string> specs = {
      "parts=dense",
      "parts=random",
      "parts=fixed_random",
      "parts=factorized_dense",
      "parts=factorized_random",
      "parts=vanilla",
      "parts=random+vanilla",
      "parts=dense+vanilla, causal=true",
      "parts=random+dense, gate=hard_concrete",
      "parts=factorized_random+factorized_dense+fixed_random, causal=true, gate=hard_concrete, bias=false",
  };
  for (const std::string& opts : specs) {
    const std::string spec = "synthesizer(" + opts + ", heads=2, max_len=5, factor=2, a=3)";
    CAPTURE(spec);
    auto a = synth64(spec);
    a->eval();
    auto& m = as_synth(a);
    Generator g(3);
    if (m.mix_logits.defined()) {
      NoGradGuard ng;
      copy_(m.mix_logits, randn(m.mix_logits.shape(), g, kFloat64));
    }
    if (m.gate) {
      NoGradGuard ng;
      copy_(m.gate->log_alpha, randn({2}, g, kFloat64, 0, 0.5));  // gates strictly inside (0, 1)
    }
    std::vector<Tensor> inputs = {randn({2, 4, 8}, g, kFloat64).requires_grad_()};
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    // batch 0, query row 1 has no allowed key
    std::vector<bool> mv(2 * 4 * 4, true);
    for (int j = 0; j < 4; ++j) mv[1 * 4 + j] = false;
    mv[(1 * 4 + 3) * 4 + 0] = false;
    Tensor mask = from_vector<bool>(mv, {2, 1, 4, 4});
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, mask).output; }, inputs);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("synthesizer errors: N > max_len, a context, a*b < max_len, repeated or unknown parts") {
  auto a = make_attention("synthesizer(parts=random, heads=2, max_len=4)", 8);
  auto too_long = error_of([&] { a->forward(zeros({1, 5, 8})); });
  CHECK(too_long.find("N=5 exceeds max_len=4") != std::string::npos);
  CHECK_NOTHROW(a->forward(zeros({1, 4, 8})));
  CHECK(error_of([&] { a->forward(zeros({1, 3, 8}), zeros({1, 3, 8})); }).find("synthesizer: self-attention only") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 3, 8}), zeros({1, 3, 8}), {}, true); }).find("self-attention only") !=
        std::string::npos);
  auto ab = error_of([] { make_attention("synthesizer(parts=factorized_dense, max_len=16, a=3, b=5)", 8); });
  CHECK(ab.find("a*b >= max_len") != std::string::npos);
  CHECK(ab.find("a=3, b=5 (a*b=15) with max_len=16") != std::string::npos);
  CHECK_NOTHROW(make_attention("synthesizer(parts=factorized_dense, max_len=15, a=3, b=5)", 8));
  auto twice = error_of([] { make_attention("synthesizer(parts=dense+random+dense)", 8); });
  CHECK(twice.find("synthesizer: option parts") != std::string::npos);
  CHECK(twice.find("\"dense\" is named twice") != std::string::npos);
  auto unknown = error_of([] { make_attention("synthesizer(parts=dense+sparse)", 8); });
  CHECK(unknown.find("\"sparse\" is not one of dense, random, fixed_random") != std::string::npos);
  // the same checks guard a config built in code
  nn::SynthesizerConfig c;
  c.head.heads = 2, c.head.value_size = 4, c.hidden = 4, c.max_len = 8;
  c.parts = {"random", "random"};
  CHECK(error_of([&] { nn::Synthesizer(8, c); }).find("part random is named twice") != std::string::npos);
  c.parts = {"factorized_dense"}, c.a = 2, c.b = 3;
  CHECK(error_of([&] { nn::Synthesizer(8, c); }).find("a*b >= max_len") != std::string::npos);
  // sizes that default to D/h
  CHECK(error_of([] { make_attention("synthesizer(heads=3, value_size=4)", 8); }).find("give hidden explicitly") !=
        std::string::npos);
  // key_size is the vanilla part's only: without vanilla it is not asked for
  CHECK_NOTHROW(make_attention("synthesizer(heads=3, value_size=4, hidden=4)", 8));
  CHECK(error_of([] { make_attention("synthesizer(parts=vanilla, heads=3, value_size=4)", 8); })
            .find("give key_size explicitly") != std::string::npos);
  CHECK(error_of([] { make_attention("synthesizer(max_len=0)", 8); }).find("option max_len=0: must be positive") !=
        std::string::npos);
}

TEST_CASE("20 AdamW steps train random.logits and leave fixed_random.logits bitwise unchanged") {
  manual_seed(5);
  auto a = make_attention("synthesizer(parts=random+fixed_random, heads=2, max_len=6)", 8);
  auto& m = as_synth(a);
  Tensor fixed = m.get_buffer("fixed_random.logits");
  Tensor trained = m.get_parameter("random.logits");
  CHECK_FALSE(fixed.requires_grad());
  for (auto& [n, p] : a->named_parameters()) CHECK(n != "fixed_random.logits");
  const Tensor fixed0 = clone(fixed), trained0 = clone(trained);
  Generator g(6);
  Tensor x = randn({4, 6, 8}, g), target = randn({4, 6, 8}, g);
  optim::AdamW opt(a->parameters(), {.lr = 0.05});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss = mean(square(a->forward(x).output - target));
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < first);
  CHECK(fixed.to_vector<float>() == fixed0.to_vector<float>());  // bitwise
  CHECK(trained.to_vector<float>() != trained0.to_vector<float>());
  CHECK_FALSE(allclose(trained, trained0, 0, 1e-3));
}

TEST_CASE("a pruned synthesizer equals the masked one and pins its sizes") {
  auto a = synth64(
      "synthesizer(parts=dense+random+fixed_random+factorized_dense+factorized_random+vanilla, heads=4, max_len=6, "
      "factor=2, gate=hard_concrete)");
  auto& m = as_synth(a);
  a->eval();
  Generator g(8);
  {
    NoGradGuard ng;
    copy_(m.gate->log_alpha, randn({4}, g, kFloat64));
    copy_(m.mix_logits, randn({6}, g, kFloat64));
    copy_(m.head_mask, from_vector<double>({1, 0, 1, 1}));
  }
  Tensor x = randn({2, 5, 8}, g, kFloat64);
  Tensor mask = from_vector<bool>({true, true, false, true, true, true, true, true, true, false}, {2, 1, 1, 5});
  Tensor masked = a->forward(x, {}, mask).output;
  auto p = a->prune_heads({3, 0, 2});
  auto& pm = as_synth(p);
  CHECK(pm.config.head.heads == 3);
  // hidden, value_size and key_size defaulted to D/h = 2 and stay 2 with 3 heads
  CHECK(pm.config.hidden == 2);
  CHECK(pm.config.head.value_size == 2);
  CHECK(pm.config.head.key_size == 2);
  CHECK(pm.get_parameter("dense.w1.weight").shape() == Dims{6, 8});
  CHECK(pm.get_parameter("dense.w2.weight").shape() == Dims{3, 6, 2});
  CHECK(pm.get_buffer("fixed_random.logits").shape() == Dims{3, 6, 6});
  CHECK(allclose(p->forward(x, {}, mask).output, masked, 1e-10, 1e-12));
  // the pinned spec rebuilds the same layer
  auto rebuilt = make_attention(p->spec(), 8);
  rebuilt->to(kFloat64);
  rebuilt->load_state_dict(p->state_dict());
  rebuilt->eval();
  CHECK(allclose(rebuilt->forward(x, {}, mask).output, masked, 1e-10, 1e-12));
  CHECK(error_of([&] { a->prune_heads({0, 4}); }).find("out of range") != std::string::npos);
  CHECK(error_of([&] { a->prune_heads({1, 1}); }).find("twice") != std::string::npos);

  // distinct widths per tensor (hidden 3, key 1, value 5), so each block size is exercised
  auto d = synth64(
      "synthesizer(parts=vanilla+factorized_dense+dense, heads=3, max_len=6, hidden=3, key_size=1, value_size=5, "
      "causal=true)");
  auto& dm = as_synth(d);
  {
    NoGradGuard ng;
    copy_(dm.mix_logits, randn({3}, g, kFloat64));
    copy_(dm.head_mask, from_vector<double>({0, 1, 1}));
  }
  Tensor dmasked = d->forward(x).output;
  auto dp = d->prune_heads({2, 1});
  CHECK(dp->state_dict().at("vanilla.q_proj.weight").shape() == Dims{2, 8});
  CHECK(dp->state_dict().at("factorized_dense.w1.weight").shape() == Dims{6, 8});
  CHECK(dp->state_dict().at("out_proj.weight").shape() == Dims{8, 10});
  CHECK(allclose(dp->forward(x).output, dmasked, 1e-10, 1e-12));
}

TEST_CASE("synthesizer parameter names and shapes follow the spec") {
  auto a = make_attention(
      "synthesizer(parts=dense+random+fixed_random+factorized_random+factorized_dense+vanilla, heads=2, max_len=10, "
      "hidden=3, factor=4, a=3, key_size=5, value_size=6, gate=hard_concrete)",
      8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  // a module lists its own tensors before its children's
  CHECK(names == std::vector<std::string>{
                     "mix_logits(6)", "dense.w1.weight(6,8)", "dense.w1.bias(6)", "dense.w2.weight(2,10,3)", "dense.w2.bias(2,10)",
                     "random.logits(2,10,10)", "factorized_random.r1(2,10,4)", "factorized_random.r2(2,10,4)",
                     "factorized_dense.w1.weight(6,8)", "factorized_dense.w1.bias(6)",
                     "factorized_dense.wa.weight(2,3,3)", "factorized_dense.wa.bias(2,3)",
                     "factorized_dense.wb.weight(2,4,3)", "factorized_dense.wb.bias(2,4)",
                     "vanilla.q_proj.weight(10,8)", "vanilla.q_proj.bias(10)", "vanilla.k_proj.weight(10,8)",
                     "vanilla.k_proj.bias(10)", "v_proj.weight(12,8)", "v_proj.bias(12)",
                     "out_proj.weight(8,12)", "out_proj.bias(8)", "gate.log_alpha(2)"});
  std::vector<std::string> bufs;
  for (auto& [n, b] : a->named_buffers()) bufs.push_back(n + to_string(b.shape()));
  CHECK(bufs == std::vector<std::string>{"head_mask(2)", "fixed_random.logits(2,10,10)"});
  auto& m = as_synth(a);
  for (double v : m.mix_logits.to_vector<float>()) CHECK(v == 0.0);
  // bias=false removes every bias tensor; one part has no mix_logits
  auto nb = make_attention("synthesizer(parts=dense, bias=false)", 8);
  for (auto& [n, p] : nb->named_parameters()) {
    CHECK(n.find("bias") == std::string::npos);
    CHECK(n != "mix_logits");
  }
  // factorized_dense defaults: a = smallest a >= sqrt(L), b = ceil(L / a)
  auto sz = [](const std::string& spec) {
    auto layer = make_attention(spec, 8);  // held: as_synth returns a reference into it
    auto& s = as_synth(layer);
    return std::pair{s.config.a, s.config.b};
  };
  CHECK(sz("synthesizer(parts=factorized_dense)") == std::pair<int64_t, int64_t>{23, 23});
  CHECK(sz("synthesizer(parts=factorized_dense, max_len=64)") == std::pair<int64_t, int64_t>{8, 8});
  CHECK(sz("synthesizer(parts=factorized_dense, max_len=65)") == std::pair<int64_t, int64_t>{9, 8});
  CHECK(sz("synthesizer(parts=factorized_dense, a=16)") == std::pair<int64_t, int64_t>{16, 32});
  CHECK(sz("synthesizer(parts=factorized_dense, b=10)") == std::pair<int64_t, int64_t>{52, 10});
  // random and fixed_random tables are drawn from N(0, 1)
  manual_seed(3);
  auto big = make_attention("synthesizer(parts=random+fixed_random, heads=2, max_len=64)", 8);
  for (const char* name : {"random.logits", "fixed_random.logits"}) {
    Tensor t = big->state_dict().at(name);
    CHECK(mean(t).item() == doctest::Approx(0.0).epsilon(0.03));
    CHECK(mean(square(t)).item() == doctest::Approx(1.0).epsilon(0.05));
  }
}

TEST_CASE("synthesizer doc example") {
  manual_seed(0);
  auto attn = nn::make_attention("synthesizer(parts=random+vanilla, heads=4, max_len=16)", 32);
  Generator gen(1);
  Tensor x = randn({2, 10, 32}, gen);  // (B, N, D), N <= max_len
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);
  Tensor y = r.output;     // (2, 10, 32)
  Tensor p = r.attention;  // (2, 4, 10, 10)
  auto& synth = static_cast<nn::Synthesizer&>(*attn);
  Tensor w = synth.mixture_weights();  // softmax(mix_logits): (0.5, 0.5) at init
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 10, 32});
  CHECK(p.shape() == Dims{2, 4, 10, 10});
  CHECK(w.to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  CHECK(synth.mix_logits.grad().defined());
}
