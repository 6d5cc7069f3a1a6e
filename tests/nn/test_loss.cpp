// Losses: cross_entropy (fused) and cross_entropy_reference pinned to PyTorch's numbers for
// every reduction with and without label smoothing and with an ignored target; fused == composed
// in value and gradient; gradchecks; errors; nll_loss and mse_loss.
#include <limits>

#include "nn_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

using LossFn = Tensor (*)(const Tensor&, const Tensor&, int64_t, double, const std::string&);
const std::pair<const char*, LossFn> kBoth[] = {{"fused", nn::cross_entropy},
                                                {"reference", nn::cross_entropy_reference}};

struct TorchCase {
  const char* reduction;
  double smoothing;
  std::vector<double> loss, grad;
};

// /usr/bin/python3, torch 1.13, float64 (class dim moved to 1 for torch):
//   logits = seq(30, 0.37).reshape(2, 3, 5); targets = torch.tensor([[1, 4, -100], [0, 2, 3]])
//   l = logits.clone().requires_grad_()
//   loss = F.cross_entropy(l.permute(0, 2, 1), targets, ignore_index=-100, label_smoothing=ls, reduction=red)
//   up = seq(loss.numel(), 0.45, 0.3).reshape(loss.shape) if red == "none" else torch.tensor(1.0)
//   (loss * up).sum().backward()   # -> loss, l.grad
const TorchCase kTorch[] = {
    {"mean", 0.0, {2.580760806},
     {0.009881775453, -0.179632855, 0.03806396449, 0.05926918758, 0.07241792752, 0.08173859183, 0.05879793816,
      0.03409206052, 0.01715291929, -0.1917815098, 0, 0, 0, 0, 0, -0.1932285181, 0.01268845536, 0.02617563335,
      0.05389947266, 0.1004649567, 0.04328357104, 0.05263115154, -0.1511327901, 0.03499521331, 0.02022285421,
      0.1017875132, 0.04877118873, 0.02462843813, -0.1856227565, 0.01043561636}},
    {"mean", 0.1, {2.51057301},
     {0.005881775453, -0.163632855, 0.03406396449, 0.05526918758, 0.06841792752, 0.07773859183, 0.05479793816,
      0.03009206052, 0.01315291929, -0.1757815098, 0, 0, 0, 0, 0, -0.1772285181, 0.008688455357, 0.02217563335,
      0.04989947266, 0.09646495672, 0.03928357104, 0.04863115154, -0.1351327901, 0.03099521331, 0.01622285421,
      0.09778751324, 0.04477118873, 0.02062843813, -0.1696227565, 0.006435616357}},
    {"sum", 0.0, {12.90380403},
     {0.04940887726, -0.8981642752, 0.1903198224, 0.2963459379, 0.3620896376, 0.4086929591, 0.2939896908,
      0.1704603026, 0.08576459647, -0.958907549, 0, 0, 0, 0, 0, -0.9661425904, 0.06344227678, 0.1308781667,
      0.2694973633, 0.5023247836, 0.2164178552, 0.2631557577, -0.7556639505, 0.1749760665, 0.1011142711,
      0.5089375662, 0.2438559436, 0.1231421907, -0.9281137823, 0.05217808178}},
    {"sum", 0.1, {12.55286505},
     {0.02940887726, -0.8181642752, 0.1703198224, 0.2763459379, 0.3420896376, 0.3886929591, 0.2739896908,
      0.1504603026, 0.06576459647, -0.878907549, 0, 0, 0, 0, 0, -0.8861425904, 0.04344227678, 0.1108781667,
      0.2494973633, 0.4823247836, 0.1964178552, 0.2431557577, -0.6756639505, 0.1549760665, 0.08111427106,
      0.4889375662, 0.2238559436, 0.1031421907, -0.8481137823, 0.03217808178}},
    {"none", 0.0, {2.284394305, 3.191930849, 0, 3.385597408, 1.409210749, 2.632670719},
     {0.02920264324, -0.5308513845, 0.1124867065, 0.1751524256, 0.2140096091, 0.5571619238, 0.4007895366,
      0.2323846986, 0.1169209464, -1.307257105, 0, 0, 0, 0, 0, -1.926227522, 0.1264867741, 0.2609357348,
      0.5373049934, 1.001500019, 0.3736278394, 0.4543170299, -1.3045924, 0.3020819591, 0.1745655718,
      0.5676523877, 0.2719889783, 0.1373487893, -1.035187888, 0.05819773323}},
    {"none", 0.1, {2.239618077, 3.063464452, 0, 3.250565981, 1.434477159, 2.564739379},
     {0.01738183497, -0.4835681514, 0.1006658982, 0.1633316174, 0.2021888008, 0.5298963734, 0.3735239862,
      0.2051191482, 0.08965539598, -1.198194904, 0, 0, 0, 0, 0, -1.766729117, 0.08661217296, 0.2210611337,
      0.4974303923, 0.9616254182, 0.3390994648, 0.4197886552, -1.166478902, 0.2675535845, 0.1400371971,
      0.545345039, 0.2496816296, 0.1150414406, -0.9459584937, 0.03589038453}},
};

Tensor torch_targets() { return from_vector<int64_t>({1, 4, -100, 0, 2, 3}, Dims{2, 3}); }

}  // namespace

TEST_CASE("cross_entropy (fused and composed) matches PyTorch: reductions, label smoothing, ignore_index") {
  for (const auto& [impl, fn] : kBoth)
    for (const TorchCase& c : kTorch) {
      INFO(impl << " reduction=" << c.reduction << " label_smoothing=" << c.smoothing);
      Tensor logits = reshape(seq(30, 0.37), {2, 3, 5}).requires_grad_();
      Tensor loss = fn(logits, torch_targets(), -100, c.smoothing, c.reduction);
      const bool none = std::string(c.reduction) == "none";
      CHECK(loss.shape() == (none ? Dims{2, 3} : Dims{}));
      Tensor up = none ? reshape(seq(6, 0.45, 0.3), {2, 3}) : scalar_tensor(1.0, kFloat64);
      sum(loss * up).backward();
      CHECK(allclose(reshape(loss, {-1}), expected(c.loss, {int64_t(c.loss.size())}), 1e-8, 1e-9));
      CHECK(allclose(logits.grad(), expected(c.grad, {2, 3, 5}), 1e-8, 1e-9));
    }
}

TEST_CASE("fused cross_entropy equals the composed twin in value and gradient (float32)") {
  Generator g(0);
  Tensor logits0 = randn({4, 7, 11}, g, kFloat32, 0, 3);
  Tensor targets = randint(0, 11, {4, 7}, g);
  int64_t* t = targets.data<int64_t>();
  for (int i = 0; i < 28; i += 5) t[i] = 3;  // ignore_index is 3 here (so are any random 3s)
  for (const char* red : {"mean", "sum", "none"})
    for (double ls : {0.0, 0.2, 1.0}) {
      INFO(red << " " << ls);
      Tensor a = clone(logits0).requires_grad_(), b = clone(logits0).requires_grad_();
      Tensor la = nn::cross_entropy(a, targets, 3, ls, red), lb = nn::cross_entropy_reference(b, targets, 3, ls, red);
      CHECK(allclose(la, lb, 1e-5, 1e-6));
      Tensor up = randn(la.shape(), g);
      sum(la * up).backward();
      sum(lb * up).backward();
      CHECK(allclose(a.grad(), b.grad(), 1e-4, 1e-6));
      // Ignored rows get no gradient at all.
      CHECK(max(abs(select(select(a.grad(), 0, 0), 0, 0))).item() == 0);
    }
}

TEST_CASE("gradcheck: fused cross_entropy on non-contiguous logits, every reduction") {
  Tensor logits = nc_randn({3, 4, 6}, 1);  // (B, N, C)
  Tensor targets = from_vector<int64_t>({0, 5, -1, 2, 1, 1, 4, -1, 3, 0, 5, 2}, Dims{3, 4});
  for (const char* red : {"mean", "sum", "none"})
    for (double ls : {0.0, 0.3}) {
      INFO(red << " " << ls);
      check_grad("cross_entropy", [&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], targets, -1, ls, red); },
                 {logits});
      check_grad("cross_entropy_reference",
                 [&](const std::vector<Tensor>& in) { return nn::cross_entropy_reference(in[0], targets, -1, ls, red); },
                 {logits});
    }
  // Unbatched: logits (C), target ().
  Tensor v = nc_randn({5}, 2);
  Tensor t0 = from_vector<int64_t>({3}, Dims{1});
  Tensor scalar_target = reshape(t0, Dims{});
  check_grad("cross_entropy 1-d", [&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], scalar_target); }, {v});
}

TEST_CASE("cross_entropy: large logits stay finite, every target ignored gives NaN like PyTorch") {
  Tensor logits = from_vector<float>({1000, 0, -1000, 999}, Dims{1, 4});
  Tensor target = from_vector<int64_t>({3}, Dims{1});
  for (const auto& [impl, fn] : kBoth) {
    INFO(std::string(impl));
    // lse - x_3 = 1000 + log(1 + e^-1) - 999; the other terms vanish (float32: ulp(1000) = 6e-5)
    CHECK(fn(logits, target, -100, 0.0, "mean").item() == doctest::Approx(1 + std::log1p(std::exp(-1.0))).epsilon(1e-4));
    Tensor ignored = from_vector<int64_t>({-100}, Dims{1});
    CHECK(std::isnan(fn(logits, ignored, -100, 0.0, "mean").item()));
    CHECK(fn(logits, ignored, -100, 0.0, "sum").item() == 0);
  }
}

TEST_CASE("cross_entropy errors name what is wrong") {
  Tensor logits = zeros({2, 3, 5});
  Tensor targets = from_vector<int64_t>({0, 1, 7, 2, 3, 4}, Dims{2, 3});
  for (const auto& [impl, fn] : kBoth) {
    INFO(std::string(impl));
    std::string msg = error_of([&] { fn(logits, targets, -100, 0.0, "mean"); });
    CHECK(msg.find("target 7") != std::string::npos);
    CHECK(msg.find("5 classes") != std::string::npos);
    CHECK_THROWS_AS(fn(logits, targets, -100, 0.0, "mean"), IndexError);
    Tensor neg = from_vector<int64_t>({0, 1, -1, 2, 3, 4}, Dims{2, 3});
    CHECK_THROWS_AS(fn(logits, neg, -100, 0.0, "mean"), IndexError);
    CHECK_NOTHROW(fn(logits, neg, -1, 0.0, "mean"));  // -1 is fine when it is the ignore_index
    CHECK_THROWS_AS(fn(logits, zeros({2, 3}), -100, 0.0, "mean"), DTypeError);
    CHECK_THROWS_AS(fn(logits, zeros({2, 4}, kInt64), -100, 0.0, "mean"), ShapeError);
    CHECK_THROWS_AS(fn(logits, zeros({6}, kInt64), -100, 0.0, "mean"), ShapeError);
    CHECK_THROWS_AS(fn(logits, zeros({2, 3}, kInt64), -100, 0.0, "avg"), ValueError);
    CHECK_THROWS_AS(fn(logits, zeros({2, 3}, kInt64), -100, 1.5, "mean"), ValueError);
  }
}

TEST_CASE("nll_loss of log_softmax is cross_entropy, gradcheck") {
  Generator g(3);
  Tensor logits = randn({3, 4, 6}, g, kFloat64);
  Tensor targets = from_vector<int64_t>({0, 5, -100, 2, 1, 1, 4, -100, 3, 0, 5, 2}, Dims{3, 4});
  for (const char* red : {"mean", "sum", "none"})
    CHECK(allclose(nn::nll_loss(log_softmax(logits, -1), targets, -100, red), nn::cross_entropy(logits, targets, -100, 0.0, red),
                   1e-12, 1e-12));
  Tensor lp = nc_randn({3, 4, 6}, 4);
  check_grad("nll_loss", [&](const std::vector<Tensor>& in) { return nn::nll_loss(in[0], targets); }, {lp});
  // -log_probs at the targets, averaged
  Tensor simple = from_vector<double>({-1, -2, -3, -4}, Dims{2, 2});
  CHECK(nn::nll_loss(simple, from_vector<int64_t>({1, 0}, Dims{2})).item() == doctest::Approx((2 + 3) / 2.0));
  CHECK_THROWS_AS(nn::nll_loss(simple, from_vector<int64_t>({2, 0}, Dims{2})), IndexError);
}

TEST_CASE("mse_loss: reductions, gradcheck, shape check") {
  Tensor a = from_vector<double>({1, 2, 3, 4}, Dims{2, 2}), b = from_vector<double>({0, 2, 5, 1}, Dims{2, 2});
  CHECK(nn::mse_loss(a, b).item() == doctest::Approx((1 + 0 + 4 + 9) / 4.0));
  CHECK(nn::mse_loss(a, b, "sum").item() == doctest::Approx(14));
  CHECK(allclose(nn::mse_loss(a, b, "none"), from_vector<double>({1, 0, 4, 9}, Dims{2, 2})));
  check_grad("mse_loss", [&](const std::vector<Tensor>& in) { return nn::mse_loss(in[0], in[1]); },
             {nc_randn({3, 4}, 5), nc_randn({3, 4}, 6)});
  CHECK_THROWS_AS(nn::mse_loss(a, zeros({4}, kFloat64)), ShapeError);
  CHECK_THROWS_AS(nn::mse_loss(a, b, "mean_"), ValueError);
}
