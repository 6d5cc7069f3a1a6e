// Optimizers: three-step trajectories pinned to numbers printed once by torch 1.13 (script
// below), float32 against float64, the fused loop on many threads against one thread and
// against the same formulas written as a chain of tensor ops, non-contiguous parameters,
// skipped parameters, zero_grad, decay_groups and the option errors.
#include <cmath>
#include <limits>

#include "optim_testing.hpp"

using namespace attnlab;
using namespace attnlab::optim;
using namespace attnlab::optim::testing;
using attnlab::testing::allclose;
using attnlab::testing::error_of;

// The torch 1.13 reference (python3, float64):
//
//   import torch
//   torch.set_default_dtype(torch.float64)
//   X = torch.tensor([[0.5, -1.0], [1.5, 0.25], [-0.75, 2.0], [0.1, -0.3]])
//   Y = torch.tensor([[1.0, 0.0, -1.0], [0.5, 2.0, 0.25], [-1.5, 0.75, 1.0], [0.2, -0.4, 0.6]])
//   W0 = [[0.3, -0.2, 0.8], [-0.5, 0.4, 0.1]]
//   B0 = [0.05, -0.1, 0.2]
//   def run(make, steps=3):
//       w = torch.tensor(W0, requires_grad=True); b = torch.tensor(B0, requires_grad=True)
//       u = torch.tensor([1.0, 2.0], requires_grad=True)  # never gets a gradient: skipped
//       opt = make(w, b, u)
//       for _ in range(steps):
//           opt.zero_grad()
//           loss = ((X @ w + b - Y) ** 2).mean()
//           loss.backward()
//           opt.step()
//       return w.detach().flatten().tolist() + b.detach().tolist()
//   cases = {
//     "sgd_momentum": lambda w, b, u: torch.optim.SGD([w, b, u], lr=0.1, momentum=0.9, dampening=0.1,
//                                                     weight_decay=0.01),
//     "sgd_nesterov": lambda w, b, u: torch.optim.SGD([w, b, u], lr=0.1, momentum=0.9, nesterov=True,
//                                                     weight_decay=0.01),
//     "sgd_plain": lambda w, b, u: torch.optim.SGD([w, b, u], lr=0.1),
//     "adam_l2": lambda w, b, u: torch.optim.Adam([w, b, u], lr=0.1, betas=(0.8, 0.99), eps=1e-6,
//                                                 weight_decay=0.05),
//     "adamw_groups": lambda w, b, u: torch.optim.AdamW([{"params": [w], "weight_decay": 0.1},
//                                                        {"params": [b, u], "weight_decay": 0.0, "lr": 0.05}],
//                                                       lr=0.1),
//   }
//   for k, f in cases.items():
//       print(k, "{" + ", ".join(repr(v) for v in run(f)) + "}")

namespace {

const std::vector<double> kW0 = {0.3, -0.2, 0.8, -0.5, 0.4, 0.1};
const std::vector<double> kB0 = {0.05, -0.1, 0.2};

struct Params {
  Tensor w, b, u;
};

Params fresh_params(DType dtype = kFloat64) {
  Params p;
  p.w = to(t64(kW0, {2, 3}), dtype).requires_grad_();
  p.b = to(t64(kB0, {3}), dtype).requires_grad_();
  p.u = to(t64({1.0, 2.0}, {2}), dtype).requires_grad_();
  return p;
}

// Three steps of `opt` on the reference problem; returns w (flattened) then b.
template <class Make>
std::vector<double> run3(Make make, DType dtype = kFloat64) {
  Params p = fresh_params(dtype);
  std::unique_ptr<Optimizer> opt = make(p);
  Tensor X = to(problem_X(), dtype), Y = to(problem_Y(), dtype);
  for (int s = 0; s < 3; ++s) {
    opt->zero_grad();
    problem_loss(X, Y, p.w, p.b).backward();
    opt->step();
  }
  CHECK(opt->step_count() == 3);
  // u never had a gradient: untouched, and without state.
  CHECK(p.u.to_vector<double>() == std::vector<double>{1.0, 2.0});
  for (const auto& [key, t] : opt->state_dict()) {
    INFO(key);
    CHECK(key.find(".2.") == std::string::npos);  // u is parameter 2 of group 0 ...
    CHECK(key.rfind("state.1.1.", 0) != 0);       // ... or parameter 1 of group 1
  }
  auto out = p.w.to_vector<double>();
  for (double v : p.b.to_vector<double>()) out.push_back(v);
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", torch " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= rtol * std::abs(want[i]) + 1e-12);
  }
}

std::unique_ptr<Optimizer> sgd_momentum(Params& p) {
  return std::make_unique<SGD>(std::vector<Tensor>{p.w, p.b, p.u},
                               SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
}
std::unique_ptr<Optimizer> sgd_nesterov(Params& p) {
  return std::make_unique<SGD>(std::vector<Tensor>{p.w, p.b, p.u},
                               SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
}
std::unique_ptr<Optimizer> sgd_plain(Params& p) {
  return std::make_unique<SGD>(std::vector<Tensor>{p.w, p.b, p.u}, SGDOptions{.lr = 0.1});
}
std::unique_ptr<Optimizer> adam_l2(Params& p) {
  return std::make_unique<Adam>(std::vector<Tensor>{p.w, p.b, p.u},
                                AdamOptions{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.05});
}
std::unique_ptr<Optimizer> adamw_groups(Params& p) {
  // The same split as decay_groups gives: w decays, b (1-d) and u do not.
  auto groups = decay_groups({{"w", p.w}, {"b", p.b}, {"u", p.u}}, 0.1);
  groups[1].lr = 0.05;
  return std::make_unique<AdamW>(groups, AdamWOptions{.lr = 0.1});
}

}  // namespace

TEST_CASE("SGD with momentum, dampening and weight decay matches torch") {
  check_close(run3(sgd_momentum), {0.3458699080810371, 0.12043949080963802, 0.5170974912188686, -0.5717279380962129,
                                   0.3877483718381641, 0.38364947401245386, 0.05571460024515105, 0.11645480570412499,
                                   0.10604192635772657},
              1e-6);
}

TEST_CASE("SGD with Nesterov momentum matches torch") {
  check_close(run3(sgd_nesterov), {0.36302608698403444, 0.25376823377273006, 0.4069543193366645, -0.5980358119008516,
                                   0.3906386465663948, 0.4853179281075086, 0.058245961826789316, 0.19682668503530046,
                                   0.06949401099840616},
              1e-6);
}

TEST_CASE("plain SGD matches torch") {
  check_close(run3(sgd_plain), {0.3261904918520327, -0.022162245033998842, 0.6454068989854601, -0.5409972423493562,
                                0.3949100357168692, 0.2569100062906901, 0.05333656297019677, 0.019419211226851852,
                                0.14841035053168403},
              1e-6);
}

TEST_CASE("Adam with L2 weight decay matches torch") {
  check_close(run3(adam_l2), {0.42346750662209304, 0.09548583728201077, 0.5058779742761579, -0.6929435927356081,
                              0.364289923978236, 0.3940164466120778, 0.015919254232402494, 0.19329792902277515,
                              -0.07532071747003315},
              1e-6);
}

TEST_CASE("AdamW with two groups (decay_groups, own lr) matches torch") {
  check_close(run3(adamw_groups), {0.4876082551355424, 0.10080643901123791, 0.4827437211780258, -0.7189211595719506,
                                   0.40310999214726145, 0.3899092304530533, 0.048223322653657585, 0.04908151971979088,
                                   0.05299353092037966},
              1e-6);
}

TEST_CASE("float32 parameters follow the float64 trajectory") {
  for (auto make : {sgd_momentum, sgd_nesterov, adam_l2, adamw_groups}) {
    auto f64 = run3(make, kFloat64);
    auto f32 = run3(make, kFloat32);
    check_close(f32, f64, 1e-5);
  }
}

TEST_CASE("the fused update is the chain of tensor ops, on any thread count") {
  // Large enough for parallel_for to split it into chunks.
  const int64_t n = 5 * kParallelGrain + 123;
  Generator gen(7);
  Tensor p0 = randn({n}, gen, kFloat64), g1 = randn({n}, gen, kFloat64), g2 = randn({n}, gen, kFloat64);
  const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;

  auto run = [&](int threads) {
    const int before = num_threads();
    set_num_threads(threads);
    Tensor p = clone(p0).requires_grad_();
    AdamW opt(std::vector<Tensor>{p}, {.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd});
    for (const Tensor& g : {g1, g2}) {
      p.set_grad(clone(g));
      opt.step();
    }
    set_num_threads(before);
    return p;
  };
  Tensor many = run(2), one = run(1);
  CHECK(bitwise_equal(many, one));

  // The slow readable twin: torch's formulas as separate tensor ops.
  Tensor p = clone(p0), m = zeros({n}, kFloat64), v = zeros({n}, kFloat64);
  int t = 0;
  for (const Tensor& g : {g1, g2}) {
    ++t;
    p = p * (1 - lr * wd);
    m = m * b1 + g * (1 - b1);
    v = v * b2 + g * g * (1 - b2);
    Tensor denom = sqrt(v) / std::sqrt(1 - std::pow(b2, t)) + eps;
    p = p - m / denom * (lr / (1 - std::pow(b1, t)));
  }
  CHECK(allclose(many, p, 1e-12, 1e-14));
}

TEST_CASE("a non-contiguous parameter is updated in place like a contiguous one") {
  Tensor base = t64(kW0, {3, 2});          // storage shared with the parameter
  Tensor pt = transpose(base, 0, 1);       // (2, 3), strides (1, 2)
  REQUIRE_FALSE(pt.is_contiguous());
  pt.requires_grad_();
  Tensor pc = contiguous(transpose(t64(kW0, {3, 2}), 0, 1)).requires_grad_();
  REQUIRE(allclose(pt, pc, 0, 0));
  Generator gen(3);
  Tensor g = randn({2, 3}, gen, kFloat64);
  SGD a(std::vector<Tensor>{pt}, {.lr = 0.5, .momentum = 0.9});
  SGD b(std::vector<Tensor>{pc}, {.lr = 0.5, .momentum = 0.9});
  for (int s = 0; s < 2; ++s) {
    pt.set_grad(clone(g));
    pc.set_grad(clone(g));
    a.step();
    b.step();
  }
  CHECK(bitwise_equal(pt, pc));
  CHECK(bitwise_equal(transpose(base, 0, 1), pc));  // written through to the shared storage
  CHECK_FALSE(allclose(pc, transpose(t64(kW0, {3, 2}), 0, 1)));
}

TEST_CASE("zero_grad zeroes in place, or drops the gradients") {
  Params p = fresh_params();
  SGD opt(std::vector<Tensor>{p.w, p.b, p.u}, {.lr = 0.1});
  problem_loss(problem_X(), problem_Y(), p.w, p.b).backward();
  Tensor gw = p.w.grad();
  REQUIRE(gw.defined());
  REQUIRE(sum(abs(gw)).item() > 0);
  opt.zero_grad();
  CHECK(p.w.grad().same(gw));  // same buffer, so the next backward accumulates into it
  CHECK(sum(abs(gw)).item() == 0);
  CHECK_FALSE(p.u.grad().defined());
  opt.zero_grad(true);
  CHECK_FALSE(p.w.grad().defined());
  CHECK_FALSE(p.b.grad().defined());
}

TEST_CASE("decay_groups: biases, norms and 1-d parameters get no weight decay") {
  Generator gen(1);
  auto P = [&](Dims shape) { return randn(shape, gen, kFloat64).requires_grad_(); };
  std::vector<std::pair<std::string, Tensor>> named = {
      {"embed.weight", P({10, 4})},   {"layers.0.attn.q.weight", P({4, 4})}, {"layers.0.attn.q.bias", P({4})},
      {"layers.0.norm1.weight", P({4})}, {"layers.0.LayerNorm.gamma", P({4, 4})},  // 2-d, but a norm
      {"bias", P({4, 4})},            // named bias: no decay even though 2-d
      {"ln_f.weight", P({4})},        // 1-d
      {"scale", P({})},               // 0-d
      {"head.weight", P({3, 4})},     {"my_bias_matrix", P({4, 4})},  // not ".bias": decays
  };
  auto groups = decay_groups(named, 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].weight_decay == 0.1);
  CHECK(groups[1].weight_decay == 0.0);
  CHECK(groups[0].names == std::vector<std::string>{"embed.weight", "layers.0.attn.q.weight", "head.weight",
                                                    "my_bias_matrix"});
  CHECK(groups[1].names == std::vector<std::string>{"layers.0.attn.q.bias", "layers.0.norm1.weight",
                                                    "layers.0.LayerNorm.gamma", "bias", "ln_f.weight", "scale"});
  CHECK(groups[0].params[0].same(named[0].second));
  CHECK(groups[1].params[5].same(named[7].second));
  CHECK(std::isnan(groups[0].lr));  // left to the optimizer's option

  AdamW opt(groups, {.lr = 0.02, .weight_decay = 0.5});
  CHECK(opt.param_groups()[0].lr == 0.02);
  CHECK(opt.param_groups()[0].weight_decay == 0.1);  // the group's own value wins
  CHECK(opt.param_groups()[1].weight_decay == 0.0);

  // A group left at kInherit takes the option.
  AdamW opt2({ParamGroup{.params = {named[0].second}}}, {.lr = 0.02, .weight_decay = 0.5});
  CHECK(opt2.param_groups()[0].weight_decay == 0.5);
  CHECK(opt2.param_groups()[0].names == std::vector<std::string>{"0.0"});
  CHECK(error_of([&] { decay_groups(named, -1); }).find("weight_decay must be >= 0, got -1") != std::string::npos);
}

TEST_CASE("invalid options and parameters throw ValueError naming them") {
  Params p = fresh_params();
  std::vector<Tensor> ps = {p.w, p.b};
  auto msg = [](auto&& f) { return error_of(f); };
  CHECK_THROWS_AS(SGD(ps, {.lr = -0.1}), ValueError);
  CHECK(msg([&] { SGD(ps, {.lr = -0.1}); }).find("lr must be >= 0, got -0.1") != std::string::npos);
  CHECK(msg([&] { SGD(ps, SGDOptions{}); }).find("lr is not set") != std::string::npos);
  CHECK(msg([&] { SGD(ps, {.lr = 0.1, .momentum = -1}); }).find("momentum must be >= 0, got -1") != std::string::npos);
  CHECK(msg([&] { SGD(ps, {.lr = 0.1, .nesterov = true}); }).find("nesterov needs momentum > 0") != std::string::npos);
  CHECK(msg([&] { SGD(ps, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); })
            .find("dampening 0.1") != std::string::npos);
  CHECK_THROWS_AS(Adam(ps, {.beta1 = 1.0}), ValueError);
  CHECK(msg([&] { Adam(ps, {.beta1 = 1.0}); }).find("Adam: option beta1 must be in [0, 1), got 1") != std::string::npos);
  CHECK(msg([&] { AdamW(ps, {.beta2 = -0.5}); }).find("AdamW: option beta2 must be in [0, 1), got -0.5") !=
        std::string::npos);
  CHECK(msg([&] { Adam(ps, {.eps = -1e-8}); }).find("eps must be >= 0") != std::string::npos);
  CHECK(msg([&] { AdamW(ps, {.weight_decay = -0.1}); }).find("weight_decay must be >= 0, got -0.1") !=
        std::string::npos);
  CHECK(msg([&] { Adam(ps, {.lr = std::numeric_limits<double>::quiet_NaN()}); }).find("lr is not set") !=
        std::string::npos);
  ParamGroup bad;
  bad.params = {p.w};
  bad.lr = -2;
  CHECK(msg([&] { Adam({bad}); }).find("group 0: lr must be >= 0, got -2") != std::string::npos);

  CHECK(msg([&] { Adam(std::vector<Tensor>{}); }).find("empty parameter list") != std::string::npos);
  CHECK(msg([&] { Adam(std::vector<Tensor>{p.w, p.w}); }).find("appears more than once") != std::string::npos);
  CHECK(msg([&] { Adam(std::vector<Tensor>{p.w * 2.0}); }).find("not a leaf") != std::string::npos);
  CHECK_THROWS_AS(Adam(std::vector<Tensor>{arange(3)}), DTypeError);
  CHECK(msg([&] { Adam(std::vector<Tensor>{Tensor()}); }).find("undefined") != std::string::npos);
  CHECK(msg([&] { Adam({ParamGroup{{p.w}, {"a", "b"}}}); }).find("1 parameters but 2 names") != std::string::npos);
}

TEST_CASE("check_finite_loss returns a finite loss and names the loop, step and value of any other") {
  CHECK(check_finite_loss(full({}, 2.5, kFloat64), "loop", 1) == 2.5);
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {std::nan(""), inf, -inf}) {
    CAPTURE(bad);
    std::string msg;
    try {
      check_finite_loss(full({}, bad, kFloat32), "collab_compress fine-tuning", 7);
    } catch (const ValueError& e) {
      msg = e.what();
    }
    CHECK(msg.find("collab_compress fine-tuning: the loss is " + fmt::format("{}", float(bad)) + " at step 7") !=
          std::string::npos);
  }
}
