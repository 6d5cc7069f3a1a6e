// Tutorial 2: multi-head attention, and why the heads are split.
// The lesson's explanation is printed as it runs (tutorial::say); --help prints the usage.
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;
using tutorial::show;

namespace {

void lesson() {
  say("One head gives each query a single softmax distribution over the keys: one way of looking at\n"
      "the sequence. Multi-head attention splits the projections into h slices (heads) of size\n"
      "dk = D/h; each head gets its own scores and its own softmax, so token n can attend to one token\n"
      "for one purpose and to another for another purpose in the same layer, at the same cost as one\n"
      "head of size D (the projections are the same matrices, cut into slices). The head outputs are\n"
      "concatenated and mixed by out_proj.");
  say("Below: the heads by hand from slices of mha's weights, the library's layer for comparison, and\n"
      "the two heads' attention patterns side by side.");
  const int64_t B = 1, N = 5, D = 8, h = 2, dk = D / h;
  manual_seed(2);
  auto attn = nn::make_attention("mha(heads=2)", D);  // dk = dv = D/h = 4
  attn->to(kFloat64);
  auto& mha = static_cast<nn::MultiHeadAttention&>(*attn);
  Generator gen(3);
  Tensor x = randn({B, N, D}, gen, kFloat64);  // (B, N, D)

  tutorial::section("projections: one matmul each for all heads");
  Tensor q = mha.q_proj->forward(x);  // (B, N, h*dk)
  Tensor k = mha.k_proj->forward(x);  // (B, N, h*dk)
  Tensor v = mha.v_proj->forward(x);  // (B, N, h*dv)
  fmt::print("q, k, v: {} each; head i owns columns [i*dk, (i+1)*dk)\n", to_string(q.shape()));

  tutorial::section("split: (B, N, h*dk) -> (B, h, N, dk)");
  Tensor qh = permute(reshape(q, {B, N, h, dk}), {0, 2, 1, 3});  // (B, h, N, dk)
  Tensor kh = permute(reshape(k, {B, N, h, dk}), {0, 2, 1, 3});  // (B, h, N, dk)
  Tensor vh = permute(reshape(v, {B, N, h, dk}), {0, 2, 1, 3});  // (B, h, N, dv)
  fmt::print("qh {}\n", to_string(qh.shape()));

  tutorial::section("per-head scores and softmax: the heads never see each other's scores");
  Tensor scores = matmul(qh, transpose(kh, -2, -1)) / std::sqrt(double(dk));  // (B, h, N, N)
  Tensor p = softmax(scores, -1);                                             // (B, h, N, N)
  show("head 0 attention", select(select(p, 0, 0), 0, 0));
  show("head 1 attention", select(select(p, 0, 0), 0, 1));
  const double differ = tutorial::max_abs_diff(select(p, 1, 0), select(p, 1, 1));
  fmt::print("largest difference between the two heads' patterns: {:.4f}\n", differ);
  check(differ > 0.05, "the two heads attend differently (their patterns differ by more than 0.05)");

  tutorial::section("merge: (B, h, N, dv) -> (B, N, h*dv), then out_proj");
  Tensor o = matmul(p, vh);                                         // (B, h, N, dv)
  Tensor merged = reshape(permute(o, {0, 2, 1, 3}), {B, N, h * dk});  // (B, N, h*dv)
  Tensor out = mha.out_proj->forward(merged);                       // (B, N, D)
  show("output", out);

  auto r = attn->forward(x, {}, {}, false, true);
  check(tutorial::max_abs_diff(r.output, out) < 1e-12, "the hand-split heads equal mha(heads=2)'s output");
  check(tutorial::max_abs_diff(r.attention, p) < 1e-12, "and its attention (B, h, N, N)");

  say("Same parameter count as one head of size D: splitting costs nothing in weights.");
  auto one = nn::make_attention("mha(heads=1)", D);
  fmt::print("parameters: mha(heads=2) {}, mha(heads=1) {}\n", attn->num_parameters(), one->num_parameters());
  check(attn->num_parameters() == one->num_parameters(), "h heads of size D/h have as many parameters as one of size D");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 2: multi-head attention, and why the heads are split.", lesson);
}
