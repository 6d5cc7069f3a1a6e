// Tutorial 6: talking-heads attention (seed 001; Shazeer et al. 2020).
// The lesson's explanation is printed as it runs (tutorial::say); --help prints the usage.
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/registry.hpp"
#include "nn/attention/talking_heads.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;
using tutorial::show;

namespace {

void lesson() {
  say("In mha every head's softmax sees only its own logits. Talking heads adds two small learned\n"
      "matrices that mix across heads: pre_mix (hk, h) combines the hk heads' logits before softmax,\n"
      "post_mix (h, hv) combines the h attention patterns after it. Each new logit map is a linear\n"
      "combination of all heads' q.k maps, so even with small dk a head's logits can have rank up to\n"
      "hk*dk. With both mixes the identity (and hk = h = hv), talking heads is exactly mha.");
  const int64_t B = 1, N = 5, D = 8, h = 2, dk = 4;
  manual_seed(6);
  auto mha = nn::make_attention("mha(heads=2)", D);
  auto th_layer = nn::make_attention("talking_heads(heads=2)", D);
  mha->to(kFloat64);
  th_layer->to(kFloat64);
  auto& th = static_cast<nn::TalkingHeadsAttention&>(*th_layer);
  tutorial::copy_shared(*mha, *th_layer);  // same q/k/v/out projections
  show("pre_mix as initialised (hk, h)", th.pre_mix);
  {
    NoGradGuard ng;
    copy_(th.pre_mix, eye(h, kFloat64));
    copy_(th.post_mix, eye(h, kFloat64));
  }
  Generator gen(7);
  Tensor x = randn({B, N, D}, gen, kFloat64);  // (B, N, D)

  tutorial::section("identity mixes");
  const double same = tutorial::max_abs_diff(th_layer->forward(x).output, mha->forward(x).output);
  fmt::print("max |talking_heads - mha| with identity mixes: {:.3e}\n", same);
  check(same < 1e-12, "talking_heads with identity pre/post mixes equals mha");

  tutorial::section("a real pre-softmax mix: each head's logits are a blend of both heads'");
  Tensor mix = from_vector<double>({0.8, 0.5, -0.3, 1.2}, {h, h});  // (hk, h)
  {
    NoGradGuard ng;
    copy_(th.pre_mix, mix);
  }
  show("pre_mix", mix);
  say("By hand: J_a = q_a . k_a / sqrt(dk) for the two logit heads, L_j = sum_a J_a pre_mix[a, j].");
  NoGradGuard ng;
  Tensor q = permute(reshape(th.q_proj->forward(x), {B, N, h, dk}), {0, 2, 1, 3});  // (B, hk, N, dk)
  Tensor k = permute(reshape(th.k_proj->forward(x), {B, N, h, dk}), {0, 2, 1, 3});  // (B, hk, N, dk)
  Tensor j = matmul(q, transpose(k, -2, -1)) / std::sqrt(double(dk));             // (B, hk, N, N)
  Tensor l = einsum("banm,aj->bjnm", {j, mix});                                    // (B, h, N, N)
  Tensor p = softmax(l, -1);                                                       // (B, h, N, N)
  auto r = th_layer->forward(x, {}, {}, false, true);
  show("talking-heads attention, head 0", select(select(r.attention, 0, 0), 0, 0));
  check(tutorial::max_abs_diff(r.attention, p) < 1e-12,
        "its attention is softmax of the mixed logits sum_a J_a pre_mix[a, j]");
  const double vs_mha = tutorial::max_abs_diff(r.attention, mha->forward(x, {}, {}, false, true).attention);
  check(vs_mha > 1e-3, "and differs from mha's per-head softmax");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 6: talking-heads attention (seed 001; Shazeer et al. 2020).", lesson);
}
