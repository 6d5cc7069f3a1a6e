// Layers: every one gradchecked in float64 (with respect to a non-contiguous input and to all
// its parameters); Linear, LayerNorm and GELU pinned to PyTorch's numbers; Dropout's
// statistics and seeding; positional encodings; RoPE's norm preservation and relative-position
// property.
#include "nn_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// Values copied into a parameter without recording history.
void set(const Tensor& p, const Tensor& v) {
  NoGradGuard g;
  Tensor q = p;
  copy_(q, v);
}

}  // namespace

// ============================ against PyTorch ============================

// /usr/bin/python3, torch 1.13, float64:
//   x = seq(24, 0.7).reshape(2, 3, 4).requires_grad_()
//   w = (1 + 0.5 * seq(4, 1.3)).requires_grad_(); b = (0.1 * seq(4, 0.4)).requires_grad_()
//   u = seq(24, 0.3, 1.0).reshape(2, 3, 4)
//   y = torch.nn.functional.layer_norm(x, (4,), w, b, 1e-5); (y * u).sum().backward()
TEST_CASE("LayerNorm matches PyTorch (values and gradients)") {
  nn::LayerNorm ln(4);
  ln.to(kFloat64);
  set(ln.weight, seq(4, 1.3) * 0.5 + 1.0);
  set(ln.bias, seq(4, 0.4) * 0.1);
  Tensor x = reshape(seq(24, 0.7), {2, 3, 4}).requires_grad_();
  Tensor y = ln(x);
  sum(y * reshape(seq(24, 0.3, 1.0), {2, 3, 4})).backward();
  CHECK(allclose(y, expected({-1.63996627, 0.1863827249, 1.588030882, 0.3835899319, 1.539980209, 0.5175398556,
                              -1.031878141, -0.1221843184, -1.432050397, -0.6840131873, 1.118354194, 0.5538429291,
                              1.323580543, 1.082107465, -0.6572116891, -0.2215826618, -1.198352402, -1.15089478,
                              0.7615080076, 0.6286352229, 1.022625449, 1.558205718, -0.2395277885, -0.2893747916},
                             {2, 3, 4}),
                 1e-8, 1e-9));
  CHECK(allclose(x.grad(),
                 expected({-0.3917972941, 1.976604507, 0.7744004591, -2.359207672, -0.4638462331, 0.9353688674,
                           0.1826910035, -0.6542136378, 0.5115801689, -0.6245792695, -0.6696657789, 0.7826648795,
                           0.8480193266, -0.9729887706, -0.5929458875, 0.7179153316, -0.04078189241, -0.1054165015,
                           0.3191747125, -0.1729763187, -1.199787503, 0.8144068925, 0.9442472, -0.5588665898},
                          {2, 3, 4}),
                 1e-8, 1e-9));
  CHECK(allclose(ln.weight.grad(), expected({0.2888208809, 1.291026445, 0.9516430809, -1.096991909}, {4}), 1e-8, 1e-9));
  CHECK(allclose(ln.bias.grad(), expected({1.186239405, 1.436031385, 1.557546958, 1.539931501}, {4}), 1e-8, 1e-9));
}

//   x = seq(6, 0.9).reshape(2, 3).requires_grad_()
//   w = seq(12, 0.5, 0.2).reshape(4, 3).requires_grad_(); b = seq(4, 1.1).requires_grad_()
//   u = seq(8, 0.6, 0.5).reshape(2, 4)
//   y = torch.nn.functional.linear(x, w, b); (y * u).sum().backward()
TEST_CASE("Linear matches PyTorch (values and gradients)") {
  nn::Linear lin(3, 4);
  lin.to(kFloat64);
  set(lin.weight, reshape(seq(12, 0.5, 0.2), {4, 3}));
  set(lin.bias, seq(4, 1.1));
  Tensor x = reshape(seq(6, 0.9), {2, 3}).requires_grad_();
  Tensor y = lin(x);
  sum(y * reshape(seq(8, 0.6, 0.5), {2, 4})).backward();
  CHECK(allclose(y,
                 expected({5.649188423, 5.980494213, -3.438274824, -5.228761853, -4.445073996, 0.3754735053,
                           5.863020635, 1.69215408},
                          {2, 4}),
                 1e-8, 1e-9));
  CHECK(allclose(x.grad(), expected({0.7019622396, -0.6192969616, -1.788930668, 2.98913947, 4.749845262, 5.347623276}, {2, 3}),
                 1e-8, 1e-9));
  CHECK(allclose(lin.weight.grad(),
                 expected({0.4090013987, 1.078696825, 0.9320560001, -0.5996707754, 3.413341826, 4.843205384,
                           -1.398860695, 4.555608325, 7.062483788, -1.709388328, 4.10646977, 6.814633415},
                          {4, 3}),
                 1e-8, 1e-9));
  CHECK(allclose(lin.bias.grad(), expected({1.437349736, 1.080848265, 0.3467753988, -0.5084360908}, {4}), 1e-8, 1e-9));
}

//   x = (seq(7, 0.8) * 1.5).requires_grad_()
//   y = torch.nn.functional.gelu(x, approximate=approx); y.sum().backward()
TEST_CASE("GELU (exact and tanh) matches PyTorch (values and derivatives)") {
  struct Case {
    const char* approx;
    std::vector<double> y, g;
  };
  const Case cases[] = {
      {"none",
       {0, 2.118289433, 2.994655809, 1.983100915, -0.07538875568, -0.0263172816, -0.004189213328},
       {0.5, 1.069040574, 1.011985386, 1.082383509, 0.3616910894, -0.05722213674, -0.01230702783}},
      {"tanh",
       {0, 2.118517224, 2.995068573, 1.983221784, -0.07538905867, -0.02599900725, -0.003772802168},
       {0.5, 1.069859419, 1.011624861, 1.083251789, 0.3616979362, -0.05792211915, -0.01195432839}},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.approx));
    nn::GELU gelu(c.approx);
    Tensor x = (seq(7, 0.8) * 1.5).requires_grad_();
    Tensor y = gelu(x);
    sum(y).backward();
    CHECK(allclose(y, expected(c.y, {7}), 1e-8, 1e-9));
    CHECK(allclose(x.grad(), expected(c.g, {7}), 1e-8, 1e-9));
  }
  CHECK_THROWS_AS(nn::GELU("fast"), ValueError);
}

// ============================ gradient checks (float64, non-contiguous inputs) ============================

TEST_CASE("gradcheck: Linear, with and without bias, any leading dims") {
  for (bool bias : {true, false}) {
    nn::Linear lin(4, 3, bias);
    lin.to(kFloat64);
    Tensor x = nc_randn({2, 3, 4}, 1);
    check_module_grad("Linear", lin, x, [&](const Tensor& in) { return lin(in); });
    CHECK(lin(x).shape() == Dims{2, 3, 3});
    Tensor v = nc_randn({4}, 2);  // a single vector
    check_module_grad("Linear 1-d", lin, v, [&](const Tensor& in) { return lin(in); });
  }
  nn::Linear lin(4, 3);
  CHECK_THROWS_AS(lin(zeros({2, 5})), ShapeError);
  CHECK_THROWS_AS(nn::Linear(0, 3), ValueError);
}

TEST_CASE("Linear default init is U(-1/sqrt(in), 1/sqrt(in)) for weight and bias") {
  manual_seed(0);
  nn::Linear lin(400, 300);
  const double bound = 1 / std::sqrt(400.0);
  for (const Tensor& p : {lin.weight, lin.bias}) {
    CHECK(max(abs(p)).item() <= bound);
    CHECK(max(abs(p)).item() > 0.97 * bound);
  }
  double sd = std::sqrt(var(lin.weight, {}, 0).item());
  CHECK(sd == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));
}

TEST_CASE("gradcheck: Embedding (weight), and index checks") {
  nn::Embedding emb(6, 3);
  emb.to(kFloat64);
  Tensor ids = from_vector<int64_t>({0, 5, 2, 2, 1, 0}, Dims{2, 3});  // repeated ids accumulate
  check_grad("Embedding", [&](const std::vector<Tensor>&) { return emb(ids); }, {emb.weight});
  CHECK(emb(ids).shape() == Dims{2, 3, 3});
  CHECK(allclose(select(select(emb(ids), 0, 1), 0, 0), select(emb.weight, 0, 2), 0, 0));
  std::string msg = error_of([&] { emb(from_vector<int64_t>({1, 6}, Dims{2})); });
  CHECK(msg.find("index 6") != std::string::npos);
  CHECK_THROWS_AS(emb(from_vector<int64_t>({-1}, Dims{1})), IndexError);
  CHECK_THROWS_AS(emb(zeros({2})), DTypeError);

  manual_seed(0);
  nn::Embedding big(1000, 100);  // N(0, 1) like torch.nn.Embedding
  CHECK(std::abs(mean(big.weight).item()) < 0.01);
  CHECK(std::sqrt(var(big.weight, {}).item()) == doctest::Approx(1).epsilon(0.01));
}

TEST_CASE("gradcheck: LayerNorm (affine, no bias, no affine) and RMSNorm") {
  Tensor x = nc_randn({2, 3, 5}, 3);
  {
    nn::LayerNorm ln(5);
    ln.to(kFloat64);
    set(ln.weight, seq(5, 0.3) + 1.0);  // not all ones, so the weight gradient matters
    set(ln.bias, seq(5, 0.9));
    check_module_grad("LayerNorm", ln, x, [&](const Tensor& in) { return ln(in); });
    // Normalised rows: mean 0, biased variance 1 (before the affine part, checked via no-affine below).
  }
  {
    nn::LayerNorm ln(5, 1e-5, true, /*bias=*/false);
    ln.to(kFloat64);
    CHECK(ln.named_parameters().size() == 1);
    check_module_grad("LayerNorm no bias", ln, x, [&](const Tensor& in) { return ln(in); });
  }
  {
    nn::LayerNorm ln(5, 1e-5, /*elementwise_affine=*/false);
    CHECK(ln.named_parameters().empty());
    check_grad("LayerNorm no affine", [&](const std::vector<Tensor>& in) { return ln(in[0]); }, {x});
    Tensor y = ln(x);
    CHECK(allclose(mean(y, {-1}), zeros({2, 3}, kFloat64), 0, 1e-12));
    CHECK(allclose(var(y, {-1}, 0), ones({2, 3}, kFloat64), 1e-4, 0));
  }
  {
    nn::RMSNorm rms(5);
    rms.to(kFloat64);
    set(rms.weight, seq(5, 0.7) + 1.0);
    check_module_grad("RMSNorm", rms, x, [&](const Tensor& in) { return rms(in); });
    nn::RMSNorm plain(5, 0.0);
    plain.to(kFloat64);
    Tensor y = plain(x);  // unit root-mean-square rows
    CHECK(allclose(mean(square(y), {-1}), ones({2, 3}, kFloat64), 1e-12, 0));
  }
  CHECK_THROWS_AS(nn::LayerNorm(4)(zeros({2, 5})), ShapeError);
  CHECK_THROWS_AS(nn::RMSNorm(4)(zeros({2, 5})), ShapeError);
}

TEST_CASE("gradcheck: activations") {
  Tensor x = nc_away({3, 4}, 4, {0.0});
  nn::ReLU relu;
  nn::GELU gelu, gelu_tanh("tanh");
  nn::Tanh tanh_;
  nn::Sigmoid sigmoid_;
  nn::ELU elu(0.7);
  std::vector<std::pair<const char*, nn::UnaryModule*>> acts = {
      {"ReLU", &relu}, {"GELU", &gelu}, {"GELU tanh", &gelu_tanh}, {"Tanh", &tanh_}, {"Sigmoid", &sigmoid_}, {"ELU", &elu}};
  for (auto& [name, m] : acts) {
    check_grad(name, [&](const std::vector<Tensor>& in) { return (*m)(in[0]); }, {x});
    CHECK(m->named_parameters().empty());
  }
  Tensor v = from_vector<double>({-1, 2}, Dims{2});
  CHECK(allclose(elu(v), from_vector<double>({0.7 * (std::exp(-1.0) - 1), 2}, Dims{2})));
  CHECK(allclose(relu(v), from_vector<double>({0, 2}, Dims{2})));
}

TEST_CASE("gradcheck: FeedForward with each activation, dropout inside follows train/eval") {
  Tensor x = nc_randn({2, 3, 4}, 5);
  for (const char* act : {"gelu", "relu", "gelu_tanh"}) {
    nn::FeedForward ff(4, 6, act);
    ff.to(kFloat64);
    check_module_grad(act, ff, x, [&](const Tensor& in) { return ff(in); });
    CHECK(ff(x).shape() == Dims{2, 3, 4});
  }
  nn::FeedForward ff(4, 6, "gelu", 0.5, /*bias=*/false);
  CHECK(ff.named_parameters().size() == 2);
  ff.to(kFloat64);
  // In training the hidden dropout mask is fixed by reseeding before every call.
  check_module_grad("FeedForward dropout", ff, x, [&](const Tensor& in) {
    ff.dropout->set_seed(11);
    return ff(in);
  });
  ff.eval();
  CHECK(allclose(ff(x), ff.fc2->forward(gelu(ff.fc1->forward(x))), 0, 0));
  CHECK_THROWS_AS(nn::FeedForward(4, 6, "swish"), ValueError);
}

// ============================ Dropout ============================

TEST_CASE("nn::LayerNorm and FeedForward run the fused ops with unchanged parameters") {
  manual_seed(3);
  nn::LayerNorm ln(6);
  nn::FeedForward ffn(6, 12, "gelu_tanh");
  auto names = ffn.named_parameters();
  std::vector<std::string> keys;
  for (auto& [k, v] : names) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  Generator g(6);
  Tensor x = randn({2, 3, 6}, g);
  nn::init::normal_(ln.weight, 1.0, 0.2);
  nn::init::normal_(ln.bias, 0.0, 0.2);
  Tensor y = ffn(ln(x));  // (2, 3, 6)
  Tensor h = nn::activation("gelu_tanh", ffn.fc1->forward(layer_norm_reference(x, ln.weight, ln.bias)));
  CHECK(allclose(y, ffn.fc2->forward(h), 1e-5, 1e-6));
  AddLayerNorm a = ln.forward_residual(x, x);
  CHECK(allclose(a.sum, x * 2.0, 0, 0));
  CHECK(allclose(a.normed, ln(x * 2.0), 1e-6, 1e-6));
  CHECK_THROWS_AS(ln.forward_residual(randn({2, 5}, g), randn({2, 5}, g)), ShapeError);
}

TEST_CASE("Dropout: inverted scaling, drop rate, eval identity, p = 0") {
  nn::Dropout d(0.3);
  d.set_seed(123);
  Tensor x = ones({200000});
  Tensor y = d(x);
  std::vector<float> v = y.to_vector<float>();
  int64_t zeros_n = 0;
  for (float e : v) {
    if (e == 0) {
      ++zeros_n;
    } else {
      CHECK(e == doctest::Approx(1 / 0.7).epsilon(1e-6));
    }
  }
  // Binomial(200000, 0.3): sd = 205 elements, so 0.3 +- 0.005 is over 4.8 sd.
  CHECK(std::abs(double(zeros_n) / 200000 - 0.3) < 0.005);
  CHECK(mean(y).item() == doctest::Approx(1.0).epsilon(0.01));  // unbiased on average

  Tensor w = ones({3, 4}).requires_grad_();
  Tensor out = d(w);
  sum(out).backward();  // the gradient is the same mask and scale
  CHECK(allclose(w.grad(), out.detach(), 0, 0));

  nn::Dropout d64(0.4);
  check_grad("Dropout", [&](const std::vector<Tensor>& in) {
    d64.set_seed(5);  // the same mask on every call
    return d64(in[0]);
  }, {nc_randn({4, 5}, 13)});

  d.eval();
  CHECK(d(x).same(x));
  nn::Dropout zero(0.0);
  CHECK(zero(x).same(x));
  CHECK_THROWS_AS(nn::Dropout(1.0), ValueError);
  CHECK_THROWS_AS(nn::Dropout(-0.1), ValueError);
  CHECK_THROWS_AS(nn::Dropout(std::nan("")), ValueError);
}

TEST_CASE("Dropout masks are reproducible from a seed and differ between calls") {
  Tensor x = ones({1000});
  nn::Dropout a(0.5), b(0.5);
  a.set_seed(9);
  b.set_seed(9);
  Tensor a1 = a(x), a2 = a(x);
  CHECK(allclose(a1, b(x), 0, 0));
  CHECK(allclose(a2, b(x), 0, 0));
  CHECK_FALSE(allclose(a1, a2, 0, 0));

  // Seeded at construction from the default generator: manual_seed fixes the masks of a model.
  manual_seed(77);
  nn::Dropout c1(0.5), c2(0.5);
  manual_seed(77);
  nn::Dropout d1(0.5), d2(0.5);
  Tensor m1 = c1(x), m2 = c2(x);
  CHECK(allclose(m1, d1(x), 0, 0));
  CHECK(allclose(m2, d2(x), 0, 0));
  CHECK_FALSE(allclose(m1, m2, 0, 0));  // two layers get different streams
}

// ============================ positional encodings ============================

TEST_CASE("LearnedPositionalEmbedding adds its rows, gradcheck, too long is an error") {
  nn::LearnedPositionalEmbedding pos(6, 4);
  CHECK(pos.weight.shape() == Dims{6, 4});
  CHECK(pos.state_dict().count("weight"));
  pos.to(kFloat64);
  Tensor x = nc_randn({2, 5, 4}, 6);
  check_module_grad("LearnedPositionalEmbedding", pos, x, [&](const Tensor& in) { return pos(in); });
  check_module_grad("LearnedPositionalEmbedding offset", pos, nc_randn({2, 3, 4}, 7),
                    [&](const Tensor& in) { return pos.forward(in, 3); });
  Tensor y = pos(x);
  CHECK(allclose(select(select(y, 0, 1), 0, 4), select(select(x, 0, 1), 0, 4) + select(pos.weight, 0, 4), 0, 1e-15));
  CHECK_THROWS_AS(pos(zeros({1, 7, 4}, kFloat64)), IndexError);
  CHECK_THROWS_AS(pos.forward(zeros({1, 3, 4}, kFloat64), 4), IndexError);
  CHECK_THROWS_AS(pos(zeros({1, 3, 5}, kFloat64)), ShapeError);
}

TEST_CASE("SinusoidalPositionalEncoding: Vaswani's table, not saved, gradcheck") {
  nn::SinusoidalPositionalEncoding pe(50, 8);
  CHECK(pe.state_dict().empty());
  CHECK(pe.named_buffers().size() == 1);
  // pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(...)
  for (int64_t p : {0, 1, 7, 49})
    for (int64_t i = 0; i < 4; ++i) {
      const double angle = double(p) / std::pow(10000.0, 2.0 * double(i) / 8);
      CHECK(pe.pe.at({p, 2 * i}) == doctest::Approx(std::sin(angle)).epsilon(1e-6));
      CHECK(pe.pe.at({p, 2 * i + 1}) == doctest::Approx(std::cos(angle)).epsilon(1e-6));
    }
  Tensor x = nc_randn({2, 4, 8}, 8);  // float64 input, float32 table: converted
  check_grad("Sinusoidal", [&](const std::vector<Tensor>& in) { return pe(in[0]); }, {x});
  Tensor y = pe.forward(x, 10);
  CHECK(allclose(y - x, to(unsqueeze(narrow(pe.pe, 0, 10, 4), 0), kFloat64) + zeros({2, 4, 8}, kFloat64), 0, 1e-15));
  CHECK_THROWS_AS(pe(zeros({1, 51, 8})), IndexError);
  CHECK_THROWS_AS(nn::SinusoidalPositionalEncoding(10, 7), ValueError);
}

// ============================ RoPE ============================

TEST_CASE("RotaryEmbedding uses the rotate_half pairing (i, i + d/2)") {
  nn::RotaryEmbedding rope(4, 8);
  rope.to(kFloat64);
  // e_0 at position 1 rotates in the (0, 2) plane by theta_0 = 1 radian; e_1 in the (1, 3)
  // plane by theta_1 = 10000^(-1/2).
  Tensor e0 = reshape(from_vector<double>({1, 0, 0, 0, 0, 1, 0, 0}, Dims{2, 4}), {1, 1, 2, 4});
  Tensor y = rope.apply(e0, 1);  // positions 1 and 2
  const double t1 = 1.0 / 100.0;
  CHECK(allclose(reshape(y, {2, 4}),
                 from_vector<double>({std::cos(1.0), 0, std::sin(1.0), 0, 0, std::cos(2 * t1), 0, std::sin(2 * t1)},
                                     Dims{2, 4}),
                 1e-6, 1e-7));
  CHECK(rope.state_dict().empty());  // cos/sin are derived, never saved
  CHECK(rope.named_buffers().size() == 2);
}

TEST_CASE("RotaryEmbedding preserves norms and q_m . k_n depends only on m - n") {
  nn::RotaryEmbedding rope(8, 64);
  rope.to(kFloat64);
  Tensor x = nc_randn({2, 3, 10, 8}, 9);  // (B, h, N, d)
  Tensor y = rope.apply(x, 5);
  CHECK(y.shape() == x.shape());
  CHECK(allclose(sum(square(y), {-1}), sum(square(x), {-1}), 1e-6, 1e-9));

  Generator g(10);
  Tensor q = randn({1, 1, 1, 8}, g, kFloat64), k = randn({1, 1, 1, 8}, g, kFloat64);
  auto score = [&](int64_t m, int64_t n) { return sum(rope.apply(q, m) * rope.apply(k, n)).item(); };
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{3, 1}, {7, 7}, {2, 9}, {0, 5}}) {
    const double base = score(m, n);
    for (int64_t s : {1, 4, 20, 50}) CHECK(score(m + s, n + s) == doctest::Approx(base).epsilon(1e-6));
  }
  CHECK(score(3, 1) != doctest::Approx(score(3, 2)));  // but it does depend on m - n

  // Rotating a slice with an offset equals slicing the rotated whole.
  Tensor whole = rope.apply(x, 0);
  CHECK(allclose(rope.apply(narrow(x, 2, 4, 3), 4), narrow(whole, 2, 4, 3), 1e-12, 1e-12));
}

TEST_CASE("gradcheck: RotaryEmbedding.apply, errors") {
  nn::RotaryEmbedding rope(6, 16);
  Tensor x = nc_randn({2, 2, 5, 6}, 11);
  check_grad("RoPE", [&](const std::vector<Tensor>& in) { return rope.apply(in[0], 3); }, {x});
  CHECK_THROWS_AS(rope.apply(zeros({1, 1, 5, 6}), 12), IndexError);
  CHECK_THROWS_AS(rope.apply(zeros({1, 1, 5, 4})), ShapeError);
  CHECK_THROWS_AS(nn::RotaryEmbedding(5), ValueError);
}

TEST_CASE("gradcheck: Sequential of layers") {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(3, 4));
  seq->push_back(std::make_shared<nn::LayerNorm>(4));
  seq->push_back(std::make_shared<nn::Tanh>());
  seq->push_back(std::make_shared<nn::Linear>(4, 2));
  seq->to(kFloat64);
  check_module_grad("Sequential", *seq, nc_randn({3, 3}, 12), [&](const Tensor& in) { return (*seq)(in); });
}
