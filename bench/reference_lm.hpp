// The reference causal LM of the benchmarks (bench_lm, bench_generate, bench_decode,
// bench_mha_options --lm): 4 pre-norm layers, d = 256, 8 heads (in the attention spec), vocabulary
// 256, GELU feed-forward 4x, learned positions; bench/torch_lm.py and bench/torch_generate.py
// write the same model in PyTorch. Its training step: batch 8 of N = 256 random tokens,
// cross-entropy against random targets, AdamW (lr 1e-4).
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

// One model, its optimiser and a fixed batch; step() runs forward, loss, backward and the update.
struct LMTraining {
  static constexpr int64_t kBatch = 8, kLength = 256, kVocab = 256;
  explicit LMTraining(const std::string& attention)
      : model((manual_seed(0), reference_lm(attention, kLength))), opt(model.parameters(), {.lr = 1e-4}) {
    Generator gen(1);
    x = randint(0, kVocab, {kBatch, kLength}, gen);  // (B, N)
    y = randint(0, kVocab, {kBatch, kLength}, gen);  // (B, N)
  }
  // Returns the seconds of opt.step() alone.
  double step() {
    Tensor logits = reshape(model.forward(x), {kBatch * kLength, kVocab});  // (B N, V)
    Tensor loss = nn::cross_entropy(logits, reshape(y, {kBatch * kLength}));
    opt.zero_grad();
    loss.backward();
    const auto t0 = std::chrono::steady_clock::now();
    opt.step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  nn::CausalLM model;
  optim::AdamW opt;
  Tensor x, y;
};

}  // namespace attnlab::bench
