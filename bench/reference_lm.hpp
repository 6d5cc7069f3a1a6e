// The causal LMs of the benchmarks, each with a PyTorch twin written the same way:
//   - the reference LM (bench_lm, bench_generate, bench_decode, bench_mha_options --lm): 4 pre-norm
//     layers, d = 256, 8 heads (in the attention spec), vocabulary 256, GELU feed-forward 4x,
//     learned positions; its training step: batch 8 of N = 256 random tokens;
//   - GPT-2 small (bench_lm --gpt2-small): 12 layers, d = 768, 12 heads, vocabulary 50,257,
//     1,024 learned positions, GELU 4x, the LM head tied to the token embedding (or untied, with a
//     bias); its training step: batch 4 of N = 64 random tokens, the shape of llm.c's train_gpt2.c.
// bench/torch_lm.py and bench/torch_generate.py write the same models in PyTorch. A step is
// cross-entropy against random targets, then AdamW (lr 1e-4).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "attnlab.hpp"
#include "nn/loss.hpp"
#include "nn/transformer.hpp"
#include "optim/adam.hpp"

namespace attnlab::bench {

inline nn::LMConfig reference_lm(const std::string& attention, int64_t max_len) {
  nn::LMConfig cfg;
  cfg.block.d_model = 256;
  cfg.block.attention = attention;
  cfg.layers = 4;
  cfg.vocab_size = 256;
  cfg.max_len = max_len;
  return cfg;
}

// The shape of a benchmarked training step; the defaults are the reference LM's.
struct LMShape {
  int64_t batch = 8, length = 256;  // tokens per step: (batch, length)
  int64_t vocab = 256, d_model = 256, heads = 8, layers = 4, max_len = 256;
  bool tied = false;  // LMConfig::tie_weights
  std::string name = "reference";
};

// GPT-2 small (124M parameters tied), at llm.c's train_gpt2.c batch: 4 x 64 tokens.
inline LMShape gpt2_small(bool tied) {
  return {.batch = 4, .length = 64, .vocab = 50257, .d_model = 768, .heads = 12, .layers = 12, .max_len = 1024,
          .tied = tied, .name = tied ? "gpt2-small" : "gpt2-small-untied"};
}

// The FLOPs of one training step of `shape`'s model (mha, feed-forward 4 d_model, untied or
// tied head alike): every linear product forward (2 rows in out) and backward (twice that: the
// input's and the weight's gradients), and the attention products over the allowed causal pairs
// by FlashAttention-2's count (forward 4 pairs dk per head, backward 2.5 times the forward).
// Layer norm, GELU, softmax, the loss and AdamW are not counted: the step's FLOP/s against the
// sgemm peak says how close it comes to doing nothing but products.
inline double step_flops(const LMShape& s) {
  const double rows = double(s.batch * s.length), d = double(s.d_model), hidden = 4 * d;
  const double linear = 2 * rows * (4 * d * d + 2 * d * hidden) * double(s.layers) + 2 * rows * d * double(s.vocab);
  const double pairs = double(s.length) * double(s.length + 1) / 2;
  const double attention = 4.0 * double(s.batch) * pairs * d * double(s.layers);  // heads x dk = d_model
  return 3 * linear + 3.5 * attention;
}

inline nn::LMConfig lm_config(const LMShape& s) {
  nn::LMConfig cfg;
  cfg.block.d_model = s.d_model;
  cfg.block.attention = "mha(heads=" + std::to_string(s.heads) + ")";
  cfg.layers = s.layers;
  cfg.vocab_size = s.vocab;
  cfg.max_len = s.max_len;
  cfg.tie_weights = s.tied;
  return cfg;
}

// One model, its optimiser and a fixed batch; step() runs forward, loss, backward and the update.
struct LMTraining {
  static constexpr int64_t kBatch = 8, kLength = 256, kVocab = 256;  // the reference LM's step
  // The reference LM with the attention of spec `attention`.
  explicit LMTraining(const std::string& attention)
      : LMTraining(LMShape{}, (manual_seed(0), reference_lm(attention, kLength))) {}
  // The LM of `shape` (its attention: mha with shape.heads heads).
  explicit LMTraining(const LMShape& shape) : LMTraining(shape, (manual_seed(0), lm_config(shape))) {}
  // Returns the seconds of opt.step() alone.
  double step() {
    Tensor logits = reshape(model.forward(x), {shape.batch * shape.length, shape.vocab});  // (B N, V)
    Tensor loss = nn::cross_entropy(logits, reshape(y, {shape.batch * shape.length}));
    opt.zero_grad();
    loss.backward();
    const auto t0 = std::chrono::steady_clock::now();
    opt.step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  LMShape shape;
  nn::CausalLM model;
  optim::AdamW opt;
  Tensor x, y;

 private:
  LMTraining(const LMShape& s, const nn::LMConfig& cfg) : shape(s), model(cfg), opt(model.parameters(), {.lr = 1e-4}) {
    Generator gen(1);
    x = randint(0, shape.vocab, {shape.batch, shape.length}, gen);  // (B, N)
    y = randint(0, shape.vocab, {shape.batch, shape.length}, gen);  // (B, N)
  }
};

}  // namespace attnlab::bench
