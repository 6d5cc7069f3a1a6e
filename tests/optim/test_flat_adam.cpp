// Adam/AdamW's flat pass (step) against its per-tensor twin (step_per_tensor), bitwise, through
// everything that changes the layout or the state: groups with their own lr and weight decay,
// a parameter that never gets a gradient and one that gets it every other step, float32 and
// float64 side by side, a parameter replaced by set_data, a parameter added after a few steps,
// a state_dict round trip, parameters that cannot move; module parameters that alias the
// flat storage after the first step; and the errors of a layout that cannot be built.
#include <string>
#include <utility>

#include "nn/linear.hpp"
#include "optim/adam.hpp"
#include "optim_testing.hpp"

using namespace attnlab;
using namespace attnlab::optim;
using namespace attnlab::optim::testing;
using attnlab::testing::allclose;
using attnlab::testing::error_of;

namespace {

// Sets the number of threads for one scope, so that the pass is split into chunks.
struct Threads {
  explicit Threads(int n) : before(num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(before); }
  int before;
};

// One copy of the parameters; two copies start from the same values.
struct Set {
  Tensor big, mat64, vec, bias, tiny64, never, sometimes;
  std::vector<Tensor> all() const { return {big, mat64, vec, bias, tiny64, never, sometimes}; }
};

Set make_set() {
  Generator gen(11);
  Set s;
  s.big = randn({97, 1013}, gen).requires_grad_();            // (97, 1013) float32: 3 chunks of the pass
  s.mat64 = randn({40, 50}, gen, kFloat64).requires_grad_();  // (40, 50) float64
  s.vec = randn({7}, gen).requires_grad_();                   // (7,)
  s.bias = randn({300}, gen).requires_grad_();                // (300,)
  s.tiny64 = randn({3}, gen, kFloat64).requires_grad_();      // (3,) float64
  s.never = randn({5}, gen).requires_grad_();                 // never gets a gradient
  s.sometimes = randn({4, 6}, gen).requires_grad_();          // a gradient every other step
  return s;
}

std::vector<ParamGroup> groups_of(const Set& s) {
  ParamGroup decay{{s.big, s.mat64, s.vec}, {"big", "mat64", "vec"}, 0.01, 0.1};
  ParamGroup plain{{s.bias, s.tiny64, s.never, s.sometimes}, {"bias", "tiny64", "never", "sometimes"}, 0.03, 0.0};
  return {decay, plain};
}

// The gradients of step `t`, the same for both copies.
void set_grads(const Set& s, int t) {
  Generator gen(100 + t);
  for (const Tensor& p : s.all()) {
    Tensor g = randn(p.shape(), gen, p.dtype());
    bool has = !p.same(s.never) && !(p.same(s.sometimes) && t % 2 == 1);
    p.set_grad(has ? g : Tensor());
  }
}

bool same_params(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!bitwise_equal(a[i], b[i])) return false;
  return true;
}

bool same_state(const TensorMap& a, const TensorMap& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a)
    if (!b.count(k) || !bitwise_equal(v, b.at(k))) return false;
  return true;
}

// Six steps of `Opt` on two copies, one through step() and one through step_per_tensor(),
// changing the layout and the state on the way; both must agree bitwise after every step.
template <class Opt, class Options>
void check_flat_matches_twin(const Options& options) {
  Threads threads(2);
  Set a = make_set(), b = make_set();
  Opt flat(groups_of(a), options), twin(groups_of(b), options);
  Tensor extra_a, extra_b;
  for (int t = 0; t < 6; ++t) {
    INFO("step " << t);
    if (t == 2) {  // a scheduler-like lr change, and a parameter replaced by set_data
      for (Opt* o : {&flat, &twin}) o->param_groups()[1].lr = 0.02;
      Generator gen(5);
      Tensor fresh = randn({40, 50}, gen, kFloat64);
      a.mat64.set_data(clone(fresh));
      b.mat64.set_data(clone(fresh));
    }
    if (t == 3) {  // a parameter added after construction, and a state_dict round trip
      extra_a = full({2, 2}, 0.5).requires_grad_();
      extra_b = full({2, 2}, 0.5).requires_grad_();
      flat.param_groups()[0].params.push_back(extra_a);
      flat.param_groups()[0].names.push_back("extra");
      twin.param_groups()[0].params.push_back(extra_b);
      twin.param_groups()[0].names.push_back("extra");
      flat.load_state_dict(flat.state_dict());
    }
    set_grads(a, t);
    set_grads(b, t);
    if (extra_a.defined()) {
      extra_a.set_grad(full({2, 2}, 0.25 * t));
      extra_b.set_grad(full({2, 2}, 0.25 * t));
    }
    flat.step();
    twin.step_per_tensor();
    CHECK(flat.is_flat(a.big));
    CHECK(same_params(a.all(), b.all()));
    if (extra_a.defined()) CHECK(bitwise_equal(extra_a, extra_b));
    CHECK(same_state(flat.state_dict(), twin.state_dict()));
  }
  // The comparison can fail: the parameters moved, and the never-updated one kept its value.
  CHECK_FALSE(bitwise_equal(a.big, make_set().big));
  CHECK(bitwise_equal(a.never, make_set().never));
  CHECK(flat.state_dict().count("state.1.2.exp_avg") == 0);  // `never` has no state
  CHECK(flat.state_dict().at("state.1.3.step").item() == 3);  // `sometimes`: its own step count
}

}  // namespace

TEST_CASE("AdamW's flat pass is bitwise its per-tensor twin (groups, parameters without a gradient on some or all steps, float64, layout changes)") {
  check_flat_matches_twin<AdamW>(AdamWOptions{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6});
}

TEST_CASE("Adam's flat pass (L2 weight decay) is bitwise its per-tensor twin") {
  check_flat_matches_twin<Adam>(AdamOptions{.lr = 0.01, .weight_decay = 0.05});
}

TEST_CASE("after the first step, module parameters are slices of the optimizer's flat storage") {
  nn::Linear lin(8, 4), twin_lin(8, 4);
  NoGradGuard no_grad_for_setup;
  twin_lin.weight.set_data(clone(lin.weight));
  twin_lin.bias.set_data(clone(lin.bias));
  AdamW opt(lin.parameters(), {.lr = 0.1}), twin(twin_lin.parameters(), {.lr = 0.1});
  CHECK_FALSE(opt.flat_parameters(kFloat32).defined());
  CHECK_FALSE(opt.is_flat(lin.weight));

  Generator gen(3);
  Tensor gw = randn({4, 8}, gen), gb = randn({4}, gen);
  auto step_both = [&] {
    lin.weight.set_grad(clone(gw));
    lin.bias.set_grad(clone(gb));
    twin_lin.weight.set_grad(clone(gw));
    twin_lin.bias.set_grad(clone(gb));
    opt.step();
    twin.step_per_tensor();
  };
  step_both();
  Tensor flat = opt.flat_parameters(kFloat32);  // (32 + 4,)
  REQUIRE(flat.defined());
  CHECK(flat.numel() == 36);
  CHECK(opt.is_flat(lin.weight));
  CHECK(opt.is_flat(lin.bias));
  CHECK(lin.weight.storage() == flat.storage());
  CHECK(bitwise_equal(reshape(narrow(flat, 0, 0, 32), {4, 8}), lin.weight));
  CHECK(bitwise_equal(narrow(flat, 0, 32, 4), lin.bias));

  // Written through the module, seen by the optimizer: the next step starts from it.
  fill_(lin.weight, 0.25);
  fill_(twin_lin.weight, 0.25);
  CHECK(narrow(flat, 0, 0, 32).to_vector<float>() == std::vector<float>(32, 0.25f));
  step_both();
  CHECK(bitwise_equal(lin.weight, twin_lin.weight));
  CHECK(bitwise_equal(lin.bias, twin_lin.bias));
  CHECK_FALSE(allclose(lin.weight, full({4, 8}, 0.25)));
  // And the module computes with the moved parameters.
  Tensor x = randn({2, 8}, gen);
  CHECK(bitwise_equal(lin.forward(x), twin_lin.forward(x)));
}

TEST_CASE("parameters that cannot move stay in place and are updated like the rest") {
  Threads threads(2);
  Generator init(1);
  Tensor base = randn({6, 5}, init);                       // also held here: its view cannot move
  Tensor viewed = base.as_strided({4, 5}, {5, 1}, 5).requires_grad_();  // (4, 5) rows 1..4 of base
  Tensor strided = randn({5, 3}, init).as_strided({3, 5}, {1, 3}, 0).requires_grad_();  // (3, 5), transposed
  REQUIRE_FALSE(strided.is_contiguous());
  Tensor plain = randn({10}, init).requires_grad_();
  Tensor viewed2 = clone(viewed.detach()).requires_grad_(), strided2 = clone(strided.detach()).requires_grad_(),
         plain2 = clone(plain.detach()).requires_grad_();
  AdamW opt(std::vector<Tensor>{viewed, strided, plain}, {.lr = 0.1});
  AdamW twin(std::vector<Tensor>{viewed2, strided2, plain2}, {.lr = 0.1});
  for (int t = 0; t < 3; ++t) {
    Generator gen(50 + t);
    for (auto [p, q] : {std::pair{viewed, viewed2}, std::pair{strided, strided2}, std::pair{plain, plain2}}) {
      Tensor g = randn(p.shape(), gen);
      p.set_grad(clone(g));
      q.set_grad(clone(g));
    }
    opt.step();
    twin.step_per_tensor();
  }
  CHECK_FALSE(opt.is_flat(viewed));
  CHECK_FALSE(opt.is_flat(strided));
  CHECK(opt.is_flat(plain));
  CHECK(viewed.storage() == base.storage());
  CHECK(bitwise_equal(narrow(base, 0, 1, 4), viewed2));  // the update reached the shared storage
  CHECK(bitwise_equal(strided, strided2));
  CHECK(bitwise_equal(plain, plain2));
  CHECK(same_state(opt.state_dict(), twin.state_dict()));
}

TEST_CASE("a parameter whose dtype changed under its state throws DTypeError naming it") {
  Generator gen(4);
  Tensor w = randn({3, 2}, gen).requires_grad_();
  AdamW opt(std::vector<ParamGroup>{ParamGroup{{w}, {"w"}}}, {.lr = 0.1});
  w.set_grad(ones({3, 2}));
  opt.step();
  w.set_data(to(w, kFloat64));
  w.set_grad(ones({3, 2}, kFloat64));
  CHECK_THROWS_AS(opt.step(), DTypeError);
  std::string msg = error_of([&] { opt.step(); });
  CHECK(msg.find("'w'") != std::string::npos);
  CHECK(msg.find("exp_avg") != std::string::npos);
}

TEST_CASE("a parameter added twice after construction throws ValueError naming it") {
  Generator gen(6);
  Tensor w = randn({3, 2}, gen).requires_grad_();
  AdamW opt(std::vector<ParamGroup>{ParamGroup{{w}, {"w"}}}, {.lr = 0.1});
  opt.param_groups()[0].params.push_back(w);
  opt.param_groups()[0].names.push_back("w again");
  w.set_grad(ones({3, 2}));
  CHECK_THROWS_AS(opt.step(), ValueError);
  std::string msg = error_of([&] { opt.step(); });
  CHECK(msg.find("AdamW.step") != std::string::npos);
  CHECK(msg.find("'w again' appears more than once") != std::string::npos);
}
