// Tutorial 8: the Synthesizer (seed 004; Tay et al. 2020): attention without queries and keys.
// The lesson's explanation is printed as it runs (tutorial::say); --help prints the usage.
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;
using tutorial::show;

namespace {

void lesson() {
  say("Dot-product attention computes each weight from a pair of tokens. The Synthesizer asks whether\n"
      "the pairwise interaction is needed at all:\n"
      "  - random: the logits are a learned (h, L, L) table, the same for every input;\n"
      "  - dense: row n of the logits is computed from token n alone by a two-layer MLP,\n"
      "    S[n, :] = w2 relu(w1 x[n]) (no token-token dot product).\n"
      "Both still mix the values with softmax weights, and the paper finds them competitive on\n"
      "several tasks. The checks below make the two properties concrete.");
  const int64_t B = 1, N = 5, D = 8;
  manual_seed(8);
  Generator gen(9);
  Tensor x1 = randn({B, N, D}, gen, kFloat64), x2 = randn({B, N, D}, gen, kFloat64);  // (B, N, D)

  tutorial::section("random synthesizer: one attention table for every input");
  auto random = nn::make_attention("synthesizer(parts=random, heads=2, max_len=8)", D);
  random->to(kFloat64);
  Tensor p1 = random->forward(x1, {}, {}, false, true).attention;  // (B, h, N, N)
  Tensor p2 = random->forward(x2, {}, {}, false, true).attention;
  show("attention of head 0 (input 1)", select(select(p1, 0, 0), 0, 0));
  check(tutorial::max_abs_diff(p1, p2) == 0.0, "two different inputs get the identical attention");
  check(tutorial::max_abs_diff(random->forward(x1).output, random->forward(x2).output) > 1e-3,
        "while the outputs differ (the values still come from the input)");

  tutorial::section("dense synthesizer: row n depends on token n only");
  auto dense = nn::make_attention("synthesizer(parts=dense, heads=2, max_len=8)", D);
  dense->to(kFloat64);
  Tensor x3 = clone(x1);
  {
    NoGradGuard ng;
    Tensor others = narrow(x3, 1, 1, N - 1);  // every token but token 0
    copy_(others, randn({B, N - 1, D}, gen, kFloat64));
  }
  Tensor d1 = dense->forward(x1, {}, {}, false, true).attention;  // (B, h, N, N)
  Tensor d3 = dense->forward(x3, {}, {}, false, true).attention;
  show("dense attention of head 0", select(select(d1, 0, 0), 0, 0));
  check(tutorial::max_abs_diff(narrow(d1, 2, 0, 1), narrow(d3, 2, 0, 1)) < 1e-15,
        "changing tokens 1..4 leaves row 0 of the attention unchanged (no keys are read)");
  check(tutorial::max_abs_diff(narrow(d1, 2, 1, N - 1), narrow(d3, 2, 1, N - 1)) > 1e-3,
        "...while the rows of the changed tokens move");

  tutorial::section("mha for contrast: row 0 reads every key");
  auto mha = nn::make_attention("mha(heads=2)", D);
  mha->to(kFloat64);
  Tensor m1 = mha->forward(x1, {}, {}, false, true).attention, m3 = mha->forward(x3, {}, {}, false, true).attention;
  check(tutorial::max_abs_diff(narrow(m1, 2, 0, 1), narrow(m3, 2, 0, 1)) > 1e-3,
        "in mha, row 0 of the attention moves when the other tokens change");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 8: the Synthesizer (seed 004; Tay et al. 2020): attention without queries and keys.", lesson);
}
