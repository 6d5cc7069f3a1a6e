// Tutorial 4: the key bias that does nothing (seed 000).
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
  say("With biases, q[n] = Wq x[n] + bq and k[m] = Wk x[m] + bk, so\n"
      "  q[n] . k[m] = q[n] . (Wk x[m]) + q[n] . bk.\n"
      "The second term depends on the query n but not on the key m: it adds the same constant to\n"
      "every score of row n. Softmax is shift-invariant along a row (softmax(s + c) = softmax(s)), so\n"
      "the attention weights, and the output, do not depend on bk at all. The query bias bq does not\n"
      "cancel: it meets Wk x[m], which varies with m. Hence `mha(key_bias=false)` loses nothing.");
  const int64_t B = 2, N = 5, D = 8, h = 2, dk = 4;
  manual_seed(4);
  auto attn = nn::make_attention("mha(heads=2)", D);
  attn->to(kFloat64);
  auto& mha = static_cast<nn::MultiHeadAttention&>(*attn);
  Generator gen(5);
  Tensor x = randn({B, N, D}, gen, kFloat64);  // (B, N, D)
  say("The scores of head 0, by hand (B, N, N), to see the per-row shift.");
  auto head0_scores = [&]() {
    NoGradGuard ng;
    Tensor q = narrow(mha.q_proj->forward(x), -1, 0, dk);  // (B, N, dk)
    Tensor k = narrow(mha.k_proj->forward(x), -1, 0, dk);  // (B, N, dk)
    return matmul(q, transpose(k, -2, -1)) / std::sqrt(double(dk));  // (B, N, N)
  };
  Tensor before = attn->forward(x).output;  // (B, N, D)
  Tensor s_before = head0_scores();

  tutorial::section("change k_proj.bias to large random values");
  {
    NoGradGuard ng;
    copy_(mha.k_proj->bias, randn({h * dk}, gen, kFloat64, 0, 10));
  }
  show("new k_proj.bias", mha.k_proj->bias);
  Tensor after = attn->forward(x).output;
  Tensor shift = s_before - head0_scores();  // (B, N, N)
  show("change of head 0's scores, batch 0 (constant along each row)", select(shift, 0, 0));
  const double spread = max(abs(shift - narrow(shift, -1, 0, 1))).item();
  check(spread < 1e-10, "the scores moved by one constant per row (the spread along a row is < 1e-10)");
  const double diff = tutorial::max_abs_diff(before, after);
  fmt::print("max |output before - output after| = {:.3e}\n", diff);
  check(diff < 1e-6, "the output with k_proj.bias changed equals the original to 1e-6");

  tutorial::section("the query bias is not redundant");
  {
    NoGradGuard ng;
    copy_(mha.q_proj->bias, randn({h * dk}, gen, kFloat64, 0, 1));
  }
  const double qdiff = tutorial::max_abs_diff(before, attn->forward(x).output);
  fmt::print("max |output change| after changing q_proj.bias = {:.3e}\n", qdiff);
  check(qdiff > 1e-3, "changing q_proj.bias does change the output");

  auto lean = nn::make_attention("mha(heads=2, key_bias=false)", D);
  fmt::print("parameters: mha(heads=2) {}, mha(heads=2, key_bias=false) {}\n", attn->num_parameters(),
             lean->num_parameters());
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 4: the key bias that does nothing (seed 000).", lesson);
}
