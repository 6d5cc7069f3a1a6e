// Tutorial 10: head gates and pruning on a trained model (seed 002; Voita et al. 2019, Michel et
// al. 2019).
// The lesson's explanation is printed as it runs (tutorial::say); --help prints the usage.
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/mha.hpp"
#include "nn/transformer.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;

namespace {

struct Batch {
  Tensor tokens;  // (B, N) int64
  Tensor labels;  // (B) int64
};

Batch make_batch(int64_t b, int64_t n, Generator& gen) {
  Tensor tokens = randint(0, 8, {b, n}, gen);  // (B, N)
  return {tokens, contiguous(select(tokens, 1, 0))};
}

double accuracy(nn::EncoderClassifier& model, const Batch& batch) {
  NoGradGuard ng;
  Tensor pred = argmax(model.forward(batch.tokens), -1);  // (B)
  return mean(to(eq(pred, batch.labels), kFloat32)).item();
}

void lesson() {
  say("Many heads of a trained transformer can be removed with little loss. Two ways to find them:\n"
      "  - Hard Concrete gates (`gate=hard_concrete`): each head's output is multiplied by a\n"
      "    stochastic gate g in [0, 1] whose expected L0 norm is added to the loss; heads the task\n"
      "    does not need get pushed to g = 0 exactly.\n"
      "  - head importance (Michel et al.): the gradient of the loss with respect to a fixed\n"
      "    multiplier head_mask = 1 on each head, |dL/dm_i|, estimates how much head i matters.\n"
      "Then `prune_heads(keep)` returns a smaller layer holding only the kept heads' weights.");
  say("The task: tokens from a vocabulary of 8, label = the first token; a 1-layer encoder with a CLS\n"
      "token has to attend from CLS to position 1. A few seconds of training, then gates, importance,\n"
      "pruning and accuracy before and after.");
  manual_seed(10);
  nn::EncoderConfig cfg;
  cfg.block.d_model = 32;
  cfg.block.attention = "mha(heads=4, gate=hard_concrete)";
  cfg.layers = 1;
  cfg.vocab_size = 8;
  cfg.max_len = 6;
  cfg.num_classes = 8;
  nn::EncoderClassifier model(cfg);
  auto block = model.blocks->at<nn::TransformerBlock>(0);
  auto& attn = static_cast<nn::MultiHeadAttention&>(*block->attn);

  Generator data(11);
  const Batch test = make_batch(512, 6, data);
  model.eval();
  const double chance = accuracy(model, test);
  fmt::print("accuracy before training: {:.3f} (chance 0.125)\n", chance);

  tutorial::section("training with loss = cross entropy + 1.0 * expected L0 of the gates");
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  model.train();
  for (int step = 1; step <= 500; ++step) {
    Batch b = make_batch(64, 6, data);
    Tensor task = nn::cross_entropy(model.forward(b.tokens), b.labels);
    Tensor loss = task + nn::l0_penalty(model) * 1.0;
    optim::check_finite_loss(loss, "gate training", step);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 100 == 0) fmt::print("step {:>3}  task loss {:.4f}  expected L0 {:.3f}\n", step, task.item(), nn::l0_penalty(model).item());
  }
  model.eval();
  const double trained = accuracy(model, test);
  fmt::print("accuracy after training: {:.3f}\n", trained);
  check(trained > 0.9, "the trained model solves the task (accuracy > 0.9)");

  tutorial::section("gates and head importance");
  std::vector<double> gates = attn.gate->forward().to_vector<double>();  // eval-mode gates (h)
  attn.head_mask.requires_grad_();
  Tensor loss = nn::cross_entropy(model.forward(test.tokens), test.labels);
  loss.backward();
  std::vector<double> importance = abs(attn.head_mask.grad()).to_vector<double>();
  attn.head_mask.requires_grad_(false);
  for (size_t i = 0; i < gates.size(); ++i)
    fmt::print("head {}: gate {:.3f}  importance |dL/dm| {:.2e}\n", i, gates[i], importance[i]);

  tutorial::section("pruning");
  say("Heads whose gate is exactly 0 contribute nothing: removing them cannot change the output.");
  std::vector<int64_t> open;
  for (size_t i = 0; i < gates.size(); ++i)
    if (gates[i] > 0) open.push_back(int64_t(i));
  Tensor logits = [&] { NoGradGuard ng; return model.forward(test.tokens); }();
  if (!open.empty() && open.size() < gates.size()) {
    auto pruned = block->attn->prune_heads(open);
    pruned->eval();
    block->attn = pruned;
    Tensor after = [&] { NoGradGuard ng; return model.forward(test.tokens); }();
    fmt::print("pruned the {} closed head(s): {} -> {} attention parameters\n", gates.size() - open.size(),
               attn.num_parameters(), pruned->num_parameters());
    check(tutorial::max_abs_diff(after, logits) < 1e-4, "removing closed heads leaves the logits unchanged");
  } else {
    fmt::print("no gate closed exactly in this short run\n");
  }
  say("Keep only the single most important head (by |dL/dm|) and measure what is lost.");
  int64_t best = 0;
  for (size_t i = 0; i < importance.size(); ++i)
    if (importance[i] > importance[best] && gates[i] > 0) best = int64_t(i);
  auto full = block->attn;
  auto one = attn.prune_heads({best});
  one->eval();
  block->attn = one;
  const double one_head = accuracy(model, test);
  block->attn = full;
  fmt::print("accuracy with only head {} (most important): {:.3f}  (all heads: {:.3f})\n", best, one_head, trained);
  check(one->num_parameters() < attn.num_parameters(), "the one-head layer is smaller");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv,
                       "Tutorial 10: head gates and pruning on a trained model (seed 002; Voita et al. 2019, Michel "
                       "et al. 2019).",
                       lesson);
}
