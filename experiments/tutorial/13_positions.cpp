// Tutorial 13: positions. Attention without positions is permutation-equivariant; RoPE (Su et
// al. 2021) makes q . k depend on n - m only; ALiBi (Press et al. 2022) adds -slope |n - m| to the
// scores; learned positions (GPT-2's wpe, nn/positional.hpp) are a table trained with the model.
// Writes PNG heatmaps (experiments/plot/png.hpp) into the directory given as its argument.
#include <cmath>

#include "experiments/plot/png.hpp"
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "nn/rotary.hpp"
#include "nn/transformer.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;

namespace {

constexpr int64_t kD = 16, kN = 12;

std::vector<double> values_of(const Tensor& t) { return contiguous(to(t, kFloat64)).to_vector<double>(); }

void save(const std::string& dir, const std::string& file, plot::Heatmap h) {
  const std::string path = (std::filesystem::path(dir) / file).string();
  plot::save_heatmap(path, h);
  const plot::Image back = plot::read_png(path);
  fmt::print("wrote {} ({} x {} pixels)\n", path, back.width, back.height);
  check(back.width > h.cols && back.height > h.rows, fmt::format("{} is a readable PNG with a cell per value", file));
}

void no_positions() {
  tutorial::section("without positions, order is invisible");
  say("Attention treats its input as a set: scores compare contents, softmax normalises over all\n"
      "keys, the output is a weighted sum. Shuffle the tokens and every token sees the same\n"
      "neighbours with the same weights, so the outputs are shuffled the same way and nothing else\n"
      "changes. The model cannot tell 'dog bites man' from 'man bites dog'.");
  Generator gen(13);
  auto attn = nn::make_attention("mha(heads=2)", kD);
  attn->to(kFloat64);
  Tensor x = randn({1, kN, kD}, gen, kFloat64);  // (1, N, D)
  Tensor perm = from_vector(std::vector<int64_t>{3, 0, 7, 1, 11, 5, 2, 9, 4, 10, 6, 8}, {kN});
  NoGradGuard no_grad;
  Tensor out = (*attn)(x);                                       // (1, N, D)
  Tensor out_of_shuffled = (*attn)(index_select(x, 1, perm));    // (1, N, D)
  check(tutorial::max_abs_diff(out_of_shuffled, index_select(out, 1, perm)) < 1e-12,
        "attention(shuffled x) equals shuffled attention(x) to 1e-12");
  say("Adding a position vector to each token (here a random table, as learned positions start)\n"
      "breaks the symmetry: the same token at another place is another vector.");
  Tensor pos = randn({1, kN, kD}, gen, kFloat64);  // (1, N, D)
  Tensor a = (*attn)(x + pos), b = (*attn)(index_select(x, 1, perm) + pos);
  const double d = tutorial::max_abs_diff(b, index_select(a, 1, perm));
  fmt::print("with positions added: max |attention(shuffled) - shuffled attention| = {:.3f}\n", d);
  check(d > 1e-3, "with positions added, shuffling the input no longer just shuffles the output");
}

void rope(const std::string& dir) {
  tutorial::section("RoPE: the score depends on n - m only");
  say("RoPE rotates each pair of a query's (and key's) coordinates by an angle proportional to its\n"
      "position: pair i of the vector at position n turns by n * theta_i. A rotation by a and one by\n"
      "b leave a dot product turned by b - a, so q_n . k_m depends on the contents and on n - m, not\n"
      "on n and m themselves. Below: one fixed query vector placed at every position n and one key\n"
      "vector at every position m; the (n, m) table of scores is constant along each diagonal.");
  Generator gen(131);
  Tensor q = randn({1, kD}, gen, kFloat64), k = randn({1, kD}, gen, kFloat64);  // (1, dk) each
  std::vector<double> scores(kN * kN);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t m = 0; m < kN; ++m)
      scores[n * kN + m] = sum(nn::rope_rotate(q, n) * nn::rope_rotate(k, m)).item();
  double worst = 0;
  for (int64_t n = 1; n < kN; ++n)
    for (int64_t m = 1; m < kN; ++m) worst = std::max(worst, std::abs(scores[n * kN + m] - scores[(n - 1) * kN + m - 1]));
  fmt::print("score(n, m) for n = 5: ");
  for (int64_t m = 0; m < kN; ++m) fmt::print("{:.3f} ", scores[5 * kN + m]);
  fmt::print("\nmax |score(n, m) - score(n - 1, m - 1)| = {:.1e}\n", worst);
  check(worst < 1e-12, "RoPE scores are equal along every diagonal n - m = const (to 1e-12)");
  save(dir, "13_rope_scores.png", {"RoPE q.k by (n, m)", int(kN), int(kN), scores, {}, {}, "query n", "key m"});
}

void alibi(const std::string& dir) {
  tutorial::section("ALiBi: a fixed penalty on distance");
  say("ALiBi adds no vector at all: head i adds -slope_i * |n - m| to the score of query n and key m,\n"
      "so far keys are penalised linearly, each head at its own rate (slopes 2^-8/h, 2^-16/h, ...).\n"
      "Below, mha(alibi=true) and plain mha share weights; log P differs by exactly -slope |n - m| up\n"
      "to one constant per row, which softmax ignores (lesson 4).");
  const int64_t h = 4;
  auto plain = nn::make_attention("mha(heads=4)", kD);
  auto with = nn::make_attention("mha(heads=4, alibi=true)", kD);
  plain->to(kFloat64);
  with->to(kFloat64);
  tutorial::copy_shared(*plain, *with);
  Generator gen(132);
  Tensor x = randn({1, kN, kD}, gen, kFloat64);  // (1, N, D)
  NoGradGuard no_grad;
  Tensor lp = log(plain->forward(x, {}, {}, false, true).attention);  // (1, h, N, N)
  Tensor la = log(with->forward(x, {}, {}, false, true).attention);   // (1, h, N, N)
  const std::vector<double> slopes = nn::alibi_slopes(h);
  std::vector<double> bias(h * kN * kN);
  for (int64_t i = 0; i < h; ++i)
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t m = 0; m < kN; ++m) bias[(i * kN + n) * kN + m] = -slopes[i] * std::abs(double(n - m));
  Tensor rest = la - lp - from_vector(bias, {1, h, kN, kN});  // (1, h, N, N): one constant per row
  Tensor spread = amax(rest, {-1}) + amax(neg(rest), {-1});    // (1, h, N): max - min along each row
  fmt::print("slopes: {:.4f} {:.4f} {:.4f} {:.4f}; largest row spread of log Pa - log P + slope |n - m|: {:.1e}\n",
             slopes[0], slopes[1], slopes[2], slopes[3], max(spread).item());
  check(max(spread).item() < 1e-12, "ALiBi adds exactly -slope |n - m| to each head's scores (to 1e-12, up to a row constant)");
  std::vector<double> head0(bias.begin(), bias.begin() + kN * kN);
  save(dir, "13_alibi_bias.png", {"ALiBi bias, head 0", int(kN), int(kN), head0, {}, {}, "query n", "key m"});
}

void learned(const std::string& dir) {
  tutorial::section("learned positions, trained");
  say("GPT-2 learns a table pos_emb (max_len, D) added to the token embeddings. What it learns\n"
      "depends on the task. Task here: at every position n >= 3 predict the token that came 3\n"
      "positions earlier (random tokens from 8, so chance is 1/8). Only order can solve it: the\n"
      "model must learn to attend from n to n - 3. One layer, D = 32, 300 steps of Adam.");
  manual_seed(13);
  nn::LMConfig cfg;
  cfg.block.d_model = 32;
  cfg.block.attention = "mha(heads=2)";
  cfg.layers = 1;
  cfg.vocab_size = 8;
  cfg.max_len = 16;
  nn::CausalLM model(cfg);
  const int64_t lag = 3, N = 16;
  Generator data(133);
  auto batch = [&](int64_t b) {
    Tensor tokens = randint(0, 8, {b, N}, data);  // (B, N)
    std::vector<int64_t> t = tokens.to_vector<int64_t>(), target(b * N, -100);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t n = lag; n < N; ++n) target[i * N + n] = t[i * N + n - lag];
    return std::pair{tokens, from_vector(target, {b * N})};
  };
  optim::Adam opt(model.parameters(), {.lr = 3e-3});
  for (int step = 1; step <= 300; ++step) {
    auto [tokens, target] = batch(32);
    Tensor loss = nn::cross_entropy(reshape(model.forward(tokens), {-1, 8}), target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 100 == 0) fmt::print("step {:>3}  loss {:.4f}\n", step, loss.item());
  }
  model.eval();
  auto block = model.blocks->at<nn::TransformerBlock>(0);
  Tensor attention;
  block->attention_observer = [&](const nn::AttentionResult& r) { attention = r.attention; };
  auto [tokens, target] = batch(256);
  NoGradGuard no_grad;
  Tensor pred = reshape(argmax(model.forward(tokens), -1), {-1});  // (B N)
  Tensor scored = ne(target, -100.0);
  const double acc = sum(to(logical_and(eq(pred, target), scored), kFloat64)).item() / sum(to(scored, kFloat64)).item();
  fmt::print("accuracy on positions n >= 3: {:.3f} (chance 0.125)\n", acc);
  check(acc > 0.9, "the trained model copies the token 3 back (accuracy > 0.9): it uses positions");

  // Row n of the head that looks back 3: weight on key n - 3, averaged over the batch.
  Tensor mean_attn = mean(attention, {0});  // (h, N, N)
  double best = 0;
  int64_t best_head = 0;
  for (int64_t i = 0; i < 2; ++i) {
    double s = 0;
    for (int64_t n = lag; n < N; ++n) s += mean_attn.at({i, n, n - lag});
    if (s / double(N - lag) > best) best = s / double(N - lag), best_head = i;
  }
  fmt::print("head {} puts {:.2f} of each row's weight on the key 3 positions back\n", best_head, best);
  check(best > 0.5, "one head attends from n to n - 3 (mean weight > 0.5)");
  save(dir, "13_learned_attention.png",
       {fmt::format("head {} attention", best_head), int(N), int(N), values_of(select(mean_attn, 0, best_head)), {}, {},
        "query n", "key m"});

  say("The table itself: each row of pos_emb is a position's vector. Its cosine-similarity matrix\n"
      "shows which positions the model treats as alike; written as a heatmap with the table.");
  Tensor w = model.pos_emb->weight;                                 // (max_len, D)
  Tensor unit = w / sqrt(sum(w * w, {-1}, true));                   // (max_len, D)
  Tensor cosine = matmul(unit, transpose(unit, 0, 1));              // (max_len, max_len)
  save(dir, "13_learned_positions.png", {"learned pos_emb (position x dim)", int(N), 32, values_of(w), {}, {}, "position", "dim"});
  save(dir, "13_learned_cosine.png", {"cosine of pos_emb rows", int(N), int(N), values_of(cosine), {}, {}, "position", "position"});
}

void lesson(const std::string& dir) {
  say("Attention by itself does not know where a token is. This lesson shows what that means, then\n"
      "three ways positions get in: RoPE rotates queries and keys, ALiBi biases the scores, and\n"
      "learned positions are a trained table. Its heatmaps are PNG files in the directory given on\n"
      "the command line (default: the current directory).");
  no_positions();
  rope(dir);
  alibi(dir);
  learned(dir);
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run_in_dir(argc, argv, "Tutorial 13: positions (none, RoPE, ALiBi, learned), with PNG heatmaps.",
                              lesson);
}
