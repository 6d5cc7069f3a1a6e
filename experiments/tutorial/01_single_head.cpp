// Tutorial 1: single-head scaled dot-product attention, by hand, on 4 tokens.
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
  say("Attention turns each token's vector into a query q, a key k and a value v (three linear maps\n"
      "of the same input). Token n looks at every token m with the score q[n] . k[m] / sqrt(dk), turns\n"
      "its row of scores into weights that sum to 1 with softmax, and returns the weighted sum of the\n"
      "values. Every tensor below is printed with its shape; at the end the same numbers come out of\n"
      "the library's `mha(heads=1)` layer given the same weights.");
  const int64_t N = 4, D = 4, dk = 4;  // 4 tokens of width 4; one head with key size 4
  Generator gen(1);
  Tensor x = randn({N, D}, gen, kFloat64);                     // (N, D): one row per token
  Tensor wq = randn({D, dk}, gen, kFloat64, 0, 0.5);           // (D, dk)
  Tensor wk = randn({D, dk}, gen, kFloat64, 0, 0.5);           // (D, dk)
  Tensor wv = randn({D, dk}, gen, kFloat64, 0, 0.5);           // (D, dv)
  show("x (the 4 tokens)", x);

  tutorial::section("step 1: project every token to a query, a key and a value");
  Tensor q = matmul(x, wq);  // (N, dk)
  Tensor k = matmul(x, wk);  // (N, dk)
  Tensor v = matmul(x, wv);  // (N, dv)
  show("q = x Wq", q);
  show("k = x Wk", k);
  show("v = x Wv", v);

  tutorial::section("step 2: scores, one per (query n, key m) pair");
  say("Dividing by sqrt(dk) keeps the scores' spread near 1 whatever dk is, so softmax does not\n"
      "saturate when the key size grows.");
  Tensor scores = matmul(q, transpose(k, 0, 1)) / std::sqrt(double(dk));  // (N, N)
  show("scores = q k^T / sqrt(dk)", scores);

  tutorial::section("step 3: softmax along each row: weights that sum to 1");
  Tensor p = softmax(scores, -1);  // (N, N)
  show("P = softmax(scores)", p);
  show("row sums of P", sum(p, {1}));
  check(tutorial::max_abs_diff(sum(p, {1}), ones({N}, kFloat64)) < 1e-12, "every row of P sums to 1");

  tutorial::section("step 4: each output row is a weighted average of the values");
  Tensor out = matmul(p, v);  // (N, dv)
  show("out = P v", out);

  tutorial::section("the same computation in the library");
  say("mha(heads=1) with the same projections (a Linear stores W^T: y = x W^T + b), no biases and an\n"
      "identity out_proj gives exactly the hand-computed output and attention.");
  auto attn = nn::make_attention("mha(heads=1, key_size=4, value_size=4, bias=false)", D);
  attn->to(kFloat64);
  auto& mha = static_cast<nn::MultiHeadAttention&>(*attn);
  {
    NoGradGuard no_grad;
    copy_(mha.q_proj->weight, transpose(wq, 0, 1));
    copy_(mha.k_proj->weight, transpose(wk, 0, 1));
    copy_(mha.v_proj->weight, transpose(wv, 0, 1));
    copy_(mha.out_proj->weight, eye(D, kFloat64));
  }
  auto r = attn->forward(unsqueeze(x, 0), {}, {}, false, /*need_weights=*/true);  // x as (1, N, D)
  show("mha output", r.output);
  check(tutorial::max_abs_diff(select(r.output, 0, 0), out) < 1e-12, "mha(heads=1) output equals the hand computation");
  check(tutorial::max_abs_diff(select(select(r.attention, 0, 0), 0, 0), p) < 1e-12,
        "mha's attention (1, 1, N, N) equals the hand-computed P");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 1: single-head scaled dot-product attention, by hand, on 4 tokens.", lesson);
}
