// bench_packed: causal LM training on the fortunes, packed rows against padded rows (docs/attention.md,
// "Packed sequences"; docs/performance.md). Real (non-padding) tokens per second of one AdamW
// training step of a CausalLM (4 layers, d=256, 8 heads, fused mha, learned positions), rows of
// N tokens, batch B:
//   packed  each row filled with whole fortunes and their segment ids (data::lm_packed_batch):
//           every token is real; the fused kernel skips the tile pairs across fortunes
//   padded  one fortune per row (cut at N), padded to N with targets ignored in the loss
//   windows random windows of the concatenated text, no segment ids (the lm default): every token
//           is real and attends across fortunes; the cost of the full causal triangle
//
//   bench_packed [--n N] [--batch B] [--steps S]
//
// Each figure is the median over S steps (after one warm-up step) of real tokens / step time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attnlab.hpp"
#include "bench_args.hpp"
#include "experiments/data/text.hpp"
#include "nn/loss.hpp"
#include "nn/transformer.hpp"
#include "optim/adam.hpp"

using namespace attnlab;
using attnlab::bench::median;
using Clock = std::chrono::steady_clock;

namespace {

struct Batch {
  Tensor inputs, targets, segment_ids;  // (B, N) each; segment_ids undefined when padded
  int64_t real = 0;                     // tokens that are not padding
};

// One fortune per row, cut at N, padded with token 0 and target -100 (ignored).
Batch padded_batch(const data::TextCorpus& c, int64_t B, int64_t N, Generator& gen) {
  const int64_t T = c.train.numel(), D = int64_t(c.train_docs.size());
  const int64_t* src = c.train.data<int64_t>();
  Batch b{zeros({B, N}, kInt64), full({B, N}, -100.0, kInt64), Tensor(), 0};
  int64_t *px = b.inputs.data<int64_t>(), *py = b.targets.data<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const int64_t d = int64_t(gen.next_u64() % uint64_t(D));
    const int64_t start = c.train_docs[d], end = d + 1 < D ? c.train_docs[d + 1] : T;
    const int64_t len = std::min(end - start - 1, N);  // inputs with a target inside the fortune
    for (int64_t n = 0; n < len; ++n) px[r * N + n] = src[start + n], py[r * N + n] = src[start + n + 1];
    b.real += len;
  }
  return b;
}

Batch window_batch(const data::TextCorpus& c, int64_t B, int64_t N, Generator& gen) {
  auto [x, y] = data::lm_batch(c.train, B, N, gen);
  return {x, y, Tensor(), B * N};
}

Batch packed_batch(const data::TextCorpus& c, int64_t B, int64_t N, Generator& gen) {
  data::PackedBatch p = data::lm_packed_batch(c.train, c.train_docs, B, N, gen);
  return {p.inputs, p.targets, p.segment_ids, B * N};
}

// Median real tokens per second of a training step on batches from `make`.
double tokens_per_second(const data::TextCorpus& c, int64_t B, int64_t N, int64_t steps,
                         Batch (*make)(const data::TextCorpus&, int64_t, int64_t, Generator&)) {
  manual_seed(0);
  nn::LMConfig cfg;
  cfg.block.d_model = 256;
  cfg.block.attention = "mha(heads=8)";
  cfg.layers = 4;
  cfg.vocab_size = c.vocab_size();
  cfg.max_len = N;
  nn::CausalLM model(cfg);
  optim::AdamW opt(model.parameters(), {.lr = 1e-4});
  Generator gen(1);
  std::vector<double> rates;
  for (int64_t s = 0; s <= steps; ++s) {
    Batch b = make(c, B, N, gen);
    const auto t0 = Clock::now();
    Tensor logits = model.forward(b.inputs, b.segment_ids);  // (B, N, V)
    Tensor loss = nn::cross_entropy(reshape(logits, {B * N, c.vocab_size()}), reshape(b.targets, {B * N}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0) rates.push_back(double(b.real) / dt);  // step 0 warms caches and the allocator
  }
  return median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 512, batch = 8;
  int64_t steps = 5;
  CLI::App app("bench_packed: the LM's training step on packed rows against padded rows");
  app.add_option("--n", n, "row length N")->check(CLI::Range(2, 1 << 20));
  app.add_option("--batch", batch, "rows per step B")->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", steps, "timed steps (the median is reported)")->check(CLI::Range(1, 100000));
  bench::parse_or_exit(app, argc, argv);
  const data::TextCorpus c = data::load_fortunes("char");
  const int64_t docs = int64_t(c.train_docs.size());
  fmt::print("causal LM training step (4 layers, d=256, 8 heads, fused mha), B={}, N={}, {} threads, median of {} steps\n",
             batch, n, num_threads(), steps);
  fmt::print("fortunes: {} training documents, mean {:.0f} characters\n", docs, double(c.train.numel()) / double(docs));
  const double packed = tokens_per_second(c, batch, n, steps, packed_batch);
  const double padded = tokens_per_second(c, batch, n, steps, padded_batch);
  const double windows = tokens_per_second(c, batch, n, steps, window_batch);
  fmt::print("{:<8} {:>14}\n", "rows", "real tokens/s");
  fmt::print("{:<8} {:>14.0f}\n{:<8} {:>14.0f}\n{:<8} {:>14.0f}\n", "packed", packed, "padded", padded, "windows",
             windows);
  fmt::print("packed / padded: {:.2f}x, packed / windows: {:.2f}x\n", packed / padded, packed / windows);
  return 0;
}
