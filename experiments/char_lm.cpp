// A 2-layer causal character language model on the `fortunes` text (Debian package
// `fortunes`), trained with AdamW; reports validation bits per character.
//
//   build/experiments/char_lm [steps=3500] [seed=0] [lr=3e-3] [checkpoint.safetensors]
//   build/experiments/char_lm --help
//
// With a checkpoint path, the trained model and its tokenizer are saved there for
// `attnlab generate --checkpoint PATH`.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "attnlab.hpp"
#include "experiments/data/text.hpp"
#include "experiments/runner/guard.hpp"
#include "nn/lm_checkpoint.hpp"
#include "nn/loss.hpp"
#include "nn/transformer.hpp"
#include "optim/adam.hpp"
#include "optim/clip.hpp"
#include "optim/schedule.hpp"

using namespace attnlab;

namespace {

// Mean validation cross-entropy in bits per character over fixed, non-overlapping windows.
double val_bpc(nn::CausalLM& model, const Tensor& val, int64_t seq_len, int64_t max_windows) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t windows = std::min(max_windows, (val.numel() - 1) / seq_len), batch = 32;
  double nats = 0;
  int64_t count = 0;
  for (int64_t w = 0; w < windows; w += batch) {
    const int64_t b = std::min(batch, windows - w);
    Tensor x = reshape(narrow(val, 0, w * seq_len, b * seq_len), {b, seq_len});
    Tensor y = reshape(narrow(val, 0, w * seq_len + 1, b * seq_len), {b, seq_len});
    Tensor logits = model.forward(x);  // (b, N, V)
    nats += nn::cross_entropy(reshape(logits, {b * seq_len, -1}), reshape(y, {-1}), -100, 0.0, "sum").item();
    count += b * seq_len;
  }
  model.train();
  return nats / double(count) / std::log(2.0);
}

struct Args {
  int64_t steps = 3500;
  uint64_t seed = 0;
  double lr = 3e-3;
  std::string checkpoint;  // "" = do not save
};

int train(const Args& a) {
  const int64_t steps = a.steps;
  const uint64_t seed = a.seed;
  const double lr = a.lr;
  manual_seed(seed);
  data::TextCorpus text = data::load_fortunes("char");
  const int64_t seq_len = 128, batch = 32;

  nn::LMConfig cfg;
  cfg.block.d_model = 128;
  cfg.block.attention = "mha(heads=4)";
  cfg.layers = 2;
  cfg.vocab_size = text.vocab_size();
  cfg.max_len = seq_len;
  nn::CausalLM model(cfg);
  optim::AdamW opt(optim::decay_groups(model.named_parameters(), 0.1), {.lr = lr});
  optim::Scheduler sched(opt, optim::LRSchedule::warmup_cosine(100, steps, 0.05));
  std::printf("char LM on fortunes: vocab %lld, %lld train / %lld val chars, %lld parameters, %lld steps of %lldx%lld\n",
              (long long)text.vocab_size(), (long long)text.train.numel(), (long long)text.val.numel(),
              (long long)model.num_parameters(), (long long)steps, (long long)batch, (long long)seq_len);
  Generator gen(seed + 1);
  auto t0 = std::chrono::steady_clock::now();
  double smooth = 0;
  for (int64_t s = 1; s <= steps; ++s) {
    auto [x, y] = data::lm_batch(text.train, batch, seq_len, gen);
    Tensor loss = nn::cross_entropy(reshape(model.forward(x), {batch * seq_len, -1}), reshape(y, {-1}));
    const double value = optim::check_finite_loss(loss, "char_lm", s);
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    sched.step();
    smooth = s == 1 ? value : 0.98 * smooth + 0.02 * value;
    if (s % 250 == 0 || s == steps) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double bpc = val_bpc(model, text.val, seq_len, s == steps ? 4000 : 200);
      std::printf("step %5lld  train %.3f bpc  val %.3f bpc  (%.0f s, %.0f tokens/s)\n", (long long)s,
                  smooth / std::log(2.0), bpc, secs, double(s * batch * seq_len) / secs);
      std::fflush(stdout);
    }
  }
  std::printf("final validation %.3f bits per character\n", val_bpc(model, text.val, seq_len, 4000));
  if (!a.checkpoint.empty()) {
    std::string hex;
    for (unsigned char b : text.byte_of) hex += fmt::format("{:02x}", b);
    nn::save_causal_lm(a.checkpoint, model,
                       {{"tokenizer.bytes", hex}, {"tokenizer.unk", text.has_unk ? "true" : "false"},
                        {"train.steps", std::to_string(steps)}});
    std::printf("saved %s (attnlab generate --checkpoint %s)\n", a.checkpoint.c_str(), a.checkpoint.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return runner::guarded("char_lm", [&] {
    Args a;
    CLI::App app{"A 2-layer causal character LM (mha(heads=4), d_model 128, context 128) on the fortunes corpus, "
                 "trained with AdamW; prints train and validation bits per character.",
                 "char_lm"};
    app.add_option("steps", a.steps, "optimizer steps (default 3500)");
    app.add_option("seed", a.seed, "random seed (default 0)");
    app.add_option("lr", a.lr, "peak learning rate (default 3e-3)");
    app.add_option("checkpoint", a.checkpoint,
                   "save the model and its tokenizer here for `attnlab generate --checkpoint FILE`");
    app.footer("Example: build/experiments/char_lm 3500 0 3e-3 lm.safetensors");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e) == 0 ? 0 : int(runner::kGuardUsage);  // --help: 0; a bad argument: 2
    }
    if (a.steps < 1) fail<runner::UsageError>("steps must be >= 1, got {}", a.steps);
    if (!(a.lr > 0)) fail<runner::UsageError>("lr must be > 0, got {}", a.lr);
    return train(a);
  });
}
