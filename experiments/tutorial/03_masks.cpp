// Tutorial 3: masks: causal and padding masks, checked by perturbing what they hide.
// The lesson's explanation is printed as it runs (tutorial::say); --help prints the usage.
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;
using tutorial::show;

namespace {

void lesson() {
  say("A mask is a bool tensor broadcastable to the scores (B, h, N, M), true where query n may\n"
      "attend key m; disallowed scores get weight exactly 0 after softmax.\n"
      "  - causal: m <= n, so token n never sees the future (language models); `causal=true` builds it.\n"
      "  - padding: sequences of different lengths are padded to one N; a (B, 1, 1, M) key mask hides\n"
      "    the padding positions from every query.\n"
      "Each claim is checked by perturbing what the mask hides and seeing the outputs not move.");
  const int64_t B = 2, N = 5, D = 8;
  manual_seed(3);
  auto attn = nn::make_attention("mha(heads=2)", D);
  attn->to(kFloat64);
  Generator gen(4);
  Tensor x = randn({B, N, D}, gen, kFloat64);  // (B, N, D)

  tutorial::section("causal mask");
  Tensor causal = tril(ones({N, N}, kBool));  // (N, N), true = may attend
  show("causal mask (what causal=true uses)", causal);
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);
  show("attention of batch 0, head 0", select(select(r.attention, 0, 0), 0, 0));
  Tensor above = logical_not(causal);                                    // (N, N) the future
  const double future = max(abs(masked_fill(r.attention, logical_not(above), 0.0))).item();
  check(future == 0.0, "every weight on a future token is exactly 0");
  say("Change the last two tokens: the first three outputs must not move.");
  Tensor x2 = clone(x);
  {
    NoGradGuard ng;
    Tensor tail = narrow(x2, 1, 3, 2);
    copy_(tail, randn({B, 2, D}, gen, kFloat64));
  }
  Tensor y1 = attn->forward(x, {}, {}, true).output, y2 = attn->forward(x2, {}, {}, true).output;
  check(tutorial::max_abs_diff(narrow(y1, 1, 0, 3), narrow(y2, 1, 0, 3)) < 1e-12,
        "changing tokens 3 and 4 leaves the outputs at positions 0..2 unchanged");
  check(tutorial::max_abs_diff(narrow(y1, 1, 3, 2), narrow(y2, 1, 3, 2)) > 1e-3, "...and does change positions 3, 4");

  tutorial::section("padding mask");
  say("Sequence 0 has 5 real tokens, sequence 1 only 3: its positions 3 and 4 are padding.");
  Tensor real = from_vector<bool>({true, true, true, true, true, true, true, true, false, false}, {B, 1, 1, N});
  show("key mask (B, 1, 1, N)", real);
  auto rp = attn->forward(x, {}, real, false, true);
  show("attention of batch 1, head 0", select(select(rp.attention, 0, 1), 0, 0));
  const double on_padding = sum(narrow(select(rp.attention, 0, 1), -1, 3, 2)).item();
  check(on_padding == 0.0, "no query of sequence 1 puts weight on its padding");
  say("Whatever sits in the padding, the real tokens' outputs are the same.");
  Tensor x3 = clone(x);
  {
    NoGradGuard ng;
    Tensor pad = narrow(select(x3, 0, 1), 0, 3, 2);
    copy_(pad, randn({2, D}, gen, kFloat64, 0, 100));
  }
  Tensor z1 = attn->forward(x, {}, real).output, z3 = attn->forward(x3, {}, real).output;
  check(tutorial::max_abs_diff(narrow(z1, 1, 0, 3), narrow(z3, 1, 0, 3)) < 1e-12,
        "garbage in the padding leaves every real token's output unchanged");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 3: masks.", lesson);
}
