// copy_pruned_state (nn/attention/attention.hpp), the one slicer behind every prune_heads: the
// slices it takes, its rest rule, and its errors. The variants' own prune tests check the layers.
#include "autograd/grad_mode.hpp"
#include "helpers.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/kernels.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::nn;

TEST_CASE("copy_pruned_state takes each slice's head blocks, head_mask entries, the rest whole, dtype and mode") {
  manual_seed(5);
  auto big = make_attention("mha(heads=3, key_size=2, value_size=2)", 6);
  big->to(kFloat64);
  big->eval();
  auto small = make_attention("mha(heads=2, key_size=2, value_size=2)", 6);  // float32, train mode
  {
    NoGradGuard ng;
    Tensor hm = big->get_buffer("head_mask");
    kernels::copy_(hm, from_vector<double>({0.5, 0.25, 0.125}));
  }
  const std::vector<int64_t> keep = {2, 0};
  copy_pruned_state(*big, *small, keep,
                    {{"q_proj.", 2}, {"k_proj.", 2, 0, {1, 2}}, {"v_proj.", 2}, {"out_proj.weight", 2, 1}}, "mha");
  CHECK(small->get_parameter("q_proj.weight").dtype() == kFloat64);
  CHECK_FALSE(small->is_training());
  const Tensor q = big->get_parameter("q_proj.weight");  // (6, 6): rows [2i, 2i+2) are head i
  CHECK(allclose(small->get_parameter("q_proj.weight"), cat({narrow(q, 0, 4, 2), narrow(q, 0, 0, 2)}, 0), 0, 0));
  const Tensor k = big->get_parameter("k_proj.bias");  // the slice's own heads 1, 2
  CHECK(allclose(small->get_parameter("k_proj.bias"), narrow(k, 0, 2, 4), 0, 0));
  const Tensor o = big->get_parameter("out_proj.weight");  // columns
  CHECK(allclose(small->get_parameter("out_proj.weight"), cat({narrow(o, 1, 4, 2), narrow(o, 1, 0, 2)}, 1), 0, 0));
  CHECK(allclose(small->get_parameter("out_proj.bias"), big->get_parameter("out_proj.bias"), 0, 0));  // whole
  CHECK(small->get_buffer("head_mask").to_vector<double>() == std::vector<double>{0.125, 0.5});
}

TEST_CASE("copy_pruned_state: a slice of the wrong size and a tensor only the smaller layer has are errors") {
  auto big = make_attention("mha(heads=3, key_size=2, value_size=2)", 6);
  auto small = make_attention("mha(heads=2, key_size=2, value_size=2)", 6);
  const std::vector<HeadSlice> wrong_q = {{"q_proj.", 3}, {"k_proj.", 2}, {"v_proj.", 2}, {"out_proj.weight", 2, 1}};
  const std::string wrong = error_of([&] { copy_pruned_state(*big, *small, {0, 1}, wrong_q, "mha"); });
  CHECK(wrong.find("mha: prune_heads: q_proj.") == 0);  // 3 rows per head: (6) from 2 heads, expected (4)
  CHECK(wrong.find("pruned to (6") != std::string::npos);
  CHECK(wrong.find("expected (4") != std::string::npos);
  CHECK_THROWS_AS(copy_pruned_state(*big, *small, {0, 1}, wrong_q, "mha"), ShapeError);
  auto gated = make_attention("mha(heads=2, key_size=2, value_size=2, gate=hard_concrete)", 6);
  const std::string lacks = error_of([&] {
    copy_pruned_state(*big, *gated, {0, 1}, {{"q_proj.", 2}, {"k_proj.", 2}, {"v_proj.", 2}, {"out_proj.weight", 2, 1}},
                      "mha");
  });
  CHECK(lacks == "mha: prune_heads: the smaller layer has gate.log_alpha which this one lacks");
  // A rest rule sees the undefined tensor and decides.
  copy_pruned_state(*big, *gated, {0, 1}, {{"q_proj.", 2}, {"k_proj.", 2}, {"v_proj.", 2}, {"out_proj.weight", 2, 1}},
                    "mha", [](const std::string& name, const Tensor& from, const Tensor& to) {
                      CHECK((name == "gate.log_alpha") == !from.defined());
                      return from.defined() ? from : to;
                    });
}
