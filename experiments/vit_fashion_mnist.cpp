// A small Vision Transformer on Fashion-MNIST 4x4 patches (49 tokens of 16 pixels), trained
// with AdamW and a warmup-cosine schedule. Plain C++ on the library: the data set, the
// EncoderClassifier assembly with `mha`, the fused cross-entropy, and the optimizer.
//
//   build/experiments/vit_fashion_mnist [epochs=5] [seed=0]
//   build/experiments/vit_fashion_mnist --help
//
// Prints the loss, throughput and test accuracy after every epoch.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "attnlab.hpp"
#include "experiments/data/fashion_mnist.hpp"
#include "experiments/runner/guard.hpp"
#include "nn/loss.hpp"
#include "nn/transformer.hpp"
#include "optim/adam.hpp"
#include "optim/schedule.hpp"

using namespace attnlab;

namespace {

double accuracy(nn::EncoderClassifier& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  const int64_t n = x.size(0), bs = 1000;
  for (int64_t i = 0; i < n; i += bs) {
    const int64_t b = std::min(bs, n - i);
    Tensor pred = argmax(model.forward(narrow(x, 0, i, b)), -1);      // (b)
    correct += sum(eq(pred, narrow(y, 0, i, b))).item<int64_t>();
  }
  model.train();
  return double(correct) / double(n);
}

int train(int epochs, uint64_t seed) {
  manual_seed(seed);
  auto train = data::load_fashion_mnist("train"), test = data::load_fashion_mnist("test");
  Tensor xtr = data::as_patches(train.images), xte = data::as_patches(test.images);  // (N, 49, 16)

  nn::EncoderConfig cfg;
  cfg.block.d_model = 64;
  cfg.block.attention = "mha(heads=4)";
  cfg.block.ffn_hidden = 128;
  cfg.layers = 3;
  cfg.input_dim = 16;
  cfg.max_len = 49;
  cfg.num_classes = 10;
  cfg.pooling = "mean";
  nn::EncoderClassifier model(cfg);

  const int64_t batch = 128, n = xtr.size(0), steps_per_epoch = n / batch, total = epochs * steps_per_epoch;
  optim::AdamW opt(optim::decay_groups(model.named_parameters(), 0.05), {.lr = 2e-3});
  optim::Scheduler sched(opt, optim::LRSchedule::warmup_cosine(200, total));
  std::printf("ViT on Fashion-MNIST patches: %lld parameters, %d epochs of %lld steps (batch %lld), %d threads\n",
              (long long)model.num_parameters(), epochs, (long long)steps_per_epoch, (long long)batch, num_threads());
  Generator shuffle(seed + 1);
  auto t0 = std::chrono::steady_clock::now();
  double acc = 0;
  for (int e = 0; e < epochs; ++e) {
    Tensor perm = argsort(rand({n}, shuffle));  // a fresh permutation per epoch
    double loss_sum = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      Tensor idx = narrow(perm, 0, s * batch, batch);
      Tensor loss = nn::cross_entropy(model.forward(index_select(xtr, 0, idx)), index_select(train.labels, 0, idx));
      const double value = optim::check_finite_loss(loss, "vit_fashion_mnist", e * steps_per_epoch + s + 1);
      opt.zero_grad();
      loss.backward();
      opt.step();
      sched.step();
      loss_sum += value;
    }
    acc = accuracy(model, xte, test.labels);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("epoch %d  train loss %.4f  test accuracy %.4f  (%.0f s, %.0f images/s)\n", e + 1,
                loss_sum / double(steps_per_epoch), acc, secs, double((e + 1) * steps_per_epoch * batch) / secs);
    std::fflush(stdout);
  }
  std::printf("final test accuracy %.4f\n", acc);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return runner::guarded("vit_fashion_mnist", [&] {
    int epochs = 5;
    uint64_t seed = 0;
    CLI::App app{"A small Vision Transformer (3 layers, mha(heads=4), d_model 64) on Fashion-MNIST 4x4 patches, "
                 "trained with AdamW; prints loss, throughput and test accuracy after every epoch.",
                 "vit_fashion_mnist"};
    app.add_option("epochs", epochs, "epochs over the 60000 training images (default 5)");
    app.add_option("seed", seed, "random seed (default 0)");
    app.footer("Needs the Fashion-MNIST files (experiments/data/fashion_mnist.hpp).");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e) == 0 ? 0 : int(runner::kGuardUsage);  // --help: 0; a bad argument: 2
    }
    if (epochs < 1) fail<runner::UsageError>("epochs must be >= 1, got {}", epochs);
    return train(epochs, seed);
  });
}
